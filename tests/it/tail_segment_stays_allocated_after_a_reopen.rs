//! Reopening a log whose tail was torn leaves the rest of the tail segment allocated (written
//! zeros), as a new segment is created: durable commits into it then allocate no blocks, so
//! their fdatasyncs commit no file-system metadata. Cutting the torn tail away by shrinking
//! the file and growing it again would leave a hole there. A segment file cut short by a
//! crash is extended with written zeros, not with a hole either.

use crate::support;

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use support::{payload, read_all};
use walcrypt::inspect::segment_file_name;
use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

const SEGMENT: u64 = 256 * 1024;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

/// Bytes the file system has allocated to `path` (`st_blocks` counts 512-byte units).
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// A log of a few durable records in its first segment; returns its end and what it holds.
fn log(dir: &Path, mode: Mode, keys: &KeyRing) -> (u64, Vec<(Lsn, u8, Vec<u8>)>) {
    let wal = Wal::open(dir, config(mode, keys)).unwrap();
    let mut last = Lsn::default();
    for i in 0..6 {
        last = wal.append(1, &payload(20 + i, 700)).unwrap();
        wal.flush(last).unwrap();
    }
    wal.close().unwrap();
    let records = read_all(dir, Some(keys.clone()));
    let end = walcrypt::Reader::open(dir, Some(keys.clone()))
        .unwrap()
        .records_from(last)
        .next()
        .unwrap()
        .unwrap()
        .end_lsn;
    (u64::from(end), records)
}

/// Whether the file system reports a new segment, written whole with zeros, as allocated.
fn reports_allocation(path: &Path) -> bool {
    if allocated(path) < SEGMENT {
        eprintln!(
            "skipped: a new segment reports {} of {SEGMENT} bytes allocated on this file system",
            allocated(path)
        );
        return false;
    }
    true
}

#[test]
fn garbage_after_the_end_is_zeroed_in_place() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let (end, records) = log(dir.path(), mode, &keys);
        let path = dir.path().join(segment_file_name(Lsn(0)));
        if !reports_allocation(&path) {
            return;
        }
        // A crash tore the write after the end: garbage over the next 3 pages.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&payload(99, 3 * 4096), end).unwrap();
        file.sync_all().unwrap();
        drop(file);
        let before = allocated(&path);

        let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
        let after = allocated(&path);
        assert!(
            after >= before && after >= SEGMENT,
            "{mode}: {after} bytes allocated after the reopen, {before} before, segment {SEGMENT}"
        );
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes[end as usize..].iter().all(|&b| b == 0), "{mode}");
        wal.close().unwrap();
        assert_eq!(read_all(dir.path(), Some(keys)), records, "{mode}");
    }
}

#[test]
fn a_segment_file_cut_short_is_extended_with_written_zeros() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let (end, records) = log(dir.path(), mode, &keys);
        let path = dir.path().join(segment_file_name(Lsn(0)));
        if !reports_allocation(&path) {
            return;
        }
        // A crash image in which the file ends a little after the log does.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(end + 1000).unwrap();
        drop(file);
        assert!(
            allocated(&path) < SEGMENT,
            "{mode}: the cut file is shorter"
        );

        let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), SEGMENT, "{mode}");
        let after = allocated(&path);
        assert!(
            after >= SEGMENT,
            "{mode}: {after} bytes allocated after the reopen, segment {SEGMENT}"
        );
        wal.close().unwrap();
        assert_eq!(read_all(dir.path(), Some(keys)), records, "{mode}");
    }
}
