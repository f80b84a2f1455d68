//! A `Reader` that falls behind `purge_before` while the purged files are reused: it reads a
//! segment through an open handle when the purge renames that file and a later segment is made
//! from it (wiped, then written). The reader must never take that for the end of the log: it
//! yields only records appended at their LSNs, and then fails with `Purged`, as a follower
//! does, instead of ending cleanly short of the log's end.

use crate::support;

use support::RecyclingLog;
use walcrypt::{Error, KeyRing, Lsn, Mode, Reader};

#[test]
fn reader_left_behind_by_recycling_fails_rather_than_ending_early() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let keys = KeyRing::generate().unwrap();
        let segment = 8 * 512;
        let mut log = RecyclingLog::open(dir, mode, &keys);
        log.append_to(3 * segment + 512);
        let reader = Reader::open(dir, Some(keys.clone())).unwrap();
        let mut records = reader.records_from(Lsn::default());
        // Halfway into the first segment.
        loop {
            let r = records.next().expect("a record").unwrap();
            assert_eq!(log.written.get(&r.lsn), Some(&r.payload), "{mode}");
            if u64::from(r.lsn) > segment / 2 {
                break;
            }
        }
        assert_eq!(log.wal.purge_before(Lsn(3 * segment)).unwrap(), 3, "{mode}");
        // The purged files become segments 4, 5 and 6: wiped, then written.
        log.append_to(7 * segment + 512);
        let mut failed = false;
        for record in records {
            match record {
                Ok(r) => assert_eq!(
                    log.written.get(&r.lsn),
                    Some(&r.payload),
                    "{mode}: the reader yielded a record the log did not append at {}",
                    r.lsn
                ),
                // `Purged`, as for a follower (an I/O error about the file not found, before
                // the reader's look at the end it met there took it for a purge).
                Err(Error::Purged { needed, oldest }) => {
                    assert_eq!(oldest, Lsn(3 * segment), "{mode}");
                    assert!(needed < oldest, "{mode}: needed {needed}");
                    failed = true;
                    break;
                }
                Err(e) => panic!("{mode}: {e}"),
            }
        }
        assert!(
            failed,
            "{mode}: the reader ended cleanly in a purged segment, short of the log's end"
        );
        log.wal.close().unwrap();
    }
}
