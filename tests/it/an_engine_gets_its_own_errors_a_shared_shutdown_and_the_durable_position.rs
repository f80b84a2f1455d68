//! Small things an engine embedding the log needs: a replay callback that fails with the
//! engine's own error type gets it back as it was (and the open changes nothing); a log shared
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
