//! Helpers shared by the log store's integration tests, in both test binaries (`tests/it/`
//! and `tests/proc/`).
#![allow(dead_code)]

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{Config, KeyRing, Mode, SyncMode};
use walcrypt_openraft::kv::{NodeId, Request, TypeConfig};

/// Held by each test of the own-process binary (`tests/proc/`) for its whole run, so that no two
/// run at once there: they spawn and SIGKILL children that open logs. A test that panicked
/// while holding it does not stop the others.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// The value of the entry at (`term`, `index`): its length varies from 0 to about 3 KB.
pub fn value_for(term: u64, index: u64) -> Vec<u8> {
    let seed = term.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03);
    let len = (seed % 3000) as usize;
    (0..len)
        .map(|i| (seed >> (i % 56)) as u8 ^ i as u8)
        .collect()
}

/// A normal entry carrying `value_for(term, index)`.
pub fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Request {
            key: format!("k{index}"),
            value: value_for(term, index),
        }),
    }
}

/// Checks that `got` is the entry `entry(term, index)`.
pub fn assert_entry(got: &Entry<TypeConfig>, term: u64, index: u64) {
    assert_eq!(got.log_id, log_id(term, index), "log id at index {index}");
    match &got.payload {
        EntryPayload::Normal(req) => {
            assert_eq!(req.key, format!("k{index}"));
            assert!(
                req.value == value_for(term, index),
                "payload of entry {index} differs"
            );
        }
        other => panic!("entry {index}: unexpected payload {other:?}"),
    }
}

/// Small pages and segments, so a few hundred entries span many segment files, with the
/// library's default write buffer; `SyncMode::Durable`, the only one the store accepts.
pub fn small_segments(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(64 * 1024)
}

/// [`small_segments`] with a write buffer of one segment (64 KiB): the configuration of every
/// test but openraft's own suite.
pub fn config(mode: Mode, keys: &KeyRing) -> Config {
    small_segments(mode, keys).buffer_size(64 * 1024)
}

/// Segment files in a log directory.
pub fn segment_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".wal")
        })
        .count()
}

/// The real file system, with a gate in front of fdatasync: while the gate is closed every
/// `sync_data` waits (before syncing), for 10 s at most so a failing test cannot hang on it.
/// Counts the fdatasyncs started and finished.
#[derive(Default)]
pub struct GatedFs {
    closed: AtomicBool,
    pub started: AtomicU64,
    pub finished: AtomicU64,
}

impl GatedFs {
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
    pub fn open(&self) {
        self.closed.store(false, Ordering::SeqCst);
    }
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }
    pub fn finished(&self) -> u64 {
        self.finished.load(Ordering::SeqCst)
    }
}

pub struct Gated(pub Arc<GatedFs>);

struct GatedFile {
    file: Box<dyn StorageFile>,
    gate: Arc<GatedFs>,
}

impl StorageFile for GatedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.gate.started.fetch_add(1, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.gate.closed.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let synced = self.file.sync_data();
        self.gate.finished.fetch_add(1, Ordering::SeqCst);
        synced
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn file_len(&self) -> io::Result<u64> {
        self.file.file_len()
    }
}

impl Storage for Gated {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        let file = FsStorage.open(path, write)?;
        Ok(Box::new(GatedFile {
            file,
            gate: self.0.clone(),
        }))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = FsStorage.create_new(path)?;
        Ok(Box::new(GatedFile {
            file,
            gate: self.0.clone(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        FsStorage.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}

/// A seeded xorshift generator: the same seed, the same run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
