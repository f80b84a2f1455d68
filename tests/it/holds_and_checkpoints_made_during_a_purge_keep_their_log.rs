//! A purge reads the holds and the checkpoint once, for its limit, and then takes its time
//! (an fdatasync in `Buffered` mode, a directory sync per segment it removes). A hold or
//! checkpoint made in between, in a segment the purge is removing, must not be acknowledged
//! and then lose its log: it is refused with `Purged`. One beyond what the purge removes is
//! made as usual. The purge is stopped between its limit and its removals by a storage hook
//! on its listing of the directory.

use crate::support;

use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use support::hooked::{Hooked, Hooks};
use walcrypt::{Config, Error, Lsn, Mode, Reader, Wal};

/// The thread to stop, where it says it stopped, and where it waits to be released.
type Armed = (std::thread::ThreadId, Sender<()>, Receiver<()>);

/// Stops the thread that armed it at its next listing of the log directory until released.
#[derive(Default)]
struct Pause {
    armed: Mutex<Option<Armed>>,
}

impl Hooks for Pause {
    fn listed(&self, _dir: &Path, _names: &[String]) {
        let mut armed = self.armed.lock().unwrap();
        if armed
            .as_ref()
            .is_some_and(|(t, _, _)| *t == std::thread::current().id())
        {
            let (_, paused, release) = armed.take().unwrap();
            drop(armed);
            paused.send(()).unwrap();
            release.recv().unwrap();
        }
    }
}

/// Runs `during` (given the first and the last record's LSN) while a `purge_before` of a log of
/// several segments, up to its end (or, `far`, up to the largest LSN), is paused after reading
/// its limit; returns what `during` returned, the first record's LSN and the log's directory.
fn during_a_purge<T: Send>(
    far: bool,
    during: impl FnOnce(&Wal, Lsn, Lsn) -> T + Send,
) -> (T, Lsn, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let pause = Arc::new(Pause::default());
    let config = Config::new(Mode::Plaintext)
        .page_size(512)
        .segment_size(64 * 1024)
        .storage(Arc::new(Hooked(pause.clone())));
    let wal = Wal::open(dir.path(), config).unwrap();
    let first = wal.append(1, &[1; 100]).unwrap();
    let mut last = first;
    for _ in 0..2000 {
        last = wal.append(1, &[7; 100]).unwrap();
    }
    wal.sync().unwrap();
    let end = if far { Lsn(u64::MAX) } else { wal.end_lsn() };
    let (paused_tx, paused) = channel();
    let (release, release_rx) = channel();
    let out = std::thread::scope(|s| {
        let (wal, pause) = (&wal, &pause);
        let purger = s.spawn(move || {
            *pause.armed.lock().unwrap() =
                Some((std::thread::current().id(), paused_tx, release_rx));
            wal.purge_before(end)
        });
        paused.recv().unwrap();
        let out = during(wal, first, last);
        release.send(()).unwrap();
        let removed = purger.join().unwrap().unwrap();
        // (Far: a checkpoint made meanwhile purges the same segments first.)
        assert!(far || removed > 0, "the purge removed segments");
        out
    });
    wal.close().unwrap();
    (out, first, dir)
}

fn assert_refused(result: walcrypt::Result<impl std::fmt::Debug>, first: Lsn, what: &str) {
    match result {
        Err(Error::Purged { needed, oldest }) => {
            assert_eq!(needed, first, "{what}");
            assert!(oldest > first, "{what}: oldest {oldest}");
        }
        other => panic!("{what} during the purge that removes its segment: {other:?}"),
    }
}

#[test]
fn a_hold_in_a_segment_being_purged_is_refused() {
    let (hold, first, dir) = during_a_purge(false, |wal, first, _| wal.hold("replica", first));
    assert_refused(hold, first, "hold");
    let reader = Reader::open(dir.path(), None).unwrap();
    assert!(
        reader.records_from(first).next().unwrap().is_err(),
        "its segment is gone"
    );
}

#[test]
fn a_checkpoint_in_a_segment_being_purged_is_refused() {
    let (checkpoint, first, _dir) =
        during_a_purge(false, |wal, first, _| wal.checkpoint(first, b"snap"));
    assert_refused(checkpoint, first, "checkpoint");
}

#[test]
fn a_hold_beyond_what_the_purge_removes_is_made_and_kept() {
    let ((hold, at), _, dir) =
        during_a_purge(false, |wal, _, last| (wal.hold("replica", last), last));
    hold.unwrap();
    let reader = Reader::open(dir.path(), None).unwrap();
    let record = reader.records_from(at).next().unwrap().unwrap();
    assert_eq!(record.lsn, at);
}

/// A purge asked to go as far as it can still keeps the segment holding the end of the log: a
/// hold or checkpoint at the end is made while it runs, not refused.
#[test]
fn a_hold_and_a_checkpoint_at_the_end_are_made_while_a_purge_to_the_largest_lsn_runs() {
    let ((hold, checkpoint, end), _, dir) = during_a_purge(true, |wal, _, _| {
        let end = wal.end_lsn();
        (wal.hold("replica", end), wal.checkpoint(end, b"snap"), end)
    });
    hold.unwrap();
    checkpoint.unwrap();
    let wal = Wal::open(
        dir.path(),
        Config::new(Mode::Plaintext)
            .page_size(512)
            .segment_size(64 * 1024),
    )
    .unwrap();
    assert_eq!(wal.last_checkpoint().map(|c| c.lsn), Some(end));
    assert!(
        wal.holds()
            .iter()
            .any(|h| h.name == "replica" && h.lsn == end && !h.lost)
    );
    wal.close().unwrap();
}
