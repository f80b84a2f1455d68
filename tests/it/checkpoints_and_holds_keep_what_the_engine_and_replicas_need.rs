//! Checkpoints as the library keeps them: `Wal::checkpoint` records the engine's position and
//! metadata durably (sealed in the encrypted modes) and purges what no one needs;
//! `open_from_checkpoint` restores from it after a restart without the engine storing the LSN
//! itself. Retention holds keep what a replica still needs, across reopens, until they are
//! released or fall too far behind; a follower left behind a purge gets `Error::Purged`.

use std::sync::Arc;
use std::time::Duration;

use walcrypt::{
    CONTROL_FILE, Checkpoint, Config, Error, Follower, Kek, KeyProvider, KeyRing, KeyStore, Lsn,
    Mode, Reader, SyncMode, Wal,
};

const SEGMENT: u64 = 4096;

fn config(mode: Mode, keys: &KeyRing, sync: SyncMode) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(512)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

/// Appends records of `len` bytes until the log has passed `to`; returns their LSNs.
fn fill(wal: &Wal, to: u64, len: usize) -> Vec<Lsn> {
    let mut lsns = Vec::new();
    while u64::from(wal.end_lsn()) < to {
        lsns.push(wal.append(1, &vec![lsns.len() as u8; len]).unwrap());
    }
    lsns
}

fn oldest_segment(dir: &std::path::Path) -> u64 {
    Reader::open(dir, None).unwrap().segments()[0]
        .header
        .start
        .into()
}

