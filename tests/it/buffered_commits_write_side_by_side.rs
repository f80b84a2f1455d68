//! A `Buffered` flush (plaintext, perrecord, perrecord-gcm) joins no group-commit round: a
//! commit that arrives while another commit's write runs reserves and writes its own range
//! beside it, instead of sleeping until that write ends and then writing for everyone waiting.
//! It still returns only once everything before its record has been written: its range lands
//! behind the earlier one. A flush of a record a write under way covers writes nothing
//! (`WalStats::write_outs`). pagelevel keeps group commit (its write-out runs under the write
//! lock) and is not asked the first question.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use crate::support::hooked::{Gate, Hooked, Hooks};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

/// Once armed, counts segment writes and holds the first until released (then fails it
/// with EIO when `fail_held` is set).
#[derive(Default)]
struct HoldFirstWrite {
    armed: AtomicBool,
    fail_held: bool,
    writes: AtomicUsize,
    gate: Gate,
}

impl Hooks for HoldFirstWrite {
    fn write_result(&self, path: &Path, _offset: u64, _buf: &[u8]) -> std::io::Result<()> {
        if !self.armed.load(Ordering::SeqCst) || path.extension().is_none_or(|e| e != "wal") {
            return Ok(());
        }
        if self.writes.fetch_add(1, Ordering::SeqCst) == 0 {
            self.gate.hold();
            if self.fail_held {
                // EIO, as Linux numbers it.
                return Err(std::io::Error::from_raw_os_error(5));
            }
        }
        Ok(())
    }
}

/// A Buffered log over `hooks` holding one flushed record, `before`.
fn log_with(mode: Mode, keys: &KeyRing, dir: &Path, hooks: &Arc<HoldFirstWrite>) -> Arc<Wal> {
    let config = Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Buffered)
        .page_size(4096)
        .segment_size(256 * 1024)
        .prepare_segments(false)
        .storage(Arc::new(Hooked(hooks.clone())));
    let wal = Arc::new(Wal::open(dir, config).unwrap());
    wal.flush(wal.append(1, b"before").unwrap()).unwrap();
    wal
}

/// Waits (up to 10 s) until `hooks` has seen `n` segment writes; returns how many it saw.
fn writes_reach(hooks: &HoldFirstWrite, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    while hooks.writes.load(Ordering::SeqCst) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    hooks.writes.load(Ordering::SeqCst)
}

#[test]
fn a_buffered_commit_writes_beside_a_write_under_way_and_returns_after_it() {
    for mode in [Mode::Plaintext, Mode::PerRecord, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let hooks = Arc::new(HoldFirstWrite::default());
        let wal = log_with(mode, &keys, dir.path(), &hooks);
        hooks.armed.store(true, Ordering::SeqCst);
        let stats_before = wal.stats();

        // The first commit's write is held.
        let first = wal.append(1, b"first").unwrap();
        let held = {
            let wal = wal.clone();
            std::thread::spawn(move || wal.flush(first))
        };
        hooks.gate.wait_held();
        // Another flush of the held record: the held write covers it.
        let covered = {
            let wal = wal.clone();
            std::thread::spawn(move || wal.flush(first))
        };

        // A second commit arrives while it is held.
        let second = wal.append(1, b"second").unwrap();
        let (sent, answer) = mpsc::channel();
        let beside = {
            let wal = wal.clone();
            std::thread::spawn(move || sent.send(wal.flush(second)).unwrap())
        };
        let writes = writes_reach(&hooks, 2);
        // Before the assertions: a failed one must not leave the held write waiting.
        let early = answer.recv_timeout(Duration::from_millis(200));
        hooks.gate.release();
        assert!(
            writes >= 2,
            "{mode}: the second commit's write did not start while the first was held \
             ({writes} segment writes)"
        );
        assert!(
            early.is_err(),
            "{mode}: the second commit's flush returned ({early:?}) while the write of the \
             record before it was held"
        );
        answer.recv().unwrap().unwrap();
        beside.join().unwrap();
        held.join().unwrap().unwrap();
        covered.join().unwrap().unwrap();
        assert!(wal.flushed_lsn() > second);
        let stats = wal.stats();
        assert_eq!(
            stats.write_outs - stats_before.write_outs,
            2,
            "{mode}: write-outs of three flushes, two of one record"
        );
        assert_eq!(
            stats.write_lock_acquisitions - stats_before.write_lock_acquisitions,
            3,
            "{mode}: write-lock acquisitions of three flushes"
        );

        // Both are in the files, in order.
        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let payloads: Vec<Vec<u8>> = reader
            .records_from(Lsn::default())
            .map(|r| r.unwrap().payload)
            .collect();
        assert_eq!(
            payloads,
            [b"before".to_vec(), b"first".to_vec(), b"second".to_vec()],
            "{mode}"
        );
        drop(wal);
    }
}

/// The held write fails: the range written beside it landed, but no flush of a record after
/// the failed one returns Ok, and the flushed position stays where it was.
#[test]
fn a_range_written_beside_a_failed_one_is_never_acknowledged() {
    for mode in [Mode::Plaintext, Mode::PerRecord, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let hooks = Arc::new(HoldFirstWrite {
            fail_held: true,
            ..HoldFirstWrite::default()
        });
        let wal = log_with(mode, &keys, dir.path(), &hooks);
        let flushed_before = wal.flushed_lsn();
        hooks.armed.store(true, Ordering::SeqCst);
        let first = wal.append(1, b"first").unwrap();
        let held = {
            let wal = wal.clone();
            std::thread::spawn(move || wal.flush(first))
        };
        hooks.gate.wait_held();
        let second = wal.append(1, b"second").unwrap();
        let beside = {
            let wal = wal.clone();
            std::thread::spawn(move || wal.flush(second))
        };
        let writes = writes_reach(&hooks, 2);
        // A flush of the second record arriving once its range was written.
        let again = {
            let wal = wal.clone();
            std::thread::spawn(move || wal.flush(second))
        };
        std::thread::sleep(Duration::from_millis(50));
        hooks.gate.release();
        assert!(
            writes >= 2,
            "{mode}: the second range was not written beside the first"
        );
        let results = [
            held.join().unwrap(),
            beside.join().unwrap(),
            again.join().unwrap(),
        ];
        for result in &results {
            assert!(
                result.is_err(),
                "{mode}: a flush returned Ok in a log whose write below it failed: {results:?}"
            );
        }
        assert_eq!(wal.flushed_lsn(), flushed_before, "{mode}");
        assert!(wal.sync().is_err(), "{mode}: sync of a poisoned log");
    }
}
