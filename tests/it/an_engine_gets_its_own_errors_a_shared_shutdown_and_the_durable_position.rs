//! Small things an engine embedding the log needs: a replay callback that fails with the
//! engine's own error type gets it back as it was (and the open changes nothing), from a
//! checkpoint too; a log shared
//! as an `Arc<Wal>` can be shut down by reference, after which every call says it was shut
//! down; a follower knows how far the log is durable as soon as it is opened.

use crate::support;

use std::sync::Arc;

use support::{payload, small_config};
use walcrypt::{Error, Follower, KeyRing, Lsn, Mode, Wal};

#[derive(Debug)]
enum EngineError {
    Log(Error),
    BadRecord(Lsn),
}

impl From<Error> for EngineError {
    fn from(e: Error) -> Self {
        EngineError::Log(e)
    }
}

#[test]
fn a_replay_callback_returns_the_engines_own_error() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(tmp.path(), small_config(Mode::PerRecord, &keys)).unwrap();
    let lsns: Vec<Lsn> = (0..20)
        .map(|i| wal.append(1, &payload(i, 100)).unwrap())
        .collect();
    wal.close().unwrap();
    let bad = lsns[7];
    let mut seen = 0;
    let opened = Wal::open_and_apply(
        tmp.path(),
        small_config(Mode::PerRecord, &keys),
        Lsn::default(),
        |r| {
            if r.lsn == bad {
                return Err(EngineError::BadRecord(r.lsn));
            }
            seen += 1;
            Ok(())
        },
    );
    match opened {
        Err(EngineError::BadRecord(lsn)) => assert_eq!(lsn, bad),
        other => panic!("expected the engine's error, got {other:?}"),
    }
    assert_eq!(seen, 7);
    // Nothing was cut: every record is still there, and walcrypt's own errors convert.
    let mut all = 0;
    let wal = Wal::open_and_apply(
        tmp.path(),
        small_config(Mode::PerRecord, &keys),
        Lsn::default(),
        |_| -> Result<(), EngineError> {
            all += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(all, 20);
    wal.close().unwrap();
    let missing = tmp.path().join("missing");
    match Wal::open_and_apply(
        &missing,
        small_config(Mode::PerRecord, &keys),
        Lsn(0x10000),
        |_| -> Result<(), EngineError> { Ok(()) },
    ) {
        Err(EngineError::Log(Error::CheckpointBeyondEnd { .. })) => {}
        other => panic!("expected the log's error, converted: {other:?}"),
    }
}

/// The same from a checkpoint: the engine's error from `restore` or from `apply` comes back
/// as it was, the open cuts nothing, and walcrypt's refusals before `restore` convert.
#[test]
fn a_restart_from_a_checkpoint_returns_the_engines_own_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let config = || small_config(Mode::PerRecordGcm, &keys);
    let wal = Wal::open(tmp.path(), config()).unwrap();
    let lsns: Vec<Lsn> = (0..20)
        .map(|i| wal.append(1, &payload(i, 100)).unwrap())
        .collect();
    wal.checkpoint(lsns[5], b"state 5").unwrap();
    wal.close().unwrap();

    let mut applied = 0;
    let refused = Wal::open_from_checkpoint_and_apply(
        tmp.path(),
        config(),
        |c| match c {
            Some(c) if c.meta.as_slice() == b"state 5" => Err(EngineError::BadRecord(c.lsn)),
            other => panic!("restore got {other:?}"),
        },
        |_| -> Result<(), EngineError> {
            applied += 1;
            Ok(())
        },
    );
    match refused {
        Err(EngineError::BadRecord(lsn)) => assert_eq!(lsn, lsns[5]),
        other => panic!("expected the restore's own error, got {other:?}"),
    }
    assert_eq!(applied, 0, "records applied after restore failed");

    let bad = lsns[12];
    let mut seen = Vec::new();
    let refused = Wal::open_from_checkpoint_and_apply(
        tmp.path(),
        config(),
        |_| Ok(()),
        |r| {
            if r.lsn == bad {
                return Err(EngineError::BadRecord(r.lsn));
            }
            seen.push(r.lsn);
            Ok(())
        },
    );
    match refused {
        Err(EngineError::BadRecord(lsn)) => assert_eq!(lsn, bad),
        other => panic!("expected the apply's own error, got {other:?}"),
    }
    assert_eq!(seen, lsns[5..12].to_vec());

    // Nothing was cut: the replay from the checkpoint hands out every record after it.
    let mut all = Vec::new();
    let wal = Wal::open_from_checkpoint_and_apply(
        tmp.path(),
        config(),
        |_| Ok(()),
        |r| -> Result<(), EngineError> {
            all.push(r.lsn);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(all, lsns[5..].to_vec());
    // walcrypt's own refusal before restore (the log is open in `wal`) comes back converted,
    // and restore never runs.
    let refused = Wal::open_from_checkpoint_and_apply(
        tmp.path(),
        config(),
        |c| -> Result<(), EngineError> { panic!("restore ran on {c:?}") },
        |_| Ok(()),
    );
    match refused {
        Err(EngineError::Log(Error::Locked(_))) => {}
        other => panic!("expected the log's refusal, converted: {other:?}"),
    }
    wal.close().unwrap();
}

#[test]
fn a_shared_log_is_shut_down_by_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Arc::new(Wal::open(tmp.path(), small_config(Mode::PerRecord, &keys)).unwrap());
    let other = wal.clone();
    let lsn = wal.append(1, b"kept").unwrap();
    wal.shutdown().unwrap();
    assert!(matches!(other.append(1, b"late"), Err(Error::Closed(_))));
    assert!(matches!(other.flush(lsn), Err(Error::Closed(_))));
    assert!(matches!(wal.shutdown(), Err(Error::Closed(_))));
    drop((wal, other));
    // Durable, and the directory lock is gone with the last reference.
    let records = support::read_all(tmp.path(), Some(keys.clone()));
    assert_eq!(records.len(), 1);
    let wal = Wal::open(tmp.path(), small_config(Mode::PerRecord, &keys)).unwrap();
    wal.close().unwrap();
}

/// Appends that run while another thread shuts the log down: each one either returns Ok, and
/// its record is in the log afterwards, or is refused with `Error::Closed`. Before, an append
/// could reserve its place after the shutdown's final flush had read the end, return Ok, and be
/// neither written nor refused: an outside probe found 9 to 71 such records in most runs.
#[test]
fn an_append_racing_a_shutdown_is_kept_or_refused() {
    for (round, mode) in Mode::ALL.into_iter().cycle().take(8).enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys)
            .sync(walcrypt::SyncMode::Buffered)
            .segment_size(64 * 512);
        let wal = Arc::new(Wal::open(tmp.path(), config).unwrap());
        let appended = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let appenders: Vec<_> = (0..3u64)
            .map(|t| {
                let wal = wal.clone();
                let appended = appended.clone();
                std::thread::spawn(move || {
                    let mut acknowledged = Vec::new();
                    for i in 0.. {
                        let body = payload(t << 32 | i, 24);
                        match wal.append(1, &body) {
                            Ok(lsn) => {
                                acknowledged.push((lsn, body));
                                appended.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(Error::Closed(_)) => return acknowledged,
                            Err(e) => panic!("append: {e}"),
                        }
                    }
                    unreachable!()
                })
            })
            .collect();
        // Let the appenders get going (on a loaded machine they may not have started within a
        // fixed sleep), so the shutdown lands among appends.
        let started = std::time::Instant::now();
        while appended.load(std::sync::atomic::Ordering::Relaxed) == 0
            && started.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(2 + round as u64));
        wal.shutdown().unwrap();
        let acknowledged: Vec<_> = appenders
            .into_iter()
            .flat_map(|a| a.join().unwrap())
            .collect();
        drop(wal);
        let on_disk: std::collections::HashMap<Lsn, Vec<u8>> =
            support::read_all(tmp.path(), Some(keys.clone()))
                .into_iter()
                .map(|(lsn, _, body)| (lsn, body))
                .collect();
        assert!(!acknowledged.is_empty(), "{mode}: no append ran");
        let lost: Vec<Lsn> = acknowledged
            .iter()
            .filter(|(lsn, body)| on_disk.get(lsn) != Some(body))
            .map(|(lsn, _)| *lsn)
            .collect();
        assert!(
            lost.is_empty(),
            "{mode}: {} of {} acknowledged appends missing after the shutdown, first {:?}",
            lost.len(),
            acknowledged.len(),
            lost.first()
        );
        assert_eq!(
            on_disk.len(),
            acknowledged.len(),
            "{mode}: records nobody appended"
        );
    }
}

#[test]
fn a_follower_knows_the_durable_position_from_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(tmp.path(), small_config(Mode::PerRecord, &keys)).unwrap();
    let lsns: Vec<Lsn> = (0..60)
        .map(|i| wal.append(1, &payload(i, 100)).unwrap())
        .collect();
    let end = wal.end_lsn();
    wal.close().unwrap();
    let follower = Follower::open(tmp.path(), Some(keys), lsns[30]).unwrap();
    assert_eq!(follower.durable_lsn(), end);
}
