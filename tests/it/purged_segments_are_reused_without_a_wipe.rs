//! `purge_before` keeps purged segment files (up to `Config::recycle_segments`) as
//! `<segment name>.free`, and the segments made after it are those very files (same inode),
//! with only the header page rewritten: no wipe in the encrypted modes (reusing a file writes
//! one page, not a segment's worth of zeros, and the storage sees no `fill_zeros` until the pool
//! is empty), a wipe in plaintext (see `recycle::keeps_old_bytes`). The pages the log has not
//! reached keep the file's earlier life (zeros in plaintext); the page the log ends in holds
//! zeros after the end. The log reads back exactly what was appended since the purge, before
//! and after a reopen. With recycling off, nothing is kept and every new segment is
//! zero-filled.

use crate::support;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use support::faults::{FaultStorage, Op};
use support::{check_payload, crash_config, payload_for};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 4096;
const SEGMENT: u64 = 8 * PAGE;

fn config(mode: Mode, keys: &KeyRing, storage: &FaultStorage, recycle: usize) -> Config {
    crash_config(mode, keys, SyncMode::Durable, PAGE)
        .recycle_segments(recycle)
        .storage(storage.arc())
}

/// Appends records from `id` on until the log ends at or beyond `to`; returns the next id.
fn append_to(wal: &Wal, mut id: u64, to: u64, written: &mut HashMap<Lsn, u64>) -> u64 {
    while u64::from(wal.end_lsn()) < to {
        let (kind, payload) = payload_for(id);
        let lsn = wal.append(kind, &payload).unwrap();
        wal.flush(lsn).unwrap();
        written.insert(lsn, id);
        id += 1;
    }
    id
}

/// Inode numbers of the free files of `dir`, by name.
fn free_files(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".free"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, e.metadata().unwrap().ino())
        })
        .collect();
    out.sort();
    out
}

fn ino(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

/// Every record of the log must be the one appended at its LSN, and every record appended
/// from `first` on must be there.
fn check_log(dir: &Path, keys: &KeyRing, written: &HashMap<Lsn, u64>, first: Lsn, what: &str) {
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    let mut seen = 0;
    for record in reader.records_from(Lsn::default()) {
        let record = record.unwrap_or_else(|e| panic!("{what}: {e}"));
        let id =
            check_payload(record.kind, &record.payload).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            written.get(&record.lsn),
            Some(&id),
            "{what}: record at {}",
            record.lsn
        );
        seen += 1;
    }
    let expected = written.keys().filter(|l| **l >= first).count();
    assert_eq!(seen, expected, "{what}: records from {first}");
}

