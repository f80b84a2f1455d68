//! A follower must stay ahead of `Wal::purge_before` (or hold the log back with `Wal::hold`):
//! one that has not reached a segment before it was purged fails with `Error::Purged`, naming
//! the position it needed and where the oldest segment left starts, and does not take the
//! purge for the writer replacing segments after the end of the log.

use crate::support;

use support::{payload, small_config};
use walcrypt::{Error, Follower, KeyRing, Lsn, Mode, Wal};

#[test]
fn follower_behind_a_purge_fails_naming_what_it_needed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let keys = KeyRing::generate().unwrap();
    let segment = 8 * 512;
    let wal = Wal::open(
        dir,
        small_config(Mode::PerRecord, &keys).prepare_segments(false),
    )
    .unwrap();
    let mut last = Lsn::default();
    while u64::from(last) < 2 * segment + 512 {
        last = wal.append(1, &payload(u64::from(last), 200)).unwrap();
        wal.flush(last).unwrap();
    }
    let mut follower = Follower::open(dir, Some(keys.clone()), Lsn::default()).unwrap();
    assert_eq!(wal.purge_before(last).unwrap(), 2);

    let needed = follower.position();
    match follower.poll() {
        Err(Error::Purged { needed: n, oldest }) => {
            assert_eq!(n, needed);
            assert_eq!(oldest, Lsn(2 * segment));
        }
        other => panic!("expected Purged, got {other:?}"),
    }
    wal.close().unwrap();
}
