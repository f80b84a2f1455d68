//! An `EventListener` hears of recovery, flush rounds, segment switches and (once) poisoning,
//! and the poisoned error keeps the operating system's error kind. Listener calls run with no
//! lock of the log held: a listener may call back into the same `Wal`.

use crate::support;

use std::io::ErrorKind;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use support::config_4k_pages;
use support::faults::{Effect, FaultStorage, Op};
use walcrypt::{
    Error, EventListener, FlushRound, KeyRing, Mode, PoisonCause, RecoverySummary, SegmentSwitch,
    SyncMode, Wal,
};

#[derive(Default)]
struct Heard {
    recoveries: Mutex<Vec<RecoverySummary>>,
    rounds: Mutex<Vec<FlushRound>>,
    switches: Mutex<Vec<SegmentSwitch>>,
    poisonings: Mutex<Vec<PoisonCause>>,
    /// Set after open: the listener reads the log's state from inside its calls.
    wal: OnceLock<Weak<Wal>>,
}

struct Listener(Arc<Heard>);

impl EventListener for Listener {
    fn on_segment_switch(&self, event: &SegmentSwitch) {
        // Calls back into the log: would deadlock if the insert or write lock were held here.
        if let Some(wal) = self.0.wal.get().and_then(Weak::upgrade) {
            let _ = wal.stats();
            let _ = wal.end_lsn();
        }
        self.0.switches.lock().unwrap().push(event.clone());
    }
    fn on_flush_round(&self, event: &FlushRound) {
        self.0.rounds.lock().unwrap().push(event.clone());
    }
    fn on_poisoned(&self, cause: &PoisonCause) {
        self.0.poisonings.lock().unwrap().push(cause.clone());
    }
    fn on_recovery(&self, summary: &RecoverySummary) {
        self.0.recoveries.lock().unwrap().push(summary.clone());
    }
}

#[test]
fn listener_hears_recovery_rounds_switches_and_poisoning() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let heard = Arc::new(Heard::default());
    let storage = FaultStorage::new();
    let config = config_4k_pages(Mode::PerRecord, &keys, SyncMode::Durable)
        .storage(storage.arc())
        .listener(Arc::new(Listener(heard.clone())));

    let wal = Arc::new(Wal::open(dir.path(), config.clone()).unwrap());
    heard.wal.set(Arc::downgrade(&wal)).unwrap();
    {
        let recoveries = heard.recoveries.lock().unwrap();
        assert_eq!(recoveries.len(), 1);
        assert!(recoveries[0].created);
        assert_eq!(recoveries[0].salvaged, None);
    }
    assert_eq!(
        wal.recovery_summary(),
        heard.recoveries.lock().unwrap().first()
    );

    // 64 KiB segments: 200 records of 1 KiB cross at least two segment boundaries.
    let mut last = None;
    for i in 0..200u32 {
        let lsn = wal.append(1, &[i as u8; 1024]).unwrap();
        if i % 10 == 9 {
            wal.flush(lsn).unwrap();
        }
        last = Some(lsn);
    }
    let end = wal.end_lsn();
    let rounds = heard.rounds.lock().unwrap().clone();
    assert_eq!(
        rounds.len(),
        20,
        "one round per flush, no concurrent flushers"
    );
    assert!(rounds.iter().all(|r| r.synced));
    assert!(rounds.windows(2).all(|w| w[0].flushed_to < w[1].flushed_to));
    assert!(rounds.last().unwrap().flushed_to > last.unwrap());
    let switches = heard.switches.lock().unwrap().clone();
    assert!(switches.len() >= 2, "{switches:?}");
    let geo = wal.geometry();
    for pair in switches.windows(2) {
        assert_eq!(pair[0].to, pair[1].from, "switches chain: {switches:?}");
    }
    for s in &switches {
        assert!(s.from < s.to);
        assert_eq!(u64::from(s.to) % geo.segment_size, 0);
    }
    assert!(heard.poisonings.lock().unwrap().is_empty());

    // A failed fdatasync poisons the log; the listener hears it once, with the error kind.
    storage.fail_from(
        Op::Sync,
        storage.count(Op::Sync) + 1,
        Effect::Errno(libc::ENOSPC),
    );
    let lsn = wal.append(1, b"doomed").unwrap();
    let err = wal.flush(lsn).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    match wal.append(1, b"refused") {
        Err(Error::Poisoned(cause)) => {
            assert_eq!(cause.kind, ErrorKind::StorageFull);
            assert_eq!(cause.op, "fdatasync segment");
            assert!(
                cause.path.file_name().is_some(),
                "names the segment: {cause:?}"
            );
        }
        other => panic!("expected Poisoned, got {other:?}"),
    }
    assert!(wal.flush(lsn).is_err());
    let poisonings = heard.poisonings.lock().unwrap().clone();
    assert_eq!(poisonings.len(), 1, "reported once: {poisonings:?}");
    assert_eq!(poisonings[0].kind, ErrorKind::StorageFull);
    drop(wal);

    // Reopen: recovery reports where the log ends.
    storage.heal();
    let wal = Wal::open(dir.path(), config).unwrap();
    let recoveries = heard.recoveries.lock().unwrap().clone();
    assert_eq!(recoveries.len(), 2);
    assert!(!recoveries[1].created);
    assert!(recoveries[1].end >= end, "{:?} < {end}", recoveries[1].end);
    assert_eq!(recoveries[1].salvaged, None);
    wal.close().unwrap();
}

#[test]
fn without_a_listener_nothing_is_reported_and_stats_still_count() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(
        dir.path(),
        config_4k_pages(Mode::Plaintext, &keys, SyncMode::Durable),
    )
    .unwrap();
    assert!(wal.recovery_summary().unwrap().created);
    let lsn = wal.append(1, b"x").unwrap();
    wal.flush(lsn).unwrap();
    assert_eq!(wal.stats().appends, 1);
    assert_eq!(wal.stats().fsyncs, 1);
}
