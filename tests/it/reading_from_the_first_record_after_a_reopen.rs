//! A reader or follower may start at any record's LSN, including the first record a reopened
//! pagelevel log writes: it stands right after the resume record at the start of a fresh page,
//! not at the start of the page body.

use crate::support;

use std::sync::Arc;

use support::{payload, small_config};
use walcrypt::{Follower, KeyRing, Mode, Reader, Visibility, Wal};

#[test]
fn the_first_record_after_a_reopen_is_a_record_start_in_every_mode() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        for i in 0..5 {
            let lsn = wal.append(1, &payload(i, 70)).unwrap();
            wal.flush(lsn).unwrap();
        }
        wal.close().unwrap();

        let wal = Arc::new(Wal::open(dir.path(), config).unwrap());
        let first = wal.append(2, b"first after the reopen").unwrap();
        wal.flush(first).unwrap();

        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let from_reader: Vec<_> = reader
            .records_from(first)
            .map(|r| r.unwrap().payload)
            .collect();
        assert_eq!(
            from_reader,
            vec![b"first after the reopen".to_vec()],
            "{mode}"
        );

        let mut follower = Follower::attach(&wal, first).unwrap();
        let record = follower
            .next_timeout(std::time::Duration::from_secs(5))
            .unwrap()
            .unwrap_or_else(|| panic!("{mode}: nothing followed"));
        assert_eq!(record.lsn, first, "{mode}");
        let mut written = Follower::open(dir.path(), Some(keys), first)
            .unwrap()
            .visibility(Visibility::Written);
        let record = written.poll().unwrap().expect("written record");
        assert_eq!(record.payload, b"first after the reopen", "{mode}");
    }
}
