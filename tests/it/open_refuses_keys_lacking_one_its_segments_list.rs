//! `Wal::open` refuses a key ring that lacks a key id one of the log's segments lists, in every
//! encrypted mode, with an error naming the key id and the segment: a perrecord log with
//! segments under keys 1 and 2, opened with a ring holding only key 2. perrecord and
//! perrecord-gcm used to open (and fail only when a reader reached the old records); pagelevel
//! refused already. The full ring still opens the log, and a `Reader` may still read the part
//! of a log its keys cover.

use crate::support;

use support::small_config;
use walcrypt::{Error, Key, KeyRing, Lsn, Mode, Reader, Wal, inspect::segment_file_name};

#[test]
fn open_refuses_keys_lacking_one_its_segments_list() {
    for mode in [Mode::PerRecord, Mode::PerRecordGcm, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let mut keys = KeyRing::empty();
        keys.add(1, Key::generate().unwrap()).unwrap();
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        let lsn = wal.append(1, b"under key 1").unwrap();
        wal.flush(lsn).unwrap();
        let key2 = Key::generate().unwrap();
        wal.activate_key(2, key2.clone()).unwrap();
        let lsn = wal.append(1, b"under key 2").unwrap();
        wal.flush(lsn).unwrap();
        wal.close().unwrap();
        keys.add(2, key2.clone()).unwrap();
        let first = Reader::open(dir.path(), Some(keys.clone()))
            .unwrap()
            .segments()[0]
            .header
            .start;

        let mut only_two = KeyRing::empty();
        only_two.add(2, key2).unwrap();
        match Wal::open(dir.path(), small_config(mode, &only_two)) {
            Err(e @ Error::MissingSegmentKey { key_id: 1, segment }) => {
                assert_eq!(segment, first, "{mode}");
                let message = e.to_string();
                assert!(message.contains("key id 1"), "{mode}: {message}");
                assert!(
                    message.contains(&segment_file_name(first)),
                    "{mode}: {message}"
                );
            }
            other => panic!("{mode}: expected MissingSegmentKey for key 1, got {other:?}"),
        }

        // A reader with key 2 alone reads what key 2 covers.
        let reader = Reader::open(dir.path(), Some(only_two)).unwrap();
        assert!(
            reader
                .records_from(Lsn::default())
                .any(|r| matches!(r, Err(Error::MissingKey { key_id: 1, .. }))),
            "{mode}"
        );
        // Both keys open it.
        Wal::open(dir.path(), small_config(mode, &keys))
            .unwrap()
            .close()
            .unwrap();
    }
}
