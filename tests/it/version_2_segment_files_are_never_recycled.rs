//! A version-2 record's checksum binds no LSN, so a stale version-2 record at a new position
//! would read as valid if a reused file's wipe were ever lost: segment files of format
//! version 2 are never kept for reuse. A copy of
//! the version-2 golden log is continued by this build (its new segments are of the current
//! version) and purged: the purge unlinks the version-2 segments although the pool has room,
//! and keeps the current-version ones, which the next segments reuse.

use crate::support;

use std::path::Path;

use support::faults::{FaultStorage, Op};
use walcrypt::inspect::{FORMAT_VERSION, SegmentHeader};
use walcrypt::{Config, Lsn, Mode, Reader, SyncMode, Wal};

const SEGMENT: u64 = 4096;

/// `(name, format version)` of the free files in `dir`.
fn free_files(dir: &Path) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".free"))
        .map(|n| {
            let header = SegmentHeader::decode(&std::fs::read(dir.join(&n)).unwrap()).unwrap();
            (n, header.version)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn version_2_segment_files_are_never_recycled() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    support::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v2-plaintext/log"),
        &dir,
    );
    let storage = FaultStorage::new();
    let config = Config::new(Mode::Plaintext)
        .sync(SyncMode::Durable)
        .prepare_segments(false)
        .recycle_segments(4)
        .storage(storage.arc());
    let wal = Wal::open(&dir, config).unwrap();
    assert_eq!(wal.geometry().segment_size, SEGMENT);
    let append_to = |to: u64| {
        while u64::from(wal.end_lsn()) < to {
            let lsn = wal.append(3, &[0xA5; 300]).unwrap();
            wal.flush(lsn).unwrap();
        }
    };
    // The golden log ends in its fourth segment; four more are made by this build.
    append_to(8 * SEGMENT + 100);

    // Segments 0-3 are version 2: none is kept, although the pool has room.
    assert_eq!(wal.purge_before(Lsn(4 * SEGMENT)).unwrap(), 4);
    assert!(free_files(&dir).is_empty(), "{:?}", free_files(&dir));
    // Segments 4-7 are of the current version: all are kept.
    assert_eq!(wal.purge_before(Lsn(8 * SEGMENT)).unwrap(), 4);
    let free = free_files(&dir);
    assert_eq!(
        free.iter().map(|f| f.1).collect::<Vec<_>>(),
        [FORMAT_VERSION; 4],
        "{free:?}"
    );
    let names: Vec<String> = (4..8)
        .map(|i| {
            format!(
                "{}.free",
                walcrypt::inspect::segment_file_name(Lsn(i * SEGMENT))
            )
        })
        .collect();
    assert_eq!(free.iter().map(|f| f.0.clone()).collect::<Vec<_>>(), names);

    // And they are reused: no file created for the next four segments.
    let created = storage.count(Op::Create);
    append_to(12 * SEGMENT + 100);
    assert_eq!(storage.count(Op::Create), created);
    wal.close().unwrap();
    let reader = Reader::open(&dir, None).unwrap();
    let records: Vec<_> = reader
        .records_from(Lsn::default())
        .map(|r| r.unwrap())
        .collect();
    assert!(
        records
            .iter()
            .all(|r| r.kind == 3 && r.payload == [0xA5; 300])
    );
    assert!(u64::from(records.last().unwrap().end_lsn) >= 12 * SEGMENT);
}
