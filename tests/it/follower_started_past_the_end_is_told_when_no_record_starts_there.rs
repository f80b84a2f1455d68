//! A follower started past the valid records waits for the log to reach its position, then
//! follows from there if a record starts there and fails with `NotRecordStart` if the position
//! lies inside a record, as a `Reader` says at once for a position inside the log. (It read
//! from the middle of the record: plaintext reported an invalid page header, perrecord-gcm
//! nonzero reserved bytes, and pagelevel never yielded anything.)

use std::time::Duration;

use walcrypt::{Error, Follower, KeyRing, Lsn, Mode, SyncMode, Wal};

use crate::support::small_config;

fn keys_for(mode: Mode, keys: &KeyRing) -> Option<KeyRing> {
    (mode != Mode::Plaintext).then(|| keys.clone())
}

#[test]
fn a_follower_started_one_byte_past_the_end_fails_once_a_record_covers_its_position() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        let first = wal.append(1, &[7; 100]).unwrap();
        wal.flush(first).unwrap();
        let past = Lsn(u64::from(wal.end_lsn()) + 1);

        let mut follower = Follower::open(dir.path(), keys_for(mode, &keys), past).unwrap();
        assert!(follower.poll().unwrap().is_none(), "{mode}");
        for i in 0..5 {
            let lsn = wal.append(2, &[i; 50]).unwrap();
            wal.flush(lsn).unwrap();
        }
        match follower.next_timeout(Duration::from_secs(2)) {
            Err(Error::NotRecordStart(at)) => assert_eq!(at, past, "{mode}"),
            other => panic!("{mode}: expected NotRecordStart({past}), got {other:?}"),
        }
        wal.close().unwrap();
    }
}

/// The position a writer handed out for a record it has not written yet is followed once it is
/// written: the check waits for the log, it does not refuse what lies past the files' records.
#[test]
fn a_follower_started_at_a_record_end_not_yet_written_follows_from_there() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys).sync(SyncMode::Buffered);
        let wal = Wal::open(dir.path(), config).unwrap();
        let first = wal.append(1, &[7; 100]).unwrap();
        wal.flush(first).unwrap();
        // In the buffer only: the files end before it.
        wal.append(1, &[8; 100]).unwrap();
        let from = wal.end_lsn();

        let mut follower = Follower::open(dir.path(), keys_for(mode, &keys), from).unwrap();
        assert!(follower.poll().unwrap().is_none(), "{mode}");
        let next = wal.append(3, &[9; 60]).unwrap();
        assert_eq!(next, from, "{mode}");
        wal.sync().unwrap();
        let record = follower
            .next_timeout(Duration::from_secs(2))
            .unwrap()
            .unwrap_or_else(|| panic!("{mode}: nothing after the sync"));
        assert_eq!((record.lsn, record.kind), (from, 3), "{mode}");
        wal.close().unwrap();
    }
}
