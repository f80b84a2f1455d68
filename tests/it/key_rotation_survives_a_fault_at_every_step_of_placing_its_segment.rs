//! A key rotation makes the segment it switches to under a temporary name (create, header
//! write, length, zeros, fdatasync) before taking the log's locks, and puts it in place after
//! the switch (rename over the segment prepared under the old key, directory sync). An EIO at
//! each of those steps, once or from then on, in both encrypted CTR modes, driven step by
//! step (background preparation off, the next segment prepared with
//! `Wal::prepare_next_segment`):
//!
//! * a single fault costs nothing but the head start: the rotation succeeds, the log is not
//!   poisoned, the writer creates the segment itself when it gets there, and no temporary file
//!   is left;
//! * a fault that keeps failing may stop the log (poisoned), never with a record lost;
//! * without a fault, the rotation creates the replacement and nothing else;
//! * crash images right after the rotation and after more records, in which directory entries
//!   not yet synced may or may not survive, reopen to exactly the acknowledged records, with
//!   the new segment listing the new key, and the open removes every temporary file.

use crate::support;

use std::path::Path;

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, payload};
use walcrypt::{Config, Key, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const SEGMENT: u64 = 64 * 1024;

/// The storage operations of making and placing the replacement, in order. The first of each
/// kind after the rotation starts belongs to it: the switch between them only writes and
/// fdatasyncs, after the replacement's own fdatasync.
const STEPS: [Op; 7] = [
    Op::Create,
    Op::Write,
    Op::SetLen,
    Op::FillZeros,
    Op::Sync,
    Op::Rename,
    Op::SyncDir,
];

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

fn temporary_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

/// Reopens crash images of `dir` (several: directory entries not yet synced may or may not
/// survive, writes since the last fdatasync may be lost or torn) and checks each holds exactly
/// `acked`, in order, and that the open removed every temporary file. Returns the key ids each
/// segment of the last image lists.
fn check_images(
    mode: Mode,
    storage: &FaultStorage,
    dir: &Path,
    images: &Path,
    keys: &KeyRing,
    acked: &[(Lsn, Vec<u8>)],
    what: &str,
) -> Vec<(u64, Vec<u32>)> {
    let mut listed = Vec::new();
    for seed in 0..4 {
        let image = images.join(seed.to_string());
        storage.crash_image_with_names(dir, &image, &mut Rng::new(seed), Tear::AnySectors);
        let mut replayed = Vec::new();
        let wal = Wal::open_and_replay(&image, config(mode, keys), Lsn::default(), |r| {
            replayed.push((r.lsn, r.payload));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{what}: crash image {seed} does not open: {e}"));
        let lsns = |records: &[(Lsn, Vec<u8>)]| records.iter().map(|r| r.0).collect::<Vec<_>>();
        assert_eq!(lsns(&replayed), lsns(acked), "{what}: crash image {seed}");
        assert!(
            replayed == acked,
            "{what}: crash image {seed}: a payload differs"
        );
        assert_eq!(temporary_files(&image), Vec::<String>::new(), "{what}");
        wal.close().unwrap();
        let reader = Reader::open(&image, Some(keys.clone())).unwrap();
        listed = reader
            .segments()
            .iter()
            .map(|s| {
                let ids = s.header.key_checks.iter().map(|(id, _)| *id).collect();
                (u64::from(s.header.start), ids)
            })
            .collect();
    }
    listed
}

fn append_flushed(wal: &Wal, seed: u64, acked: &mut Vec<(Lsn, Vec<u8>)>) -> walcrypt::Result<()> {
    let p = payload(seed, 500);
    let lsn = wal.append(1, &p)?;
    wal.flush(lsn)?;
    acked.push((lsn, p));
    Ok(())
}

#[test]
fn a_fault_at_each_step_loses_nothing() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        for step in [None].into_iter().chain(STEPS.map(Some)) {
            for sticky in [false, true] {
                if step.is_none() && sticky {
                    continue;
                }
                let what = match step {
                    None => format!("{mode}, no fault"),
                    Some(op) => format!("{mode}, EIO at {op:?}{}", if sticky { " on" } else { "" }),
                };
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path().join("log");
                let keys = KeyRing::generate().unwrap();
                let storage = FaultStorage::new();
                let wal = Wal::open(&dir, config(mode, &keys).storage(storage.arc())).unwrap();
                let mut acked = Vec::new();
                for i in 0..3 {
                    append_flushed(&wal, i, &mut acked).unwrap();
                }
                assert!(wal.prepare_next_segment().unwrap(), "{what}: prepared");

                let creates = storage.count(Op::Create);
                let faults = u64::from(step.is_some());
                if let Some(op) = step {
                    let nth = storage.count(op) + 1;
                    let eio = Effect::Errno(libc::EIO);
                    if sticky {
                        storage.fail_from(op, nth, eio);
                    } else {
                        storage.fail_nth(op, nth, eio);
                    }
                }
                let key = Key::generate().unwrap();
                let rotated = wal.activate_key(2, key.clone());
                assert!(storage.injected() >= faults, "{what}: the fault fired");
                let mut both = keys.clone();
                both.add(2, key).unwrap();
                if step.is_none() {
                    assert_eq!(storage.count(Op::Create), creates + 1, "{what}");
                }
                if !sticky {
                    rotated.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(temporary_files(&dir), Vec::<String>::new(), "{what}");
                }

                let image = tmp.path().join("right after");
                check_images(mode, &storage, &dir, &image, &both, &acked, &what);

                // More records, into the new segment when the rotation switched.
                let mut seed = 100;
                let mut failed = None;
                while failed.is_none() && wal.end_lsn() < Lsn(SEGMENT + 8 * 1024) {
                    failed = append_flushed(&wal, seed, &mut acked).err();
                    seed += 1;
                }
                if sticky {
                    storage.heal();
                } else {
                    assert!(failed.is_none(), "{what}: {failed:?}");
                    assert_eq!(storage.injected(), faults, "{what}");
                }
                let image = tmp.path().join("later");
                let listed = check_images(mode, &storage, &dir, &image, &both, &acked, &what);
                if step.is_none() {
                    assert_eq!(
                        storage.count(Op::Create),
                        creates + 1,
                        "{what}: the writer entered the new segment without creating one"
                    );
                }
                if failed.is_none() {
                    assert_eq!(
                        listed,
                        [(0, vec![1]), (SEGMENT, vec![2])],
                        "{what}: the new segment lists the new key"
                    );
                    wal.close().unwrap();
                }
            }
        }
    }
}

/// A rotation whose replacement could not be made or placed leaves the segment prepared under
/// the old key under the next segment's name, for the writer to remake when it gets there. A
/// second rotation before the writer has written into that segment (the log moved there by
/// the first switch, with or without a record appended since) seals its switch record there:
/// under the key the segment is remade with, which its header then lists. Before, the switch
/// read the old file's header and sealed the record under the old key, the writer then remade
/// the segment listing only the new one, and the log no longer opened (`UnlistedKey`).
#[test]
fn a_second_rotation_after_a_failed_replacement_seals_its_switch_under_a_listed_key() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        for op in STEPS {
            for appended in [false, true] {
                let what = format!("{mode}, EIO at {op:?}, a record before the second: {appended}");
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path().join("log");
                let keys = KeyRing::generate().unwrap();
                let storage = FaultStorage::new();
                let wal = Wal::open(&dir, config(mode, &keys).storage(storage.arc())).unwrap();
                let mut acked = Vec::new();
                append_flushed(&wal, 0, &mut acked).unwrap();
                assert!(wal.prepare_next_segment().unwrap(), "{what}: prepared");
                storage.fail_nth(op, storage.count(op) + 1, Effect::Errno(libc::EIO));
                let (two, three) = (Key::generate().unwrap(), Key::generate().unwrap());
                wal.activate_key(2, two.clone())
                    .unwrap_or_else(|e| panic!("{what}: first rotation: {e}"));
                assert_eq!(storage.injected(), 1, "{what}: the fault fired");
                if appended {
                    // In the segment the first switch moved the log to; not written out yet.
                    let p = payload(1, 300);
                    acked.push((wal.append(1, &p).unwrap(), p));
                }
                wal.activate_key(3, three.clone())
                    .unwrap_or_else(|e| panic!("{what}: second rotation: {e}"));
                for seed in 2..6 {
                    append_flushed(&wal, seed, &mut acked)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                }
                assert!(wal.poison_cause().is_none(), "{what}");
                wal.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));

                let mut all = keys.clone();
                all.add(2, two).unwrap();
                all.add(3, three).unwrap();
                let mut replayed = Vec::new();
                let wal = Wal::open_and_replay(&dir, config(mode, &all), Lsn::default(), |r| {
                    replayed.push((r.lsn, r.payload));
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{what}: the log does not open: {e}"));
                assert!(replayed == acked, "{what}: replayed records differ");
                wal.close().unwrap();
            }
        }
    }
}
