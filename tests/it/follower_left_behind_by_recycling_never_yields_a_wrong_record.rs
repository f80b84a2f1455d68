//! A follower that falls behind `purge_before` while the purged files are reused: it holds the
//! place in a segment whose file becomes a later segment and is overwritten. It yields only
//! records appended at their LSNs, then fails with `Error::Purged` naming the position it needed
//! and the oldest segment left, as when purged files are unlinked.

use crate::support;

use support::RecyclingLog;
use walcrypt::{Error, Follower, KeyRing, Lsn, Mode};

#[test]
fn follower_left_behind_by_recycling_never_yields_a_wrong_record() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let keys = KeyRing::generate().unwrap();
        let segment = 8 * 512;
        let mut log = RecyclingLog::open(dir, mode, &keys);
        log.append_to(3 * segment + 512);
        let mut follower = Follower::open(dir, Some(keys.clone()), Lsn::default()).unwrap();
        // Into the first segment, with its handle open.
        let first = follower.poll().unwrap().expect("a record");
        assert_eq!(log.written.get(&first.lsn), Some(&first.payload), "{mode}");
        assert_eq!(log.wal.purge_before(Lsn(3 * segment)).unwrap(), 3, "{mode}");
        // The purged files become segments 4, 5 and 6 and are overwritten.
        log.append_to(7 * segment + 512);
        loop {
            match follower.poll() {
                Ok(Some(r)) => assert_eq!(
                    log.written.get(&r.lsn),
                    Some(&r.payload),
                    "{mode}: the follower yielded a record the log did not append at {}",
                    r.lsn
                ),
                Ok(None) => panic!("{mode}: the follower waits instead of failing"),
                // It reads by name, so the file's new life is never read as the old segment.
                Err(Error::Purged { needed, oldest }) => {
                    assert!(u64::from(needed) < 3 * segment, "{mode}: {needed}");
                    assert_eq!(oldest, Lsn(3 * segment), "{mode}");
                    break;
                }
                Err(e) => panic!("{mode}: {e}"),
            }
        }
        log.wal.close().unwrap();
    }
}
