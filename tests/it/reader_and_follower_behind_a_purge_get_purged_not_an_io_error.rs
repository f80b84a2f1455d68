//! A purge removes the oldest segments after a reader or follower listed them and before it
//! read there. The reader's call says `Purged` (naming what it needed and the oldest segment
//! left), not an I/O error about a file not found; a follower from the start of the log goes on
//! from the oldest segment left, and one from a purged position gets `Purged`. Every mode.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::hooked::{Hooked, Hooks};
use support::{payload, small_config};
use walcrypt::{Error, Follower, KeyRing, Lsn, Mode, Reader, Wal};

const SEGMENT: u64 = 8 * 512;

type Purge = Box<dyn FnOnce() + Send>;

/// Runs a purge (once) when the handle of `path` is dropped: after a listing's header read of
/// the newest segment, before the reads that follow it.
#[derive(Default)]
struct PurgeOnClose {
    armed: Mutex<Option<(PathBuf, Purge)>>,
}

impl PurgeOnClose {
    fn arm(&self, path: PathBuf, purge: impl FnOnce() + Send + 'static) {
        *self.armed.lock().unwrap() = Some((path, Box::new(purge)));
    }
}

impl Hooks for PurgeOnClose {
    fn closed(&self, path: &Path) {
        let mut armed = self.armed.lock().unwrap();
        if armed.as_ref().is_some_and(|(p, _)| p == path) {
            let (_, purge) = armed.take().expect("checked just above");
            drop(armed);
            purge();
        }
    }
}

/// A log of six segments or more, every record flushed; returns it and its records' LSNs.
fn log(dir: &Path, mode: Mode, keys: &KeyRing) -> (Arc<Wal>, Vec<Lsn>) {
    let wal = Arc::new(Wal::open(dir, small_config(mode, keys).prepare_segments(false)).unwrap());
    let mut lsns = Vec::new();
    let mut i = 0;
    while u64::from(wal.end_lsn()) < 6 * SEGMENT {
        let lsn = wal.append(1, &payload(i, 150)).unwrap();
        wal.flush(lsn).unwrap();
        lsns.push(lsn);
        i += 1;
    }
    (wal, lsns)
}

fn expect_purged(what: &str, got: Result<impl std::fmt::Debug, Error>, needed: Lsn, oldest: Lsn) {
    match got {
        Err(Error::Purged {
            needed: n,
            oldest: o,
        }) => {
            assert_eq!((n, o), (needed, oldest), "{what}: what Purged names");
        }
        other => panic!(
            "{what}: expected Purged {{ needed: {needed}, oldest: {oldest} }}, got {other:?}"
        ),
    }
}

