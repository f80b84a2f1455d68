//! A log whose last record ends exactly at the end of a segment ends in that segment: the next
//! segment does not exist until a record goes there. `purge_before` past the end must keep it,
//! in every sync mode, with and without recycling; otherwise the directory is left with no
//! segment (only free files), and the next open starts a new log at LSN 0, below LSNs the log
//! already acknowledged.

use crate::support;

use support::{payload, small_config};
use walcrypt::{KeyRing, Lsn, Mode, SyncMode, Wal};

#[test]
fn purge_keeps_the_segment_a_log_ends_exactly_at_the_end_of() {
    let segment = 8 * 512u64;
    for mode in Mode::ALL {
        for sync in [SyncMode::Durable, SyncMode::Buffered] {
            for recycle in [0, 4] {
                let what = format!("{mode} {sync:?} recycle {recycle}");
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path().join("wal");
                let keys = KeyRing::generate().unwrap();
                let config = || {
                    small_config(mode, &keys)
                        .sync(sync)
                        .prepare_segments(false)
                        .recycle_segments(recycle)
                };
                let wal = Wal::open(&dir, config()).unwrap();
                // What a record costs beyond its payload, within one page.
                let before = u64::from(wal.end_lsn());
                wal.append(1, &payload(0, 10)).unwrap();
                let overhead = u64::from(wal.end_lsn()) - before - 10;
                // Fill into the last page of the second segment, then end it exactly.
                let mut n = 1;
                loop {
                    let end = u64::from(wal.end_lsn());
                    let room = segment - end % segment;
                    if end >= segment && room < 300 && end % 512 + room == 512 && room > overhead {
                        wal.append(1, &payload(n, (room - overhead) as usize))
                            .unwrap();
                        break;
                    }
                    wal.append(1, &payload(n, 60)).unwrap();
                    n += 1;
                }
                let end = wal.end_lsn();
                assert_eq!(u64::from(end), 2 * segment, "{what}: the log ends at {end}");
                wal.flush(end).unwrap();
                wal.purge_before(Lsn(u64::MAX)).unwrap();
                wal.close().unwrap();
                let wal = Wal::open(&dir, config()).unwrap();
                assert!(
                    wal.end_lsn() >= end,
                    "{what}: the log ended at {end}, after the purge it reopened at {}",
                    wal.end_lsn()
                );
                wal.close().unwrap();
            }
        }
    }
}
