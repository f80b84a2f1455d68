//! A follower that has read authentic perrecord-gcm records, when the files are relabelled
//! under it (every segment header rewritten to perrecord, checksums recomputed) and a new
//! segment appears, would read the directory again and go on under the new mode's rules, its
//! `mode()` changing mid-stream. It refuses instead: the mode (like the log id and the
//! geometry) of the log it reads may not change, whether or not a mode was required.

use crate::support;

use support::tamper::rewrite_segment_headers;
use support::{append_all, payload, segment_files, small_config};
use walcrypt::{CorruptionKind, Error, Follower, KeyRing, Lsn, Mode, Visibility, Wal};

#[test]
fn follower_refuses_a_log_whose_mode_changes_under_it() {
    let keys = KeyRing::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, &keys)).unwrap();
    let records: Vec<_> = (0..60).map(|i| (1u8, payload(i, 64))).collect();
    append_all(&wal, &records);
    wal.close().unwrap();
    // Hide every segment but the first: the follower reads it and waits for more.
    let aside = tempfile::tempdir().unwrap();
    let segments = segment_files(dir.path());
    assert!(segments.len() >= 2);
    for path in &segments[1..] {
        std::fs::rename(path, aside.path().join(path.file_name().unwrap())).unwrap();
    }
    let mut follower = Follower::open(dir.path(), Some(keys), Lsn::default())
        .unwrap()
        .visibility(Visibility::Written);
    let mut read = 0;
    while let Some(record) = follower.poll().unwrap() {
        assert_eq!(record.payload, payload(read, 64));
        read += 1;
    }
    assert!(read > 0);
    assert_eq!(follower.mode(), Some(Mode::PerRecordGcm));
    // Relabel the files and bring the next segment back.
    for path in &segments[1..] {
        std::fs::rename(aside.path().join(path.file_name().unwrap()), path).unwrap();
    }
    rewrite_segment_headers(dir.path(), |h| h.mode = Mode::PerRecord);
    match follower.poll() {
        Err(Error::Corrupt {
            at,
            kind: CorruptionKind::ModeChanged { expected, got },
        }) => {
            assert_eq!((expected, got), ("perrecord-gcm", "perrecord"));
            assert_eq!(at.segment, Lsn(0), "names the first segment");
        }
        other => panic!("expected the mode change to be refused, got {other:?}"),
    }
    assert_eq!(follower.mode(), Some(Mode::PerRecordGcm));
}