#[test]
fn a_checkpoint_restores_the_engine_after_a_restart_in_every_mode() {
    for mode in Mode::ALL {
        for sync in [SyncMode::Durable, SyncMode::Buffered] {
            let what = format!("{mode} {sync:?}");
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("wal");
            let keys = KeyRing::generate().unwrap();
            let wal = Wal::open(&dir, config(mode, &keys, sync)).unwrap();
            assert!(wal.last_checkpoint().is_none());
            let lsns = fill(&wal, 4 * SEGMENT, 150);
            let at = lsns[lsns.len() / 2];
            let purged = wal.checkpoint(at, b"snapshot-0001").unwrap();
            assert!(purged >= 1, "{what}: the checkpoint purged nothing");
            assert!(oldest_segment(&dir) <= u64::from(at), "{what}");
            let after = fill(&wal, 5 * SEGMENT, 150);
            // Never backwards.
            assert!(matches!(
                wal.checkpoint(lsns[0], b"older"),
                Err(Error::InvalidArgument {
                    op: "checkpoint",
                    ..
                })
            ));
            assert!(matches!(
                wal.checkpoint(Lsn(u64::from(wal.end_lsn()) + 1), b"beyond"),
                Err(Error::LsnNotAvailable { .. })
            ));
            // Dropped, not closed: the checkpoint was durable when it returned, the records
            // after it are what the log kept.
            wal.sync().unwrap();
            drop(wal);

            let control = std::fs::read(dir.join(CONTROL_FILE)).unwrap();
            let in_clear = control.windows(13).any(|w| w == b"snapshot-0001");
            assert_eq!(
                in_clear,
                mode == Mode::Plaintext,
                "{what}: the metadata is sealed in the encrypted modes only"
            );

            let cp = Checkpoint::read(&dir, &config(mode, &keys, sync))
                .unwrap()
                .unwrap_or_else(|| panic!("{what}: no checkpoint read back"));
            assert_eq!((cp.lsn, cp.meta.as_slice()), (at, &b"snapshot-0001"[..]));
            let mut restored = None;
            let mut replayed = Vec::new();
            let wal = Wal::open_from_checkpoint(
                &dir,
                config(mode, &keys, sync),
                |cp| {
                    restored = cp.map(|c| c.meta.to_vec());
                    Ok(())
                },
                |r| {
                    replayed.push(r.lsn);
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(restored.as_deref(), Some(&b"snapshot-0001"[..]), "{what}");
            let expected: Vec<Lsn> = lsns
                .iter()
                .chain(after.iter())
                .copied()
                .filter(|l| *l >= at)
                .collect();
            assert_eq!(replayed, expected, "{what}: replay from the checkpoint");
            assert_eq!(wal.last_checkpoint().map(|c| c.lsn), Some(at));
            wal.close().unwrap();

            // Without the key the metadata stays sealed.
            if mode.is_encrypted() {
                let other = KeyRing::generate().unwrap();
                assert!(Checkpoint::read(&dir, &config(mode, &other, sync)).is_err());
            }
        }
    }
}

#[test]
fn a_hold_keeps_what_a_replica_needs_until_it_moves_or_is_released() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wal");
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(&dir, config(mode, &keys, SyncMode::Durable)).unwrap();
        let lsns = fill(&wal, 2 * SEGMENT, 150);
        let replica_at = lsns[3];
        wal.hold("replica-1", replica_at).unwrap();
        assert!(matches!(
            wal.hold("bad name!", replica_at),
            Err(Error::InvalidArgument { op: "hold", .. })
        ));
        let more = fill(&wal, 6 * SEGMENT, 150);
        let late = more[more.len() - 2];
        wal.checkpoint(late, b"snap").unwrap();
        assert!(
            oldest_segment(&dir) <= u64::from(replica_at),
            "{mode}: the checkpoint purged what the hold keeps"
        );
        // The hold survives a reopen.
        wal.close().unwrap();
        let wal = Wal::open(&dir, config(mode, &keys, SyncMode::Durable)).unwrap();
        assert_eq!(wal.holds().len(), 1);
        assert_eq!(wal.holds()[0].lsn, replica_at);
        let mut follower = Follower::open(&dir, Some(keys.clone()), replica_at).unwrap();
        let first = follower.next_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(first.map(|r| r.lsn), Some(replica_at), "{mode}");
        // Moved on, the hold lets the next purge go further; released, it keeps nothing.
        wal.hold("replica-1", more[0]).unwrap();
        wal.purge_before(late).unwrap();
        assert!(oldest_segment(&dir) <= u64::from(more[0]));
        assert!(oldest_segment(&dir) > u64::from(replica_at), "{mode}");
        assert!(wal.release_hold("replica-1").unwrap());
        assert!(!wal.release_hold("replica-1").unwrap());
        wal.purge_before(late).unwrap();
        assert!(oldest_segment(&dir) > u64::from(more[0]), "{mode}");
        // A replica starting where the hold was is told what it needed and what is left.
        drop(follower);
        match Follower::open(&dir, Some(keys.clone()), replica_at) {
            Err(Error::Purged { needed, oldest }) => {
                assert_eq!(needed, replica_at);
                assert_eq!(u64::from(oldest), oldest_segment(&dir));
            }
            other => panic!("{mode}: a follower behind the purge got {other:?}"),
        }
        assert!(matches!(
            wal.hold("replica-2", replica_at),
            Err(Error::Purged { .. })
        ));

        wal.close().unwrap();
    }
}

#[test]
fn a_hold_too_far_behind_is_given_up_so_the_disk_does_not_fill() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let keys = KeyRing::generate().unwrap();
    let config = config(Mode::PerRecord, &keys, SyncMode::Durable).max_hold_bytes(3 * SEGMENT);
    let wal = Wal::open(&dir, config.clone()).unwrap();
    let lsns = fill(&wal, SEGMENT, 150);
    wal.hold("dead-replica", lsns[0]).unwrap();
    let more = fill(&wal, 8 * SEGMENT, 150);
    wal.checkpoint(more[more.len() - 1], b"snap").unwrap();
    assert!(
        oldest_segment(&dir) > u64::from(lsns[0]),
        "the dead replica's hold still keeps the log"
    );
    let holds = wal.holds();
    assert!(holds[0].lost, "the hold is marked lost: {holds:?}");
    wal.close().unwrap();
    // Lost stays lost across a reopen, until the holder sets it again.
    let wal = Wal::open(&dir, config).unwrap();
    assert!(wal.holds()[0].lost);
    wal.hold("dead-replica", wal.end_lsn()).unwrap();
    assert!(!wal.holds()[0].lost);
    wal.close().unwrap();
}