fn scenario(mode: Mode) {
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (wal, lsns) = log(dir, mode, &keys);
    let first_in = |segment: u64| *lsns.iter().find(|l| u64::from(**l) >= segment).unwrap();

    // A reader opened before a purge of the first two segments.
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    assert_eq!(wal.purge_before(Lsn(2 * SEGMENT)).unwrap(), 2);
    let oldest = Lsn(2 * SEGMENT);
    expect_purged(
        &format!("{mode}: first_lsn"),
        reader.first_lsn(),
        Lsn(0),
        oldest,
    );
    expect_purged(
        &format!("{mode}: records from the start"),
        reader.records_from(Lsn::default()).next().unwrap(),
        Lsn(0),
        oldest,
    );
    expect_purged(
        &format!("{mode}: records from the second record"),
        reader.records_from(lsns[1]).next().unwrap(),
        lsns[1],
        oldest,
    );

    // A reader part way through the oldest segment left when a purge removes the next ones
    // too: the records it had are right, then `Purged` where it went on.
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    let mut records = reader.records_from(Lsn::default());
    let r = records.next().unwrap().unwrap();
    assert_eq!(
        r.lsn,
        first_in(2 * SEGMENT),
        "{mode}: the first record left"
    );
    assert_eq!(wal.purge_before(Lsn(4 * SEGMENT)).unwrap(), 2);
    let oldest = Lsn(4 * SEGMENT);
    let mut next = lsns.iter().skip_while(|l| **l <= r.lsn);
    let failed = loop {
        match records.next().unwrap() {
            Ok(r) => assert_eq!(Some(&r.lsn), next.next(), "{mode}: a record out of order"),
            Err(e) => break e,
        }
    };
    match failed {
        Error::Purged { needed, oldest: o } => {
            assert_eq!(o, oldest, "{mode}: the oldest segment Purged names");
            assert!(
                needed < oldest && needed >= Lsn(2 * SEGMENT),
                "{mode}: Purged needs {needed}"
            );
        }
        e => panic!("{mode}: a reader whose next segment was purged got {e:?}"),
    }

    // Followers whose listing is read before a purge, and the purge before their first read.
    let hooks = Arc::new(PurgeOnClose::default());
    let storage = Arc::new(Hooked(hooks.clone()));
    let newest = wal.end_lsn().0 / SEGMENT * SEGMENT;
    let newest_path = dir.join(format!("{newest:016X}.wal"));
    let purging = wal.clone();
    hooks.arm(newest_path.clone(), move || {
        assert_eq!(purging.purge_before(Lsn(5 * SEGMENT)).unwrap(), 1);
    });
    // From the start: it goes on from the oldest segment left.
    let mut follower =
        Follower::open_with_storage(dir, Some(keys.clone()), storage.clone(), Lsn::default())
            .unwrap_or_else(|e| panic!("{mode}: a follower from the start: {e}"));
    assert!(
        hooks.armed.lock().unwrap().is_none(),
        "{mode}: the purge ran"
    );
    let r = follower
        .next_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{mode}: a follower from the start: {e}"))
        .unwrap_or_else(|| panic!("{mode}: a follower from the start yielded nothing"));
    assert_eq!(
        r.lsn,
        first_in(5 * SEGMENT),
        "{mode}: a follower from the start begins at the oldest segment left"
    );
    // From a record the purge removes.
    let purging = wal.clone();
    hooks.arm(newest_path, move || {
        // The last whole segment before the one the log ends in.
        assert_eq!(purging.purge_before(Lsn(6 * SEGMENT)).unwrap(), 1);
    });
    let from = first_in(5 * SEGMENT);
    let opened = Follower::open_with_storage(dir, Some(keys.clone()), storage, from);
    expect_purged(
        &format!("{mode}: a follower from a purged record"),
        opened.map(|_| ()),
        from,
        Lsn(6 * SEGMENT),
    );
}

#[test]
fn reader_and_follower_behind_a_purge_get_purged_not_an_io_error() {
    for mode in Mode::ALL {
        scenario(mode);
    }
}

/// A reader part way through a segment that is purged and whose file the writer then reuses
/// for a new segment (`Config::recycle_segments`): its open handle reads the new segment's
/// pages, its cursor finds no record there, and the torn-tail rule's look at the page headers
/// after it opens the listed files by name, the purged one among them. That is `Purged` too.
/// Before, an I/O error: `open segment …/0000000000000000.wal: No such file or directory`.
#[test]
fn a_reader_in_a_segment_purged_and_reused_meanwhile_gets_purged() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let config = small_config(mode, &keys)
            .prepare_segments(false)
            .recycle_segments(4);
        let wal = Wal::open(dir, config).unwrap();
        let mut lsns = Vec::new();
        let mut append_to = |wal: &Wal, to: u64| {
            while u64::from(wal.end_lsn()) < to {
                let lsn = wal.append(1, &payload(lsns.len() as u64, 60)).unwrap();
                wal.flush(lsn).unwrap();
                lsns.push(lsn);
            }
        };
        append_to(&wal, 2 * SEGMENT + 512);
        let reader = Reader::open(dir, Some(keys.clone())).unwrap();
        let mut records = reader.records_from(Lsn::default());
        let first = records.next().unwrap().unwrap();

        assert_eq!(wal.purge_before(Lsn(2 * SEGMENT)).unwrap(), 2, "{mode}");
        // Segments 3 and 4 are made from the two purged files.
        append_to(&wal, 5 * SEGMENT + 512);
        let names = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<_>>();
        assert!(
            !names.iter().any(|n| n.ends_with(".free")),
            "{mode}: both purged files reused: {names:?}"
        );

        let mut next = lsns.iter().skip_while(|l| **l <= first.lsn);
        let failed = loop {
            match records.next() {
                Some(Ok(r)) => assert_eq!(Some(&r.lsn), next.next(), "{mode}: out of order"),
                Some(Err(e)) => break e,
                None => panic!("{mode}: the reader ended where its segment was purged"),
            }
        };
        match failed {
            Error::Purged { needed, oldest } => {
                assert_eq!(oldest, Lsn(2 * SEGMENT), "{mode}: the oldest segment left");
                assert!(needed < oldest, "{mode}: needed {needed}");
            }
            other => panic!("{mode}: expected Purged, got {other:?}"),
        }
        wal.close().unwrap();
    }
}
