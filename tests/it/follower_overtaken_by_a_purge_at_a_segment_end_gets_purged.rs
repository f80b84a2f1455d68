//! A follower stopped at a record that runs from the last page of its segment into a segment it
//! has not listed yet lists the directory again to find that segment. When a purge removed both
//! (oldest first) just before that listing, the files it takes from there start past its
//! position: the segment it reads in is gone from before the oldest one left. That is
//! `Error::Purged`, naming its position and the oldest segment left, not a segment "missing
//! from the middle of the log" (before, `Corrupt { kind: MissingSegment }` at the last page of
//! its segment, once the page headers of the segments left vouched for the log past it).
//!
//! A segment removed from the middle of the log, with segments before and after it left, is
//! still damage to a follower that reaches it.

use crate::support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::hooked::{Hooked, Hooks};
use support::{payload, small_config};
use walcrypt::inspect::segment_file_name;
use walcrypt::{CorruptionKind, Error, Follower, KeyRing, Lsn, Mode, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;

type Purge = Box<dyn FnOnce() + Send>;

/// Runs a purge (once) at the next listing of the directory, before the listing is taken.
#[derive(Default)]
struct PurgeAtNextListing {
    armed: Mutex<Option<Purge>>,
}

impl Hooks for PurgeAtNextListing {
    fn filter_listing(&self, dir: &Path, names: &mut Vec<String>) {
        let purge = self.armed.lock().unwrap().take();
        if let Some(purge) = purge {
            purge();
            // The listing as taken after the purge.
            names.retain(|n| dir.join(n).exists());
        }
    }
}

/// Polls `follower` until it fails (records may come first), for up to ten seconds.
fn poll_to_the_error(follower: &mut Follower, what: &str) -> Error {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "{what}: no error within 10 s");
        match follower.next_timeout(Duration::from_millis(50)) {
            Ok(_) => {}
            Err(e) => return e,
        }
    }
}

fn scenario(mode: Mode, recycle: usize) {
    let what = format!("{mode}, {recycle} files kept for reuse");
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = small_config(mode, &keys)
        .prepare_segments(false)
        .recycle_segments(recycle);
    let wal = Arc::new(Wal::open(dir, config).unwrap());
    // The log ends in the last page of its second segment.
    let segment = Lsn(SEGMENT);
    let last_page = segment.0 + SEGMENT - PAGE;
    let mut i = 0;
    while wal.end_lsn().0 < last_page {
        let lsn = wal.append(1, &payload(i, 150)).unwrap();
        wal.flush(lsn).unwrap();
        i += 1;
    }
    assert!(wal.end_lsn().0 < segment.0 + SEGMENT, "{what}");

    // A follower of the files reads every record there and waits at the end.
    let hooks = Arc::new(PurgeAtNextListing::default());
    let storage = Arc::new(Hooked(hooks.clone()));
    let mut follower =
        Follower::open_with_storage(dir, Some(keys.clone()), storage, Lsn::default()).unwrap();
    let mut read = 0;
    while let Some(r) = follower.next_timeout(Duration::from_millis(200)).unwrap() {
        assert_eq!(r.payload, payload(read, 150), "{what}");
        read += 1;
    }
    assert_eq!(read, i, "{what}: every record before the end");
    let needed = follower.position();
    assert_eq!(needed, wal.end_lsn(), "{what}");

    // The next record runs from the last page of the follower's segment into the next one,
    // and the log goes on into the segment after that.
    let lsn = wal.append(1, &payload(i, 1000)).unwrap();
    wal.flush(lsn).unwrap();
    assert_eq!(lsn, needed, "{what}");
    while wal.end_lsn().0 < segment.0 + 2 * SEGMENT + PAGE {
        i += 1;
        let lsn = wal.append(1, &payload(i, 150)).unwrap();
        wal.flush(lsn).unwrap();
    }
    // The follower reads the record's start in its segment, finds no next segment among its
    // files and lists the directory for it: the purge runs just before that listing and
    // removes both segments the record lies in (and the one before them).
    let purging = wal.clone();
    *hooks.armed.lock().unwrap() = Some(Box::new(move || {
        assert_eq!(purging.purge_before(purging.end_lsn()).unwrap(), 3);
    }));
    let oldest = Lsn(segment.0 + 2 * SEGMENT);
    match poll_to_the_error(&mut follower, &what) {
        Error::Purged {
            needed: n,
            oldest: o,
        } => assert_eq!((n, o), (needed, oldest), "{what}: what Purged names"),
        other => panic!(
            "{what}: expected Purged {{ needed: {needed}, oldest: {oldest} }}, got {other:?}"
        ),
    }
    assert!(
        hooks.armed.lock().unwrap().is_none(),
        "{what}: the purge ran"
    );
}

#[test]
fn follower_overtaken_by_a_purge_at_a_segment_end_gets_purged() {
    for mode in Mode::ALL {
        for recycle in [0, 4] {
            scenario(mode, recycle);
        }
    }
}

/// A segment removed by hand from the middle of the log (segments before and after it left)
/// while a follower reads before it is `MissingSegment`, naming that segment.
#[test]
fn follower_reaching_a_segment_missing_from_the_middle_reports_damage() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let wal = Wal::open(dir, small_config(mode, &keys).prepare_segments(false)).unwrap();
        let mut i = 0;
        while wal.end_lsn().0 < 5 * SEGMENT + PAGE {
            let lsn = wal.append(1, &payload(i, 150)).unwrap();
            wal.flush(lsn).unwrap();
            i += 1;
        }
        let mut follower = Follower::open(dir, Some(keys.clone()), Lsn::default()).unwrap();
        let first = follower
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap();
        assert_eq!(first.payload, payload(0, 150), "{mode}");
        let missing = Lsn(3 * SEGMENT);
        std::fs::remove_file(dir.join(segment_file_name(missing))).unwrap();
        match poll_to_the_error(&mut follower, &mode.to_string()) {
            Error::Corrupt {
                at,
                kind: CorruptionKind::MissingSegment,
            } => assert_eq!(at.segment, missing, "{mode}: the segment named"),
            other => panic!("{mode}: expected MissingSegment, got {other:?}"),
        }
        wal.close().unwrap();
    }
}
