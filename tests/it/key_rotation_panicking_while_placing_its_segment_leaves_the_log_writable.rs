//! A key rotation places the segment it made under the new key after releasing the log's
//! locks, and the writer waits for that placement before it enters the segment. If placing
//! panics (here: in the embedder's storage, right after the rename), the claim on the segment
//! must still end: the writer then creates the segment itself, as after a failed preparation,
//! instead of waiting for good with the write lock held.
//!
//! Both encrypted CTR modes: a rotation whose placement panics, appends that cross into the
//! new segment (flushed durably, on another thread, so a hang fails the test instead of
//! stalling it), then a reopen that replays every record.

use crate::support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use support::hooked::{Hooked, Hooks};
use support::payload;
use walcrypt::{Config, Key, KeyRing, Lsn, Mode, SyncMode, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 16 * PAGE;
/// Long enough for a hang to be a failure rather than a stall; never reached otherwise.
const PATIENCE: Duration = Duration::from_secs(30);

/// Panics once, after the rotation's replacement segment was renamed into place.
#[derive(Default)]
struct PanicOnce {
    fired: AtomicBool,
}

impl Hooks for PanicOnce {
    fn renamed(&self, from: &Path, _to: &Path) {
        if from.to_string_lossy().ends_with(".rekey.tmp")
            && !self.fired.swap(true, Ordering::SeqCst)
        {
            panic!("storage failure while placing a rotation's segment");
        }
    }
}

fn config(mode: Mode, keys: &KeyRing, hooks: &Arc<PanicOnce>) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .storage(Arc::new(Hooked(hooks.clone())))
}

#[test]
fn a_panic_while_placing_a_rotations_segment_never_leaves_the_writer_waiting() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let hooks = Arc::new(PanicOnce::default());
        let mut keys = KeyRing::generate().unwrap();
        let wal = Arc::new(Wal::open(dir.path(), config(mode, &keys, &hooks)).unwrap());
        let mut expected = Vec::new();
        for i in 0..10 {
            let p = payload(i, 200);
            let lsn = wal.append(1, &p).unwrap();
            expected.push((lsn, p));
        }
        wal.flush(expected.last().unwrap().0).unwrap();
        // Let the preparer make the next segment under the old key, so the rotation stages a
        // replacement and the writer will wait for its placement.
        wal.prepare_next_segment().unwrap();

        let key = Key::generate().unwrap();
        keys.add(2, key.clone()).unwrap();
        let rotation =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wal.activate_key(2, key)));
        assert!(
            hooks.fired.load(Ordering::SeqCst),
            "{mode}: the placement ran"
        );
        assert!(
            rotation.is_err(),
            "{mode}: the panic reached the rotating caller"
        );

        // Appends that cross into the new segment and beyond, flushed durably elsewhere.
        let (done, finished) = mpsc::channel();
        let writer = wal.clone();
        std::thread::spawn(move || {
            let mut appended = Vec::new();
            let result = (0..3 * SEGMENT / 200).try_for_each(|i| {
                let p = payload(1000 + i, 200);
                let lsn = writer.append(1, &p)?;
                writer.flush(lsn)?;
                appended.push((lsn, p));
                Ok::<(), walcrypt::Error>(())
            });
            // The handle goes before the report, so the test thread can take the log back.
            drop(writer);
            let _ = done.send(result.map(|()| appended));
        });
        let appended = finished
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("{mode}: the writer waits for good"))
            .unwrap_or_else(|e| panic!("{mode}: append after the panic: {e}"));
        expected.extend(appended);
        Arc::into_inner(wal)
            .expect("the appending thread dropped its handle")
            .close()
            .unwrap();

        let mut replayed = Vec::new();
        let reopened = Wal::open_and_replay(
            dir.path(),
            config(mode, &keys, &hooks),
            Lsn::default(),
            |r| {
                replayed.push((r.lsn, r.payload));
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{mode}: reopen: {e}"));
        assert_eq!(replayed, expected, "{mode}");
        reopened.close().unwrap();
    }
}
