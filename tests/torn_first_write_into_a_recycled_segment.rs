//! A reused segment file keeps its earlier life's pages until the log overwrites them. When
//! the first write of a page there is torn by a power failure after its first 512-byte sector
//! or its first 4 KiB block, the page holds the new header and the first records, then sectors
//! of the stale page: intact records of another position, under another IV in pagelevel. The
//! reopened log must hold exactly a prefix of what was appended, with every acknowledged
//! record, and none of the stale ones.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use support::hooked::{Hooked, Hooks};
use support::{check_payload, payload_for};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 8192;
const SEGMENT: u64 = 8 * PAGE;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .buffer_size(4 * PAGE as usize)
        .prepare_segments(false)
        .recycle_segments(4)
}

type Decode = fn(u8, &[u8]) -> Result<u64, String>;

struct Tearer {
    mode: Mode,
    keys: KeyRing,
    dir: PathBuf,
    scratch: PathBuf,
    /// Segments from this start on are reused files (set once the pool is filled).
    reused_from: Mutex<Option<u64>>,
    /// Records appended (LSN to id) and the end of what flushes acknowledged.
    written: Mutex<(BTreeMap<Lsn, u64>, Lsn)>,
    /// The id a record's kind and payload carry.
    decode: Decode,
    /// Pages of reused segments written so far.
    first_writes: Mutex<std::collections::HashSet<u64>>,
    torn: Mutex<usize>,
}

impl Hooks for Tearer {
    fn write(&self, path: &Path, offset: u64, buf: &[u8]) {
        let Some(from) = *self.reused_from.lock().unwrap() else {
            return;
        };
        // A reused file's handle was opened under its temporary name, before its rename.
        let name = path.file_name().unwrap().to_string_lossy();
        let Some(start) =
            walcrypt::inspect::parse_segment_file_name(name.strip_suffix(".tmp").unwrap_or(&name))
        else {
            return;
        };
        if u64::from(start) < from {
            return;
        }
        // Each page of a reused segment the first time the log writes it (header first): the
        // pages of the write before it land whole, that one in part.
        let mut at = offset.next_multiple_of(PAGE).max(PAGE);
        while at < offset + buf.len() as u64 {
            let page = u64::from(start) + at;
            if self.first_writes.lock().unwrap().insert(page) {
                for keep in [512, 4096] {
                    let end = (at - offset) as usize + keep;
                    if buf.len() > end {
                        self.tear(offset, &buf[..end], at, page);
                    }
                }
            }
            at += PAGE;
        }
    }
}

impl Tearer {
    /// The directory as it is, with only `kept` of the pending write at `offset` of the
    /// segment file holding `page` on disk: the rest of the page keeps what the file's earlier life wrote there.
    fn tear(&self, offset: u64, kept: &[u8], page_at: u64, page: u64) {
        let n = {
            let mut torn = self.torn.lock().unwrap();
            *torn += 1;
            *torn
        };
        let image = self.scratch.join(format!("image-{n}"));
        support::copy_dir(&self.dir, &image);
        let file = image.join(walcrypt::inspect::segment_file_name(Lsn(page - page_at)));
        let mut bytes = std::fs::read(&file).unwrap();
        let at = offset as usize;
        let torn_from = at + kept.len();
        let page_end = (page_at + PAGE) as usize;
        assert!(
            bytes[torn_from..page_end].iter().any(|b| *b != 0),
            "the page at {page} is stale, not zeros"
        );
        bytes[at..torn_from].copy_from_slice(kept);
        std::fs::write(&file, bytes).unwrap();
        let what = format!(
            "{}: page {} torn after {} bytes",
            self.mode,
            Lsn(page),
            torn_from - page_at as usize
        );
        let (written, acked_to) = self.written.lock().unwrap().clone();
        check_image(&image, self, &written, acked_to, &what);
        std::fs::remove_dir_all(&image).unwrap();
    }
}

