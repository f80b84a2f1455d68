//! A pagelevel writer that reopens a log whose last page is partly filled leaves the rest of
//! that page unwritten and resumes at the next page's body, behind a resume record. When that
//! page is the last of its segment, the log goes on in the next segment with no switch record
//! pointing there. A follower that had read everything before the reopen, and so waits at the
//! old end inside the old segment, must find the new segment and read on: attached to the
//! writer (as the openraft store's reads are) and from the files.

use std::sync::Arc;
use std::time::Duration;

use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, SyncMode, Wal};

const PAGE: u64 = 4096;
const SEGMENT: u64 = 64 * 1024;

fn config(keys: &KeyRing) -> Config {
    Config::new(Mode::PageLevel)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(SEGMENT)
}

#[test]
fn a_follower_at_the_old_end_reads_on_when_a_reopen_resumes_in_the_next_segment() {
    for attached in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        // Records until the end lies inside the body of a segment's last page.
        let last = {
            let wal = Wal::open(tmp.path(), config(&keys)).unwrap();
            let mut last = Lsn(0);
            while wal.end_lsn().0 % SEGMENT <= SEGMENT - PAGE + 64 {
                last = wal.append(7, &[0x5a; 500]).unwrap();
            }
            wal.flush(last).unwrap();
            last
        };
        let wal = Arc::new(Wal::open(tmp.path(), config(&keys)).unwrap());
        let mut follower = match attached {
            true => Follower::attach(&wal, last).unwrap(),
            false => Follower::open(tmp.path(), Some(keys.clone()), last).unwrap(),
        };
        let read = follower.next_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(read.map(|r| r.lsn), Some(last), "attached {attached}");
        // Nothing more yet: the follower waits at the old end.
        assert!(
            follower
                .next_timeout(Duration::from_millis(50))
                .unwrap()
                .is_none()
        );

        let new = wal.append(8, b"after the reopen").unwrap();
        wal.flush(new).unwrap();
        assert!(
            new.0 / SEGMENT > last.0 / SEGMENT,
            "the log resumed in the next segment: {last} then {new}"
        );
        let read = follower
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap_or_else(|| panic!("attached {attached}: the record at {new} never came"));
        assert_eq!(
            (read.lsn, read.kind, read.payload.as_slice()),
            (new, 8, &b"after the reopen"[..])
        );
    }
}
