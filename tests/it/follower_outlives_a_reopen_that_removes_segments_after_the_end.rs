//! A writer that opens a log removes the segments after its end (here one prepared ahead that
//! the log never reached) and creates them again as it writes. A follower that listed the
//! removed file before the reopen waits and then yields the new records in order, written or
//! durable, rather than failing on the file it can no longer open.

use crate::support;

use std::time::Duration;

use support::{payload, small_config};
use walcrypt::{Follower, KeyRing, Lsn, Mode, Visibility, Wal};

const SEGMENT: u64 = 8 * 512;

/// Appends `n` records numbered from `first` in a new writer session, flushing each.
fn session(dir: &std::path::Path, keys: &KeyRing, first: u64, n: u64, prepare: bool) -> Vec<Lsn> {
    let config = small_config(Mode::PerRecord, keys).prepare_segments(false);
    let wal = Wal::open(dir, config).unwrap();
    let mut lsns = Vec::new();
    for i in first..first + n {
        let lsn = wal.append(1, &payload(i, 100)).unwrap();
        wal.flush(lsn).unwrap();
        lsns.push(lsn);
    }
    if prepare {
        assert!(wal.prepare_next_segment().unwrap());
    }
    wal.close().unwrap();
    lsns
}

/// Everything the follower yields within `wait` of the last record, as (lsn, payload).
fn drain(follower: &mut Follower, wait: Duration) -> Vec<(Lsn, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(r) = follower.next_timeout(wait).unwrap() {
        out.push((r.lsn, r.payload));
    }
    out
}

#[test]
fn follower_outlives_a_reopen_that_removes_segments_after_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let keys = KeyRing::generate().unwrap();
    // A few records in the first segment, and the next one prepared but never reached.
    let mut lsns = session(dir, &keys, 0, 5, true);
    let prepared = dir.join(walcrypt::inspect::segment_file_name(Lsn(SEGMENT)));
    assert!(prepared.exists());

    let mut written = Follower::open(dir, Some(keys.clone()), Lsn::default())
        .unwrap()
        .visibility(Visibility::Written);
    let mut durable = Follower::open(dir, Some(keys.clone()), Lsn::default()).unwrap();
    assert_eq!(
        written.segments().len(),
        2,
        "the prepared segment is listed"
    );
    assert_eq!(drain(&mut written, Duration::from_millis(50)).len(), 5);
    // Every record of the first session is flushed one by one, and the last page's header
    // vouches for the last flush too.
    assert_eq!(drain(&mut durable, Duration::from_millis(50)).len(), 5);

    // The reopen removes the prepared segment; the writer stops before it needs it again.
    let wal = Wal::open(
        dir,
        small_config(Mode::PerRecord, &keys).prepare_segments(false),
    )
    .unwrap();
    assert!(
        !prepared.exists(),
        "recovery removes the segment after the end"
    );
    // Long enough for the followers' full check of every later page header (after a second
    // at the same place), which opens every segment they know.
    for follower in [&mut written, &mut durable] {
        assert!(
            follower
                .next_timeout(Duration::from_millis(1500))
                .unwrap()
                .is_none()
        );
    }
    drop(wal);

    // Then a session writes on across several segments, and one more.
    lsns.extend(session(dir, &keys, 5, 70, false));
    lsns.extend(session(dir, &keys, 75, 1, false));
    assert!(
        u64::from(lsns[74]) > 2 * SEGMENT,
        "the log reaches a third segment"
    );
    let expected = |n: usize| -> Vec<(Lsn, Vec<u8>)> {
        (0..n).map(|i| (lsns[i], payload(i as u64, 100))).collect()
    };
    let got = drain(&mut written, Duration::from_secs(2));
    assert_eq!(got, expected(76)[5..].to_vec(), "written");
    let got = drain(&mut durable, Duration::from_secs(2));
    assert_eq!(got, expected(76)[5..].to_vec(), "durable");
}