#[test]
fn the_key_a_checkpoint_is_sealed_under_is_not_retired() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = Arc::new(KeyStore::create(tmp.path().join("keys"), kek.clone()).unwrap());
    let config = Config::new(Mode::PerRecord)
        .key_store(store.clone())
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(SEGMENT)
        .prepare_segments(false);
    let wal = Wal::open(&dir, config.clone()).unwrap();
    let lsns = fill(&wal, 2 * SEGMENT, 150);
    wal.checkpoint(lsns[2], b"sealed under key 1").unwrap();
    wal.rotate_data_key().unwrap();
    fill(&wal, 6 * SEGMENT, 150);
    // A purge by hand removes every segment of key 1; the checkpoint still needs it.
    wal.purge_before(wal.end_lsn()).unwrap();
    wal.close().unwrap();
    let store = Arc::new(KeyStore::open(tmp.path().join("keys"), kek).unwrap());
    let config = config.key_store(store);
    let cp = Checkpoint::read(&dir, &config).unwrap().unwrap();
    assert_eq!(cp.meta.as_slice(), b"sealed under key 1");
}

#[test]
fn a_checkpoint_at_a_purged_position_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(&dir, config(Mode::PerRecord, &keys, SyncMode::Durable)).unwrap();
    let lsns = fill(&wal, 4 * SEGMENT, 150);
    wal.flush(wal.end_lsn()).unwrap();
    // Purged by hand, with no checkpoint recorded: a restart could not replay from there.
    assert!(wal.purge_before(lsns[lsns.len() - 1]).unwrap() >= 2);
    match wal.checkpoint(lsns[0], b"too old") {
        Err(Error::Purged { needed, oldest }) => {
            assert_eq!(needed, lsns[0]);
            assert_eq!(u64::from(oldest), oldest_segment(&dir));
        }
        other => panic!("a checkpoint at a purged position: {other:?}"),
    }
    assert!(wal.last_checkpoint().is_none());
    wal.close().unwrap();
}

/// A replica's hold taken before the engine's first checkpoint survives a reopen, and the log
/// reopens: the control file then holds holds and no checkpoint. Before, every such file was
/// refused at open ("trailing bytes": it carried a metadata length the format has only with a
/// checkpoint), so the engine could not restart. Found while checking an outside probe's case.
#[test]
fn a_hold_taken_before_any_checkpoint_survives_a_reopen() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable)).unwrap();
        let lsns = fill(&wal, 2 * SEGMENT, 100);
        wal.flush(lsns[lsns.len() - 1]).unwrap();
        wal.hold("replica-1", lsns[3]).unwrap();
        wal.close().unwrap();

        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable))
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        let holds = wal.holds();
        assert_eq!(holds.len(), 1, "{mode}");
        assert_eq!(
            (holds[0].name.as_str(), holds[0].lsn),
            ("replica-1", lsns[3]),
            "{mode}"
        );
        assert!(
            Checkpoint::read(dir.path(), &config(mode, &keys, SyncMode::Durable))
                .unwrap()
                .is_none()
        );
        wal.close().unwrap();
    }
}

/// A hold moved on and then relied on by `purge_before` (no checkpoint between to save the
/// move) is where the purge left it after a restart, clean or not: the purge saves the move
/// before it removes the segment of the hold's old, saved position. Before, the restart
/// brought the hold back to that position, found it purged and gave the hold up, so the next
/// checkpoint purged what the replica still needed.
#[test]
fn a_hold_moved_then_purged_behind_is_kept_where_it_moved_after_a_restart() {
    for mode in Mode::ALL {
        for clean in [true, false] {
            let what = format!("{mode}, clean close {clean}");
            let FilledLog {
                _tmp,
                dir,
                keys,
                config,
                wal,
                lsns,
                ..
            } = filled_log(mode, 6);
            let (old, moved, checkpoint) = (lsns[2], lsns[lsns.len() / 2], lsns[lsns.len() - 3]);
            assert!(u64::from(moved) >= u64::from(old) + 2 * SEGMENT, "{what}");
            wal.hold("replica", old).unwrap();
            wal.checkpoint(checkpoint, b"snap").unwrap();
            wal.hold("replica", moved).unwrap();
            assert!(wal.purge_before(checkpoint).unwrap() >= 1, "{what}");
            assert!(oldest_segment(&dir) > u64::from(old), "{what}");
            let wal = restart_with_the_hold_at(wal, clean, (&dir, &config), moved, &what);
            fill(&wal, u64::from(wal.end_lsn()) + 4 * SEGMENT, 150);
            checkpoint_keeps_the_replica(&wal, (&dir, &keys), moved, &what);
        }
    }
}