#[test]
fn purged_segments_are_reused_without_a_wipe() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let storage = FaultStorage::new();
        let wal = Wal::open(dir, config(mode, &keys, &storage, 3)).unwrap();
        let mut written = HashMap::new();
        let id = append_to(&wal, 1, 5 * SEGMENT + PAGE, &mut written);

        // Segments 0..=4 go; the newest three of them are kept.
        let old: Vec<u64> = (0..5).map(|i| ino(&dir.join(seg_name(i)))).collect();
        assert_eq!(wal.purge_before(Lsn(5 * SEGMENT)).unwrap(), 5, "{mode}");
        let free = free_files(dir);
        let names: Vec<&str> = free.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [2, 3, 4].map(|i| format!("{}.free", seg_name(i))),
            "{mode}: the newest purged segments are kept"
        );
        assert_eq!(
            free.iter().map(|f| f.1).collect::<Vec<_>>(),
            old[2..],
            "{mode}"
        );

        // What the oldest kept file held past its first pages, before it is reused.
        let held = std::fs::read(dir.join(format!("{}.free", seg_name(2)))).unwrap();
        assert!(
            held[3 * PAGE as usize..].iter().any(|&b| b != 0),
            "{mode}: the purged segment was written"
        );

        // The next three segments are those files, newest first, not wiped: making each costs
        // one write (its header page). A plaintext log wipes each.
        let wiped = mode == Mode::Plaintext;
        let zeros = storage.count(Op::FillZeros);
        let id = append_to(&wal, id, 8 * SEGMENT + PAGE, &mut written);
        assert_eq!(
            storage.count(Op::FillZeros),
            zeros,
            "{mode}: a reused file is not zero-filled as a new one (plaintext writes its zeros)"
        );
        let zeros = storage.count(Op::FillZeros);
        assert!(free_files(dir).is_empty(), "{mode}: the pool is used up");
        let reused: Vec<u64> = (6..9).map(|i| ino(&dir.join(seg_name(i)))).collect();
        assert_eq!(
            reused,
            [old[4], old[3], old[2]],
            "{mode}: purged files reappear under later names"
        );
        // Segment 8 (segment 2's file) was written into its second page or a little further:
        // the pages after the one the log ends in are as segment 2 left them, and that page
        // holds zeros after the end.
        let now = std::fs::read(dir.join(seg_name(8))).unwrap();
        let end = (u64::from(wal.end_lsn()) - 8 * SEGMENT) as usize;
        let next_page = end - end % PAGE as usize + PAGE as usize;
        assert!(next_page < SEGMENT as usize, "{mode}");
        match wiped {
            true => assert!(
                now[next_page..].iter().all(|&b| b == 0),
                "{mode}: the pages the log has not reached are wiped"
            ),
            false => assert!(
                now[next_page..] == held[next_page..],
                "{mode}: the pages the log has not reached keep the earlier life"
            ),
        }
        assert!(
            now[end..next_page].iter().all(|&b| b == 0),
            "{mode}: the page the log ends in holds zeros after the end"
        );
        check_log(
            dir,
            &keys,
            &written,
            Lsn(5 * SEGMENT),
            &format!("{mode} live"),
        );

        // With the pool empty, the next segment is made and zero-filled.
        let id = append_to(&wal, id, 9 * SEGMENT + PAGE, &mut written);
        assert_eq!(storage.count(Op::FillZeros), zeros + 1, "{mode}");
        wal.close().unwrap();
        check_log(
            dir,
            &keys,
            &written,
            Lsn(5 * SEGMENT),
            &format!("{mode} closed"),
        );

        // Reopened, the log goes on; a purge refills the pool.
        let wal = Wal::open(dir, config(mode, &keys, &storage, 3)).unwrap();
        let _ = append_to(&wal, id, 10 * SEGMENT + 2 * PAGE, &mut written);
        assert_eq!(wal.purge_before(Lsn(9 * SEGMENT)).unwrap(), 4, "{mode}");
        assert_eq!(free_files(dir).len(), 3, "{mode}");
        wal.close().unwrap();
        check_log(
            dir,
            &keys,
            &written,
            Lsn(9 * SEGMENT),
            &format!("{mode} reopened"),
        );
    }
}

#[test]
fn with_recycling_off_purged_segments_are_unlinked_and_new_ones_zero_filled() {
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let storage = FaultStorage::new();
    let wal = Wal::open(dir, config(Mode::PerRecord, &keys, &storage, 0)).unwrap();
    let mut written = HashMap::new();
    let id = append_to(&wal, 1, 3 * SEGMENT + PAGE, &mut written);
    assert_eq!(wal.purge_before(Lsn(3 * SEGMENT)).unwrap(), 3);
    assert!(free_files(dir).is_empty());
    let zeros = storage.count(Op::FillZeros);
    let _ = append_to(&wal, id, 5 * SEGMENT + PAGE, &mut written);
    assert_eq!(storage.count(Op::FillZeros), zeros + 2);
    wal.close().unwrap();
}

#[test]
fn an_open_with_recycling_off_removes_the_free_files() {
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let storage = FaultStorage::new();
    let wal = Wal::open(dir, config(Mode::Plaintext, &keys, &storage, 2)).unwrap();
    let mut written = HashMap::new();
    let _ = append_to(&wal, 1, 3 * SEGMENT + PAGE, &mut written);
    wal.purge_before(Lsn(3 * SEGMENT)).unwrap();
    wal.close().unwrap();
    assert_eq!(free_files(dir).len(), 2);
    // Kept by an open that recycles...
    Wal::open(dir, config(Mode::Plaintext, &keys, &storage, 2))
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(free_files(dir).len(), 2);
    // ...removed by one that does not.
    Wal::open(dir, config(Mode::Plaintext, &keys, &storage, 0))
        .unwrap()
        .close()
        .unwrap();
    assert!(free_files(dir).is_empty());
}

fn seg_name(i: u64) -> String {
    walcrypt::inspect::segment_file_name(Lsn(i * SEGMENT))
}
