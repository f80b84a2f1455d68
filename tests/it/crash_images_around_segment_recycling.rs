//! Power failures at every step of recycling segment files: while a purge renames segments to
//! free files, while a free file is renamed, given its new header and zeros over its other
//! pages, synced and renamed into place (by the writer itself or by `prepare_next_segment`),
//! and while the log writes its first pages there. Each crash image keeps what was synced, drops, keeps or
//! tears (any subset of 512-byte sectors) each write since, and keeps or loses each directory
//! entry changed since the directory's last sync. Every image must reopen to a prefix of what
//! the current log appended from its oldest segment on, holding every record whose flush
//! returned Ok, and no record from an earlier life of a file: each record read back must be
//! the one appended at its LSN.
//!
//! WALCRYPT_CRASH_SEED sets the seed.

use crate::support;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use support::faults::{FaultStorage, Tear};
use support::{Rng, check_payload, crash_config, payload_for, seed_from_env};
use walcrypt::storage::{Storage, StorageFile};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 4096;
const SEGMENT: u64 = 8 * PAGE;

/// What the log has done so far, as the crash images are checked against it.
#[derive(Default)]
struct Expect {
    /// Every record appended, by LSN: its id.
    written: BTreeMap<Lsn, u64>,
    /// The id of the record being appended (its LSN is not known yet).
    pending: Option<u64>,
    /// Every record before this LSN was acknowledged by a flush.
    acked_to: Lsn,
    /// Start of the oldest segment the last purge left.
    oldest: Lsn,
}

struct Crasher {
    mode: Mode,
    keys: KeyRing,
    fault: FaultStorage,
    dir: PathBuf,
    scratch: PathBuf,
    expect: Mutex<Expect>,
    rng: Mutex<Rng>,
    images: Mutex<usize>,
    armed: std::sync::atomic::AtomicBool,
}

impl Crasher {
    /// A power failure now: builds the image, reopens it and checks it.
    fn crash(&self, step: &str) {
        if !self.armed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let n = {
            let mut images = self.images.lock().unwrap();
            *images += 1;
            *images
        };
        let image = self.scratch.join(format!("image-{n}"));
        {
            let mut rng = self.rng.lock().unwrap();
            self.fault
                .crash_image_with_names(&self.dir, &image, &mut rng, Tear::AnySectors);
        }
        let what = format!("{} image {n} at {step}", self.mode);
        let expect = self.expect.lock().unwrap();
        check_image(&image, self.mode, &self.keys, &expect, &what);
        drop(expect);
        std::fs::remove_dir_all(&image).unwrap();
    }
}

fn check_image(image: &Path, mode: Mode, keys: &KeyRing, expect: &Expect, what: &str) {
    let wal = Wal::open(image, config(mode, keys).recycle_segments(3))
        .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    wal.close().unwrap();
    let reader = Reader::open(image, Some(keys.clone())).unwrap();
    let read: Vec<(Lsn, u64)> = reader
        .records_from(Lsn::default())
        .map(|r| {
            let r = r.unwrap_or_else(|e| panic!("{what}: read: {e}"));
            let id = check_payload(r.kind, &r.payload).unwrap_or_else(|e| panic!("{what}: {e}"));
            (r.lsn, id)
        })
        .collect();
    // A prefix of what was appended from some record of the oldest retained segment (or
    // earlier, when a purge's removals were lost) on...
    let Some(&(first, _)) = read.first() else {
        assert!(
            !expect
                .written
                .range(expect.oldest..expect.acked_to)
                .any(|_| true),
            "{what}: nothing read back, but records were acknowledged"
        );
        return;
    };
    let mut expected = expect.written.range(first..).map(|(l, i)| (*l, *i));
    for (i, &(lsn, id)) in read.iter().enumerate() {
        match expected.next() {
            Some(e) if e == (lsn, id) => {}
            // The record being appended when the power failed may be there, last.
            None if expect.pending == Some(id) && i == read.len() - 1 => {}
            other => panic!(
                "{what}: record {i} read is id {id} at {lsn}, the log appended {other:?} there"
            ),
        }
    }
    assert!(
        first
            <= *expect
                .written
                .range(expect.oldest..)
                .next()
                .map(|(l, _)| l)
                .unwrap_or(&first),
        "{what}: the log starts at {first}, after its oldest retained record"
    );
    // ...holding every acknowledged record.
    let last = read.last().map(|r| r.0).unwrap_or_default();
    if let Some((&lsn, _)) = expect.written.range(..expect.acked_to).next_back()
        && lsn >= expect.oldest
    {
        assert!(
            last >= lsn,
            "{what}: acknowledged record at {lsn} lost (read up to {last})"
        );
    }
}