/// Closes `wal` (`clean`) or drops it as a crash would, opens the log again and checks that
/// its one hold, "replica", is in force at `at`.
fn restart_with_the_hold_at(
    wal: Wal,
    clean: bool,
    (dir, config): (&std::path::Path, &Config),
    at: Lsn,
    what: &str,
) -> Wal {
    if clean {
        wal.close().unwrap();
    } else {
        drop(wal);
    }
    let wal = Wal::open(dir, config.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let holds = wal.holds();
    assert_eq!(holds.len(), 1, "{what}");
    assert_eq!((holds[0].lsn, holds[0].lost), (at, false), "{what}");
    wal
}

/// A checkpoint at the end keeps what the replica holding `at` needs: its follower reads on
/// from there. Closes `wal`.
fn checkpoint_keeps_the_replica(
    wal: &Wal,
    (dir, keys): (&std::path::Path, &KeyRing),
    at: Lsn,
    what: &str,
) {
    wal.checkpoint(wal.end_lsn(), b"snap-2").unwrap();
    assert!(oldest_segment(dir) <= u64::from(at), "{what}");
    let mut follower =
        Follower::open(dir, Some(keys.clone()), at).unwrap_or_else(|e| panic!("{what}: {e}"));
    let first = follower.next_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(first.map(|r| r.lsn), Some(at), "{what}");
    wal.shutdown().unwrap();
}

/// A replica that re-syncs from an earlier position moves its hold back. A restart must not
/// bring back the later position the file had, which keeps less: before, the move back was
/// saved only with the next write of the control file (not by `close`), and after a clean
/// close or a crash the next checkpoint purged what the replica needed. Found by an outside
/// probe.
#[test]
fn a_hold_moved_back_is_where_it_moved_after_a_restart() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        for clean in [true, false] {
            let what = format!("{mode}, clean close {clean}");
            let FilledLog {
                _tmp,
                dir,
                keys,
                config,
                wal,
                lsns,
                ..
            } = filled_log(mode, 6);
            let (back, ahead) = (lsns[2], lsns[lsns.len() - 3]);
            assert!(u64::from(ahead) >= u64::from(back) + 2 * SEGMENT, "{what}");
            wal.hold("replica", ahead).unwrap();
            wal.hold("replica", back).unwrap();
            let wal = restart_with_the_hold_at(wal, clean, (&dir, &config), back, &what);
            checkpoint_keeps_the_replica(&wal, (&dir, &keys), back, &what);
        }
    }
}

/// A Durable log on a fault-injecting storage (no fault unless a test arms one), filled with
/// 150-byte records over `segments` segments, written and synced (a checkpoint then writes
/// nothing but the control file).
struct FilledLog {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    keys: KeyRing,
    storage: crate::support::faults::FaultStorage,
    config: Config,
    wal: Wal,
    lsns: Vec<Lsn>,
}

fn filled_log(mode: Mode, segments: u64) -> FilledLog {
    let _tmp = tempfile::tempdir().unwrap();
    let dir = _tmp.path().join("wal");
    let keys = KeyRing::generate().unwrap();
    let storage = crate::support::faults::FaultStorage::new();
    let config = config(mode, &keys, SyncMode::Durable).storage(storage.arc());
    let wal = Wal::open(&dir, config.clone()).unwrap();
    let lsns = fill(&wal, segments * SEGMENT, 150);
    wal.sync().unwrap();
    FilledLog {
        _tmp,
        dir,
        keys,
        storage,
        config,
        wal,
        lsns,
    }
}

