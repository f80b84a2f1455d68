//! Mistakes an engine can make around checkpoints are refused where they are made, not at the
//! next restart: a checkpoint at a position inside a record (which `open_from_checkpoint` could
//! never replay from), a restart from a checkpoint with the wrong key (which said the checkpoint
//! failed authentication, as if the control file had been altered), and a restart from a
//! checkpoint of a log another `Wal` has open (which called `restore` before it said `Locked`).
//! All three were found by an outside probe of the embedder's contract.

use walcrypt::{Config, Error, Key, KeyRing, Lsn, Mode, SyncMode, Wal};

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(4096)
}

#[test]
fn a_checkpoint_inside_a_record_is_refused_and_the_last_one_kept() {
    for mode in [
        Mode::Plaintext,
        Mode::PerRecord,
        Mode::PageLevel,
        Mode::PerRecordGcm,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
        let mut lsns = Vec::new();
        for i in 0..20u8 {
            lsns.push(wal.append(1, &[i; 300]).unwrap());
        }
        wal.flush(wal.end_lsn()).unwrap();
        wal.checkpoint(lsns[3], b"at a record").unwrap();
        for inside in [lsns[5] + 1, lsns[6] + 40, lsns[7] + 299] {
            let error = wal.checkpoint(inside, b"inside").unwrap_err();
            match &error {
                Error::InvalidArgument { op, reason } => {
                    assert_eq!(*op, "checkpoint", "{mode:?}");
                    assert!(reason.contains("inside a record"), "{mode:?}: {reason}");
                }
                other => panic!("{mode:?}: checkpoint at {inside}: {other:?}"),
            }
            assert_eq!(wal.last_checkpoint().unwrap().lsn, lsns[3], "{mode:?}");
        }
        // Every position the log handed out is still accepted.
        for at in [lsns[8], lsns[19], wal.flushed_lsn(), wal.end_lsn()] {
            wal.checkpoint(at, b"handed out").unwrap();
        }
        drop(wal);
        let mut replayed = 0;
        let wal = Wal::open_from_checkpoint(
            dir.path(),
            config(mode, &keys),
            |checkpoint| {
                assert_eq!(checkpoint.unwrap().meta.as_slice(), b"handed out");
                Ok(())
            },
            |_| {
                replayed += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(replayed, 0, "{mode:?}: the last checkpoint is at the end");
        wal.close().unwrap();
    }
}

#[test]
fn a_restart_from_a_checkpoint_with_the_wrong_key_says_wrong_key() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
        let lsn = wal.append(1, b"a record").unwrap();
        wal.flush(lsn).unwrap();
        wal.checkpoint(wal.end_lsn(), b"sealed metadata").unwrap();
        wal.close().unwrap();
        let mut wrong = KeyRing::empty();
        wrong.add(1, Key::generate().unwrap()).unwrap();
        let mut restored = false;
        let error = Wal::open_from_checkpoint(
            dir.path(),
            config(mode, &wrong),
            |_| {
                restored = true;
                Ok(())
            },
            |_| Ok(()),
        )
        .unwrap_err();
        assert!(
            matches!(error, Error::WrongKey { key_id: 1, .. }),
            "{mode:?}: {error:?}"
        );
        assert!(!restored, "{mode:?}");
        let error = walcrypt::Checkpoint::read(dir.path(), &config(mode, &wrong)).unwrap_err();
        assert!(
            matches!(error, Error::WrongKey { key_id: 1, .. }),
            "{mode:?}: {error:?}"
        );
    }
}

#[test]
fn a_restart_from_a_checkpoint_of_a_log_open_elsewhere_is_locked_before_restore() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    wal.flush(wal.append(1, b"a record").unwrap()).unwrap();
    wal.checkpoint(wal.end_lsn(), b"snapshot").unwrap();
    let mut restored = false;
    let error = Wal::open_from_checkpoint(
        dir.path(),
        config(Mode::PerRecord, &keys),
        |_| {
            restored = true;
            Ok(())
        },
        |_| Ok(()),
    )
    .unwrap_err();
    assert!(matches!(error, Error::Locked(_)), "{error:?}");
    assert!(!restored, "restore was called for an open that failed");
    wal.close().unwrap();
    // Once the other Wal is gone, the restart goes ahead.
    let wal = Wal::open_from_checkpoint(
        dir.path(),
        config(Mode::PerRecord, &keys),
        |checkpoint| {
            assert_eq!(checkpoint.map(|c| c.lsn > Lsn(0)), Some(true));
            restored = true;
            Ok(())
        },
        |_| Ok(()),
    )
    .unwrap();
    assert!(restored);
    wal.close().unwrap();
}
