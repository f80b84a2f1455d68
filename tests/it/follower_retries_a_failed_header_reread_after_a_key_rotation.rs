//! A follower that listed the segment prepared ahead under the old key meets, after a key
//! rotation replaced that segment, records naming a key its first read of the header did not
//! list, and reads the segment headers again. When that re-read fails for a passing reason
//! (here the directory listing fails once, as it may while a writer's open removes segments),
//! the follower does not report the records as damage: the poll says "nothing yet", makes one
//! attempt and no more, and the next poll reads the headers again and goes on. A re-read that
//! keeps failing is reported as its own error, not as the unlisted key.
//!
//! perrecord and pagelevel, the writer on the real file system, the follower on the fault
//! storage, records visible once written.

use crate::support;

use std::time::Duration;

use support::faults::{Effect, FaultStorage, Op};
use walcrypt::{
    Config, CorruptionKind, Error, Follower, Key, KeyRing, Lsn, Mode, SyncMode, Visibility, Wal,
};

const PATIENCE: Duration = Duration::from_secs(10);

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(64 * 1024)
        .prepare_segments(false)
}

fn append(wal: &Wal, payload: &[u8]) {
    let lsn = wal.append(1, payload).unwrap();
    wal.flush(lsn).unwrap();
}

/// A writer whose next segment was prepared under key 1, a follower on `storage` that has
/// read the first record and listed that segment, and the writer rotated to key 2 with one
/// record appended under it.
fn rotated(
    dir: &std::path::Path,
    mode: Mode,
    storage: &FaultStorage,
    arm: impl FnOnce(),
) -> (Wal, Follower) {
    let mut keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir, config(mode, &keys)).unwrap();
    append(&wal, b"under key 1");
    assert!(wal.prepare_next_segment().unwrap(), "{mode}");
    keys.add(2, Key::generate().unwrap()).unwrap();
    let mut follower =
        Follower::open_with_storage(dir, Some(keys.clone()), storage.arc(), Lsn::default())
            .unwrap()
            .visibility(Visibility::Written);
    let first = follower.next_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(first.payload, b"under key 1", "{mode}");
    assert_eq!(
        follower.segments().len(),
        2,
        "{mode}: the prepared segment is listed"
    );
    arm();
    wal.activate_key(2, keys.get(2).unwrap().clone()).unwrap();
    append(&wal, b"under key 2");
    (wal, follower)
}

fn is_unlisted_key(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupt {
            kind: CorruptionKind::UnlistedKey { .. },
            ..
        }
    )
}

#[test]
fn a_reread_that_fails_once_is_tried_again_at_the_next_poll() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let storage = FaultStorage::new();
        let (wal, mut follower) = rotated(dir.path(), mode, &storage, || {
            let next = storage.count(Op::List) + 1;
            storage.fail_nth(Op::List, next, Effect::Errno(libc::EIO));
        });
        // Polls until the failing listing (the re-read) has happened; none reports an error.
        let mut polls = 0;
        while storage.injected() == 0 {
            let listed = storage.count(Op::List);
            match follower.poll() {
                Ok(None) => {}
                Ok(Some(r)) => panic!("{mode}: yielded {:?} before the re-read", r.lsn),
                Err(e) => panic!("{mode}: poll {polls} failed: {e}"),
            }
            assert!(
                storage.count(Op::List) <= listed + 1,
                "{mode}: one poll lists the directory at most once"
            );
            polls += 1;
            assert!(
                polls < 1000,
                "{mode}: the follower never read the headers again"
            );
        }
        let record = follower
            .next_timeout(PATIENCE)
            .unwrap_or_else(|e| panic!("{mode}: {e}"))
            .unwrap_or_else(|| panic!("{mode}: no record after the failed re-read"));
        assert_eq!(record.payload, b"under key 2", "{mode}");
        wal.close().unwrap();
    }
}

#[test]
fn a_reread_that_keeps_failing_is_reported_as_itself() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let storage = FaultStorage::new();
        let (wal, mut follower) = rotated(dir.path(), mode, &storage, || {
            let next = storage.count(Op::List) + 1;
            storage.fail_from(Op::List, next, Effect::Errno(libc::EIO));
        });
        let err = follower
            .next_timeout(PATIENCE)
            .expect_err("the listing fails from now on");
        assert!(!is_unlisted_key(&err), "{mode}: {err}");
        match &err {
            Error::Io { source, .. } => {
                assert_eq!(source.raw_os_error(), Some(libc::EIO), "{mode}: {err}")
            }
            other => panic!("{mode}: {other}"),
        }
        assert!(
            storage.injected() >= 2,
            "{mode}: tried again before reporting"
        );
        // Once the listing works again, the follower goes on.
        storage.heal();
        let record = follower.next_timeout(PATIENCE).unwrap().unwrap();
        assert_eq!(record.payload, b"under key 2", "{mode}");
        wal.close().unwrap();
    }
}