fn config(mode: Mode, keys: &KeyRing) -> Config {
    crash_config(mode, keys, SyncMode::Durable, PAGE)
}

/// The fault storage, with a crash image taken before each write, fdatasync, rename and
/// directory sync.
struct Stepping(Arc<Crasher>);

struct SteppingFile {
    inner: Box<dyn StorageFile>,
    crasher: Arc<Crasher>,
    name: String,
}

impl StorageFile for SteppingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.crasher
            .crash(&format!("write {offset}+{} of {}", buf.len(), self.name));
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.crasher.crash(&format!("fdatasync of {}", self.name));
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn file_len(&self) -> io::Result<u64> {
        self.inner.file_len()
    }
    fn fill_zeros(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.fill_zeros(offset, len)
    }
}

impl Stepping {
    fn file(&self, inner: Box<dyn StorageFile>, path: &Path) -> Box<dyn StorageFile> {
        Box::new(SteppingFile {
            inner,
            crasher: self.0.clone(),
            name: name(path),
        })
    }
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

impl Storage for Stepping {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.0.fault.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.0.fault.open(path, write)?;
        Ok(self.file(inner, path))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.0.fault.create_new(path)?;
        Ok(self.file(inner, path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0
            .crash(&format!("rename {} to {}", name(from), name(to)));
        self.0.fault.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.0.fault.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.0.crash("directory sync");
        self.0.fault.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.0.fault.create_dir_all(dir)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        self.0.fault.lock_dir(dir)
    }
}

fn one_mode(mode: Mode, seed: u64) -> usize {
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let scratch = tmp.path().join("images");
    let crasher = Arc::new(Crasher {
        mode,
        keys: keys.clone(),
        fault: FaultStorage::new(),
        dir: dir.clone(),
        scratch,
        expect: Mutex::new(Expect::default()),
        rng: Mutex::new(Rng::new(seed)),
        images: Mutex::new(0),
        armed: false.into(),
    });
    let storage: Arc<dyn Storage> = Arc::new(Stepping(crasher.clone()));
    let wal = Wal::open(
        &dir,
        config(mode, &keys).recycle_segments(3).storage(storage),
    )
    .unwrap();
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut id = 1;
    for round in 0..6u64 {
        // Fill about two segments, flushing now and then; then purge all but the last two.
        let to = u64::from(wal.end_lsn()) + 2 * SEGMENT;
        while u64::from(wal.end_lsn()) < to {
            crasher.expect.lock().unwrap().pending = Some(id);
            let (kind, payload) = payload_for(id);
            let lsn = wal.append(kind, &payload).unwrap();
            {
                let mut expect = crasher.expect.lock().unwrap();
                expect.written.insert(lsn, id);
                expect.pending = None;
            }
            id += 1;
            if rng.chance(40) {
                wal.flush(lsn).unwrap();
                crasher.expect.lock().unwrap().acked_to = wal.flushed_lsn();
            }
            if rng.chance(5) {
                // The next segment made ahead, from the pool when it can be.
                wal.prepare_next_segment().unwrap();
            }
        }
        wal.flush(wal.end_lsn()).unwrap();
        crasher.expect.lock().unwrap().acked_to = wal.flushed_lsn();
        // From the second round on, crash at every step.
        crasher
            .armed
            .store(round >= 1, std::sync::atomic::Ordering::Relaxed);
        let end = u64::from(wal.flushed_lsn());
        let keep_from = (end - end % SEGMENT).saturating_sub(SEGMENT);
        // Images taken during the purge may or may not hold the segments it removes.
        crasher.expect.lock().unwrap().oldest = Lsn(keep_from);
        wal.purge_before(Lsn(keep_from)).unwrap();
    }
    wal.close().unwrap();
    *crasher.images.lock().unwrap()
}

#[test]
fn crash_images_around_segment_recycling_keep_acknowledged_and_never_stale_records() {
    let seed = seed_from_env("WALCRYPT_CRASH_SEED");
    for mode in Mode::ALL {
        let images = one_mode(mode, seed);
        assert!(images > 50, "{mode}: only {images} crash images");
        println!("{mode}: {images} crash images, seed {seed}");
    }
}
