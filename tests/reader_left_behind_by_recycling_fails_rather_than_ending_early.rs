//! A `Reader` that falls behind `purge_before` while the purged files are reused: it reads a
//! segment through an open handle when the purge renames that file and a later segment is made
//! from it (wiped, then written). The reader must never take that for the end of the log: it
//! yields only records appended at their LSNs, and then fails naming the purged segment, as a
//! follower does, instead of ending cleanly short of the log's end.

mod support;

use std::collections::HashMap;

use support::{payload, small_config};
use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn reader_left_behind_by_recycling_fails_rather_than_ending_early() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let keys = KeyRing::generate().unwrap();
        let segment = 8 * 512;
        let wal = Wal::open(
            dir,
            small_config(mode, &keys)
                .prepare_segments(false)
                .recycle_segments(4),
        )
        .unwrap();
        let mut written = HashMap::new();
        let mut n = 0u64;
        let append_to = |to: u64, written: &mut HashMap<Lsn, Vec<u8>>, n: &mut u64| {
            while u64::from(wal.end_lsn()) < to {
                let p = payload(*n, 150);
                let lsn = wal.append(1, &p).unwrap();
                wal.flush(lsn).unwrap();
                written.insert(lsn, p);
                *n += 1;
            }
        };
        append_to(3 * segment + 512, &mut written, &mut n);
        let reader = Reader::open(dir, Some(keys.clone())).unwrap();
        let mut records = reader.records_from(Lsn::default());
        // Halfway into the first segment, with its handle open.
        loop {
            let r = records.next().expect("a record").unwrap();
            assert_eq!(written.get(&r.lsn), Some(&r.payload), "{mode}");
            if u64::from(r.lsn) > segment / 2 {
                break;
            }
        }
        assert_eq!(wal.purge_before(Lsn(3 * segment)).unwrap(), 3, "{mode}");
        // The purged files become segments 4, 5 and 6: wiped, then written.
        append_to(7 * segment + 512, &mut written, &mut n);
        let mut failed = false;
        for record in records {
            match record {
                Ok(r) => assert_eq!(
                    written.get(&r.lsn),
                    Some(&r.payload),
                    "{mode}: the reader yielded a record the log did not append at {}",
                    r.lsn
                ),
                Err(Error::Io { source, .. }) => {
                    assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{mode}");
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
        wal.close().unwrap();
    }
}