/// A moved hold whose save fails inside a purge (the control file's rename fails): the purge
/// still goes on, keeping what the hold's saved position needs as well as its current one,
/// and after a restart the hold is where the file has it, not given up. A full disk thus
/// never stops every purge while a replica keeps moving its hold.
#[test]
fn a_purge_whose_save_of_a_moved_hold_fails_keeps_what_the_saved_position_needs() {
    use crate::support::faults::{Effect, Op};
    for mode in [Mode::Plaintext, Mode::PerRecordGcm] {
        let FilledLog {
            _tmp,
            dir,
            storage,
            config,
            wal,
            lsns,
            ..
        } = filled_log(mode, 6);
        let (old, moved, late) = (lsns[2], lsns[lsns.len() / 2], lsns[lsns.len() - 3]);
        wal.hold("replica", old).unwrap();
        wal.checkpoint(late, b"snap").unwrap();
        wal.hold("replica", moved).unwrap();
        storage.fail_nth(
            Op::Rename,
            storage.count(Op::Rename) + 1,
            Effect::Errno(libc::EIO),
        );
        wal.purge_before(late)
            .unwrap_or_else(|e| panic!("{mode}: the purge failed with the save: {e}"));
        assert_eq!(
            storage.injected(),
            1,
            "{mode}: the save was tried and failed"
        );
        assert!(
            oldest_segment(&dir) <= u64::from(old),
            "{mode}: purged past the saved hold"
        );
        assert!(wal.poison_cause().is_none(), "{mode}");
        wal.close().unwrap();

        let wal = Wal::open(&dir, config).unwrap();
        let holds = wal.holds();
        assert_eq!((holds[0].lsn, holds[0].lost), (old, false), "{mode}");
        wal.close().unwrap();
    }
}

/// Writes of the control file that fail after their rename (the directory sync fails): the
/// file on disk may hold what the failed write put there. Both sequences an outside probe
/// found lost a replica's log after a restart:
/// - a hold moved back whose save failed so: the purge kept only the position in memory, and
///   the restart found the hold where the failed write put it, purged, and gave it up;
/// - a hold moved forward (unsaved), then a checkpoint whose write failed so, then the hold
///   moved back between the two: the move back was taken for one behind nothing saved and not
///   saved, and the restart found the hold forward, past what the next checkpoint kept.
///
/// A purge now saves holds whose file on disk may say otherwise, keeping what every position
/// such a file may hold needs if that save fails too, and a move back behind any of them is
/// saved at once.
#[test]
fn holds_after_a_control_write_that_failed_past_its_rename_keep_what_a_restart_finds() {
    use crate::support::faults::{Effect, Op};
    for (mode, back_failed) in [(Mode::PerRecord, true), (Mode::PageLevel, false)] {
        for clean in [true, false] {
            let what = format!("{mode}, failed move back {back_failed}, clean close {clean}");
            let FilledLog {
                _tmp,
                dir,
                keys,
                storage,
                config,
                wal,
                lsns,
            } = filled_log(mode, 8);
            let (early, middle, late) = (lsns[2], lsns[lsns.len() / 2], lsns[lsns.len() - 3]);
            let fail_next_dir_sync = || {
                storage.fail_nth(
                    Op::SyncDir,
                    storage.count(Op::SyncDir) + 1,
                    Effect::Errno(libc::EIO),
                )
            };
            let kept = if back_failed {
                wal.hold("replica", late).unwrap();
                fail_next_dir_sync();
                assert!(wal.hold("replica", early).is_err(), "{what}");
                assert_eq!(wal.holds()[0].lsn, late, "{what}: in force where it was");
                // The purge saves it there (the file may say `early`): not given up.
                wal.purge_before(wal.end_lsn()).unwrap();
                late
            } else {
                wal.hold("replica", early).unwrap();
                wal.hold("replica", late).unwrap();
                fail_next_dir_sync();
                assert!(wal.checkpoint(lsns[5], b"snap").is_err(), "{what}");
                wal.hold("replica", middle).unwrap();
                middle
            };
            assert_eq!(storage.injected(), 1, "{what}");
            let wal = restart_with_the_hold_at(wal, clean, (&dir, &config), kept, &what);
            fill(&wal, u64::from(wal.end_lsn()) + 2 * SEGMENT, 150);
            checkpoint_keeps_the_replica(&wal, (&dir, &keys), kept, &what);
        }
    }
}

