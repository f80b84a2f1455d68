//! A segment file is reused only under a name in the 4 GiB window of LSNs it had (its start's
//! high 32 bits): there every LSN it ever held differs from every new LSN in the low 32 bits
//! that a record's checksum binds. A log started just below 4 GiB (its first segment renamed
//! and re-headed there, which the open accepts like a log whose older segments were purged)
//! reuses its free files below the boundary, makes the first segment above it anew, removes
//! the free file it can no longer use, keeps no file from below the boundary when it purges
//! above it, and reuses files again inside the new window.

use crate::support;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use support::faults::{FaultStorage, Op};
use support::{check_payload, payload_for};
use walcrypt::inspect::{SegmentHeader, segment_file_name};
use walcrypt::{Config, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 4096;
const SEGMENT: u64 = 8 * PAGE;
const WINDOW: u64 = 1 << 32;

fn config(storage: &FaultStorage) -> Config {
    Config::new(Mode::Plaintext)
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .prepare_segments(false)
        .recycle_segments(4)
        .storage(storage.arc())
}

/// Moves the only segment of the new, empty log in `dir` to start at `start`.
fn move_first_segment(dir: &Path, start: u64) {
    let old = dir.join(segment_file_name(Lsn(0)));
    let bytes = std::fs::read(&old).unwrap();
    let mut header = SegmentHeader::decode(&bytes).unwrap();
    header.start = Lsn(start);
    let mut page = vec![0u8; PAGE as usize];
    header.encode(&mut page);
    let mut moved = vec![0u8; SEGMENT as usize];
    moved[..PAGE as usize].copy_from_slice(&page);
    std::fs::write(dir.join(segment_file_name(Lsn(start))), moved).unwrap();
    std::fs::remove_file(old).unwrap();
}

fn free_files(dir: &Path) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let seg = name.strip_suffix(".free")?;
            let start = walcrypt::inspect::parse_segment_file_name(seg)?;
            Some((u64::from(start), e.metadata().unwrap().ino()))
        })
        .collect();
    out.sort();
    out
}

fn ino(dir: &Path, start: u64) -> u64 {
    std::fs::metadata(dir.join(segment_file_name(Lsn(start))))
        .unwrap()
        .ino()
}

#[test]
fn segment_files_are_never_reused_across_a_4_gib_window() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    Wal::open(dir, config(&FaultStorage::new()))
        .unwrap()
        .close()
        .unwrap();
    let base = WINDOW - 4 * SEGMENT;
    move_first_segment(dir, base);

    let storage = FaultStorage::new();
    let wal = Wal::open(dir, config(&storage)).unwrap();
    let mut written = BTreeMap::new();
    let mut id = 1;
    let mut append_to = |to: u64| {
        while u64::from(wal.end_lsn()) < to {
            let (kind, payload) = payload_for(id);
            let lsn = wal.append(kind, &payload).unwrap();
            wal.flush(lsn).unwrap();
            written.insert(lsn, id);
            id += 1;
        }
    };
    append_to(WINDOW - 2 * SEGMENT + PAGE);

    // Below the boundary, the next segment is in the same window: both purged files are kept.
    assert_eq!(wal.purge_before(Lsn(WINDOW - 2 * SEGMENT)).unwrap(), 2);
    let free = free_files(dir);
    assert_eq!(
        free.iter().map(|f| f.0).collect::<Vec<_>>(),
        [base, base + SEGMENT]
    );
    let created = storage.count(Op::Create);
    append_to(WINDOW - SEGMENT + PAGE);
    assert_eq!(
        storage.count(Op::Create),
        created,
        "reused below the boundary"
    );
    assert_eq!(ino(dir, WINDOW - SEGMENT), free[1].1);
    assert_eq!(free_files(dir), [free[0]]);

    // The first segment of the next window is made anew, and the free file of the window
    // below, which can never be reused now, is removed.
    append_to(WINDOW + PAGE);
    assert_eq!(
        storage.count(Op::Create),
        created + 1,
        "created above the boundary"
    );
    assert!(free_files(dir).is_empty(), "{:?}", free_files(dir));

    // Purged above the boundary, segments of the window below are unlinked, not kept...
    append_to(WINDOW + 2 * SEGMENT + PAGE);
    assert_eq!(wal.purge_before(Lsn(WINDOW)).unwrap(), 2);
    assert!(free_files(dir).is_empty(), "{:?}", free_files(dir));
    // ...and those of the new window are kept and reused in it.
    assert_eq!(wal.purge_before(Lsn(WINDOW + 2 * SEGMENT)).unwrap(), 2);
    assert_eq!(free_files(dir).len(), 2);
    let created = storage.count(Op::Create);
    append_to(WINDOW + 4 * SEGMENT + PAGE);
    assert_eq!(storage.count(Op::Create), created);
    wal.close().unwrap();
    assert!(u64::from(*written.keys().next().unwrap()) > base);

    let reader = Reader::open(dir, None).unwrap();
    let read: Vec<(Lsn, u64)> = reader
        .records_from(Lsn::default())
        .map(|r| {
            let r = r.unwrap();
            (r.lsn, check_payload(r.kind, &r.payload).unwrap())
        })
        .collect();
    let first = read[0].0;
    assert!(u64::from(first) >= WINDOW + 2 * SEGMENT);
    let expected: Vec<(Lsn, u64)> = written.range(first..).map(|(l, i)| (*l, *i)).collect();
    assert_eq!(read, expected);
}