fn check_image(
    image: &Path,
    tearer: &Tearer,
    written: &BTreeMap<Lsn, u64>,
    acked_to: Lsn,
    what: &str,
) {
    let keys = &tearer.keys;
    Wal::open(image, config(tearer.mode, keys))
        .unwrap_or_else(|e| panic!("{what}: reopen: {e}"))
        .close()
        .unwrap();
    let reader = Reader::open(image, Some(keys.clone())).unwrap();
    let read: Vec<(Lsn, u64)> = reader
        .records_from(Lsn::default())
        .map(|r| {
            let r = r.unwrap_or_else(|e| panic!("{what}: read: {e}"));
            let id = (tearer.decode)(r.kind, &r.payload).unwrap_or_else(|e| panic!("{what}: {e}"));
            (r.lsn, id)
        })
        .collect();
    let first = read.first().map(|r| r.0).unwrap_or_default();
    let expected: Vec<(Lsn, u64)> = written.range(first..).map(|(l, i)| (*l, *i)).collect();
    assert!(
        read.len() <= expected.len() && read[..] == expected[..read.len()],
        "{what}: not a prefix of what was appended: {:?} against {:?}",
        read.last(),
        expected.get(read.len().saturating_sub(1))
    );
    let acked = written.range(first..acked_to).count();
    assert!(
        read.len() >= acked,
        "{what}: {} records back, {acked} acknowledged",
        read.len()
    );
}

/// Appends records made by `record` (from id 1) over four segments, purges them into the
/// pool, then appends over four more (reused) segments, tearing the first write of each of
/// their pages. Returns how many tears were checked.
fn run(mode: Mode, record: fn(u64) -> (u8, Vec<u8>), decode: Decode, flush_every: u64) -> usize {
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let tearer = Arc::new(Tearer {
        mode,
        keys: keys.clone(),
        dir: dir.clone(),
        scratch: tmp.path().join("images"),
        reused_from: Mutex::new(None),
        written: Mutex::new((BTreeMap::new(), Lsn::default())),
        decode,
        first_writes: Mutex::default(),
        torn: Mutex::new(0),
    });
    let storage = Arc::new(Hooked(tearer.clone()));
    let wal = Wal::open(&dir, config(mode, &keys).storage(storage)).unwrap();
    let mut id = 1;
    let mut append_to = |to: u64| {
        while u64::from(wal.end_lsn()) < to {
            let (kind, payload) = record(id);
            let lsn = wal.append(kind, &payload).unwrap();
            tearer.written.lock().unwrap().0.insert(lsn, id);
            id += 1;
            if id % flush_every == 0 {
                wal.flush(lsn).unwrap();
                tearer.written.lock().unwrap().1 = wal.flushed_lsn();
            }
        }
        wal.flush(wal.end_lsn()).unwrap();
        tearer.written.lock().unwrap().1 = wal.flushed_lsn();
    };
    append_to(4 * SEGMENT + PAGE);
    assert_eq!(wal.purge_before(Lsn(4 * SEGMENT)).unwrap(), 4, "{mode}");
    *tearer.reused_from.lock().unwrap() = Some(5 * SEGMENT);
    append_to(8 * SEGMENT + PAGE);
    wal.close().unwrap();
    *tearer.torn.lock().unwrap()
}

#[test]
fn torn_first_write_into_a_recycled_segment_returns_only_acknowledged_records() {
    for mode in Mode::ALL {
        let torn = run(mode, payload_for, check_payload, 3);
        // Of the 22 pages written into reused segments, those whose first write is longer
        // than 512 bytes (or 4 KiB) are torn.
        assert!(torn >= 20, "{mode}: only {torn} torn pages");
        println!("{mode}: {torn} torn first writes");
    }
}

/// A 16-byte plaintext record (12-byte header, the id as 4 bytes): 16 divides the first 512
/// bytes of a page body, its first 4 KiB and the whole body, so every page of every segment
/// has the same layout, and a tear after 512 bytes or 4 KiB ends exactly between two records.
fn tiny_record(id: u64) -> (u8, Vec<u8>) {
    (7, (id as u32).to_le_bytes().to_vec())
}

fn tiny_id(kind: u8, payload: &[u8]) -> Result<u64, String> {
    match <[u8; 4]>::try_from(payload) {
        Ok(id) if kind == 7 => Ok(u64::from(u32::from_le_bytes(id))),
        _ => Err(format!(
            "not a tiny record: kind {kind}, {} bytes",
            payload.len()
        )),
    }
}

#[test]
fn torn_first_write_over_a_page_of_the_same_layout_returns_no_stale_record() {
    // The stale page holds an intact record of the earlier life exactly where the torn write
    // ends: only the LSN its checksum binds tells it from the next record of this one.
    assert_eq!(
        (PAGE as usize - walcrypt::inspect::PAGE_HEADER_LEN) % 16,
        0,
        "the layout repeats"
    );
    let torn = run(Mode::Plaintext, tiny_record, tiny_id, 700);
    assert!(torn >= 30, "only {torn} torn pages");
}
