//! A follower that falls behind `purge_before` while the purged files are reused: it holds the
//! place in a segment whose file becomes a later segment and is overwritten. It yields only
//! records appended at their LSNs, then fails naming the purged segment, as when purged files
//! are unlinked.

mod support;

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
        let first_file = dir.join(walcrypt::inspect::segment_file_name(Lsn(0)));
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
                Err(Error::Io { path, source, .. }) => {
                    assert_eq!(path, first_file, "{mode}");
                    assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{mode}");
                    break;
                }
                Err(e) => panic!("{mode}: {e}"),
            }
        }
        log.wal.close().unwrap();
    }
}
