//! A follower started before its directory exists, or on an empty log, reports "nothing yet"
//! and then sees the first records once they are written.

use std::time::Duration;

use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Visibility, Wal};

#[test]
fn follower_started_before_the_log_exists() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("not-yet");
        let keys = KeyRing::generate().unwrap();
        let mut early = Follower::open(&dir, Some(keys.clone()), Lsn::default()).unwrap();
        assert!(early.poll().unwrap().is_none());
        assert!(
            early
                .next_timeout(Duration::from_millis(20))
                .unwrap()
                .is_none()
        );
        assert_eq!(early.mode(), None);

        // The writer creates the log: still empty.
        let wal = Wal::open(&dir, Config::new(mode).keys(keys.clone())).unwrap();
        let mut on_empty = Follower::open(&dir, Some(keys.clone()), Lsn::default())
            .unwrap()
            .visibility(Visibility::Written);
        assert!(early.poll().unwrap().is_none());
        assert!(on_empty.poll().unwrap().is_none());
        assert_eq!(on_empty.mode(), Some(mode));

        let first = wal.append(4, b"first").unwrap();
        wal.flush(first).unwrap();
        let seen = on_empty.next_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            seen.map(|r| (r.lsn, r.payload)),
            Some((first, b"first".to_vec()))
        );
        let second = wal.append(4, b"second").unwrap();
        wal.flush(second).unwrap();
        // The durable follower learns of each flush from the header the flush rewrote.
        for (lsn, payload) in [(first, &b"first"[..]), (second, b"second")] {
            let seen = early.next_timeout(Duration::from_secs(5)).unwrap();
            assert_eq!(
                seen.map(|r| (r.lsn, r.payload)),
                Some((lsn, payload.to_vec()))
            );
        }
        assert_eq!(early.mode(), Some(mode));
        assert!(early.poll().unwrap().is_none());
        wal.close().unwrap();
    }
}
