//! A follower of the files learns what is durable only from page headers, so a Durable round
//! rewrites the last page's durable hint after its fdatasync. That rewrite came after the
//! round raised the flushed position: a flusher arriving in between returned Ok, and when the
//! rewrite then failed (a disk failing every write after an fdatasync that succeeded), the
//! record stayed out of every follower's sight for good, also after the writer was dropped:
//! a replica promoted then lacked an acknowledged record. Found by an outside probe with
//! failing writes, in pagelevel. Now the hint is written before the flushed position moves,
//! and a round whose hint cannot be written acknowledges nothing.

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use crate::support::hooked::{Gate, Hooked, Hooks};
use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, SyncMode, Wal};

/// Once armed, fails the first write to a segment after an fdatasync of one (the round's hint
/// rewrite), and every later write, after holding the first until released.
#[derive(Default)]
struct FailAfterSync {
    /// 0 idle, 1 armed, 2 an fdatasync seen, 3 writes fail.
    stage: AtomicU8,
    gate: Gate,
}

fn is_segment(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "wal")
}

impl Hooks for FailAfterSync {
    fn synced(&self, path: &Path) {
        if is_segment(path) {
            let _ = self
                .stage
                .compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    fn write_result(&self, path: &Path, _offset: u64, _buf: &[u8]) -> std::io::Result<()> {
        if !is_segment(path) {
            return Ok(());
        }
        match self.stage.load(Ordering::SeqCst) {
            2 => {
                self.stage.store(3, Ordering::SeqCst);
                self.gate.hold();
                Err(std::io::Error::from_raw_os_error(libc_eio()))
            }
            3 => Err(std::io::Error::from_raw_os_error(libc_eio())),
            _ => Ok(()),
        }
    }
}

/// EIO, as Linux numbers it.
fn libc_eio() -> i32 {
    5
}

#[test]
fn a_durable_flush_returns_ok_only_once_followers_can_see_its_record() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let hooks = Arc::new(FailAfterSync::default());
        let config = Config::new(mode)
            .keys(keys.clone())
            .sync(SyncMode::Durable)
            .page_size(512)
            .segment_size(64 * 1024)
            .prepare_segments(false)
            .storage(Arc::new(Hooked(hooks.clone())));
        let wal = Arc::new(Wal::open(dir.path(), config).unwrap());
        wal.flush(wal.append(1, b"first").unwrap()).unwrap();
        let lsn = wal.append(1, b"second").unwrap();
        hooks.stage.store(1, Ordering::SeqCst);
        // The leader: its fdatasync succeeds, its hint rewrite is held, then fails.
        let leader = {
            let wal = wal.clone();
            std::thread::spawn(move || wal.flush(lsn))
        };
        hooks.gate.wait_held();
        // A flusher of the same record, arriving while the hint rewrite is held.
        let (sent, answer) = mpsc::channel();
        let flusher = {
            let wal = wal.clone();
            std::thread::spawn(move || sent.send(wal.flush(lsn)).unwrap())
        };
        let early = answer.recv_timeout(Duration::from_millis(300));
        hooks.gate.release();
        let flushed = early.unwrap_or_else(|_| answer.recv().unwrap());
        flusher.join().unwrap();
        let led = leader.join().unwrap();
        assert!(led.is_err(), "{mode}: the leader's hint rewrite failed");
        assert!(
            flushed.is_err(),
            "{mode}: a flush returned Ok for the record at {lsn}, whose durable hint never \
             reached the file"
        );
        assert!(
            wal.flushed_lsn() <= lsn,
            "{mode}: flushed_lsn {} covers the record at {lsn}, which no follower can see",
            wal.flushed_lsn()
        );
        drop(wal);
        // The first record's flush returned Ok: a follower of the files sees it.
        let mut follower = Follower::open(dir.path(), Some(keys.clone()), Lsn(0)).unwrap();
        let first = follower.next_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            first.is_some_and(|r| r.payload == b"first"),
            "{mode}: the follower sees the record acknowledged first"
        );
    }
}