/// Reads of the log's segment files past their header page fail while `blind` is set: the
/// writer's own check of a checkpoint's position then cannot read the page, and lets the
/// position through, as an earlier build (which had no such check) did.
#[derive(Default)]
struct BlindReads {
    blind: std::sync::atomic::AtomicBool,
}

impl crate::support::hooked::Hooks for BlindReads {
    fn read_bytes(&self, path: &std::path::Path, at: u64, _: &mut [u8]) -> std::io::Result<()> {
        let segment = path.extension().is_some_and(|e| e == "wal") && at >= 512;
        match segment && self.blind.load(std::sync::atomic::Ordering::SeqCst) {
            true => Err(std::io::Error::other("blinded for the test")),
            false => Ok(()),
        }
    }
}

/// A checkpoint taken inside a record (a position no call handed out): no replay can start
/// there. `Wal::checkpoint` refuses it (`InvalidArgument`), keeping the last checkpoint. A
/// control file that names such a position anyway (written by an earlier build, which had no
/// such check: here the writer's check is blinded) makes `open_from_checkpoint` say so before
/// `restore`, naming the control file and the way out, instead of failing the replay with a
/// bare `NotRecordStart` after the engine restored its snapshot (an outside probe of an engine
/// built from the README found the bare error, and later that the checkpoint was accepted).
#[test]
fn a_checkpoint_inside_a_record_is_refused_before_restore_with_the_way_out() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wal");
        let keys = KeyRing::generate().unwrap();
        let hooks = Arc::new(BlindReads::default());
        let config = config(mode, &keys, SyncMode::Durable)
            .storage(Arc::new(crate::support::hooked::Hooked(hooks.clone())));
        let wal = Wal::open(&dir, config.clone()).unwrap();
        let lsns = fill(&wal, 2 * SEGMENT, 150);
        let inside = Lsn(u64::from(lsns[lsns.len() / 2]) + 3);
        let refused = wal.checkpoint(inside, b"snap").unwrap_err();
        assert!(
            matches!(&refused, Error::InvalidArgument { op: "checkpoint", reason } if reason.contains("inside a record")),
            "{mode}: {refused:?}"
        );
        assert!(wal.last_checkpoint().is_none(), "{mode}");
        hooks.blind.store(true, std::sync::atomic::Ordering::SeqCst);
        wal.checkpoint(inside, b"snap").unwrap();
        hooks
            .blind
            .store(false, std::sync::atomic::Ordering::SeqCst);
        wal.close().unwrap();
        let mut restored = false;
        let err = Wal::open_from_checkpoint(
            &dir,
            config.clone(),
            |_| {
                restored = true;
                Ok(())
            },
            |_| Ok(()),
        )
        .map(drop)
        .expect_err("a replay from inside a record");
        assert!(!restored, "{mode}: restore was called");
        let text = err.to_string();
        assert!(
            matches!(err, Error::Control { .. })
                && text.contains(CONTROL_FILE)
                && text.contains(&inside.to_string())
                && text.contains("Wal::open"),
            "{mode}: {text}"
        );
        // The way out works: a plain open, a checkpoint where a record starts, a restart.
        let wal = Wal::open(&dir, config.clone()).unwrap();
        wal.checkpoint(wal.end_lsn(), b"snap-2").unwrap();
        wal.close().unwrap();
        Wal::open_from_checkpoint(&dir, config, |_| Ok(()), |_| Ok(()))
            .unwrap()
            .close()
            .unwrap();
    }
}
