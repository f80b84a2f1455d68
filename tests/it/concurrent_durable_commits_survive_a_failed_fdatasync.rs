//! Durable commits from several threads at once, where a leader hands the lead on before its
//! fdatasync and the next round writes while it runs: every record whose flush returned Ok is
//! in a crash image taken afterwards (which keeps only what an fdatasync covered), with and
//! without an fdatasync that fails part-way, in every mode; and once a flush has failed, no
//! flush started after it returns Ok.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, check_payload, config_4k_pages, payload_for};
use walcrypt::{KeyRing, Mode, SyncMode, Wal};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 120;

/// What the committers saw: the ids whose flush returned Ok, and whether a flush returned Ok
/// after another thread's flush had already failed.
struct Run {
    acked: BTreeSet<u64>,
    ok_after_failure: Vec<u64>,
}

/// Commits from `THREADS` threads, then, with the log still open (a power cut now), writes
/// the crash image to `image`.
fn commit_concurrently(
    dir: &Path,
    mode: Mode,
    keys: &KeyRing,
    storage: &FaultStorage,
    image: (&Path, u64),
) -> Run {
    let config = config_4k_pages(mode, keys, SyncMode::Durable).storage(storage.arc());
    let wal = Wal::open(dir, config).expect("open");
    let acked = Mutex::new(BTreeSet::new());
    let ok_after_failure = Mutex::new(Vec::new());
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (wal, acked, ok_after_failure, failed) = (&wal, &acked, &ok_after_failure, &failed);
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let id = 1 + t * PER_THREAD + i;
                    let (kind, payload) = payload_for(id);
                    let Ok(lsn) = wal.append(kind, &payload) else {
                        return;
                    };
                    // Read before the flush starts: a failure seen here happened before it.
                    let failed_before = failed.load(Ordering::SeqCst);
                    match wal.flush(lsn) {
                        Ok(()) => {
                            acked.lock().unwrap().insert(id);
                            if failed_before {
                                ok_after_failure.lock().unwrap().push(id);
                            }
                        }
                        Err(_) => {
                            failed.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            });
        }
    });
    // Before the `Wal` goes: dropping it would write and fdatasync what no flush did.
    storage.crash_image(dir, image.0, &mut Rng::new(image.1), Tear::Prefix);
    drop(wal);
    Run {
        acked: acked.into_inner().unwrap(),
        ok_after_failure: ok_after_failure.into_inner().unwrap(),
    }
}

/// The ids of the records in `dir`, in log order.
fn ids_in(dir: &Path, keys: &KeyRing, what: &str) -> Vec<u64> {
    support::try_read_records(dir, keys)
        .unwrap_or_else(|e| panic!("{what}: reading the crash image failed: {e}"))
        .iter()
        .map(|r| check_payload(r.kind, &r.payload).unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect()
}

fn scenario(name: &str, plan: impl Fn(&FaultStorage), seed: u64, faulty: bool) {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wal");
        let storage = FaultStorage::new();
        plan(&storage);
        let image = tmp.path().join("image");
        let run = commit_concurrently(&dir, mode, &keys, &storage, (&image, seed));
        let what = format!("{name}, {mode}");
        assert_eq!(
            storage.injected() > 0,
            faulty,
            "{what}: the planned fault fired {} times",
            storage.injected()
        );
        assert!(
            run.ok_after_failure.is_empty(),
            "{what}: flushes started after a failed one returned Ok: {:?}",
            run.ok_after_failure
        );
        let found: BTreeSet<u64> = ids_in(&image, &keys, &what).into_iter().collect();
        let lost: Vec<u64> = run.acked.difference(&found).copied().collect();
        assert!(
            lost.is_empty(),
            "{what}: {} acknowledged records missing from the crash image (of {}): {:?}",
            lost.len(),
            run.acked.len(),
            &lost[..lost.len().min(10)]
        );
    }
}

#[test]
fn every_acknowledged_durable_commit_survives_a_power_cut() {
    for seed in [1, 2, 3] {
        scenario(&format!("no fault, seed {seed}"), |_| {}, seed, false);
    }
}

#[test]
fn a_failed_fdatasync_among_concurrent_commits_loses_no_acknowledged_record() {
    // The first syncs make the first segment; later ones are commits' rounds.
    for nth in [4, 9, 17, 40] {
        scenario(
            &format!("fdatasync #{nth} fails"),
            |s| s.fail_nth(Op::Sync, nth, Effect::Errno(libc::EIO)),
            nth,
            true,
        );
    }
}
