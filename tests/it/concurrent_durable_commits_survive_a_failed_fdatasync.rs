//! Durable commits from several threads at once, where a leader hands the lead on before its
//! fdatasync and the next round writes while it runs: every record whose flush returned Ok is
//! in a crash image (which keeps only what an fdatasync covered) taken after it, with and
//! without an fdatasync that fails part-way, in every mode. Images are taken while the
//! committers run (rounds then stand at every phase: writing, waiting for the turn,
//! fdatasyncing) and once at the end; and once a flush has failed, no flush started after it
//! returns Ok.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use support::delay::DelayStorage;
use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, check_payload, config_4k_pages, payload_for};
use walcrypt::{KeyRing, Mode, SyncMode, Wal};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 120;

/// Crash images taken while the committers run, at most this many, about a millisecond
/// apart.
const IMAGES_WHILE_RUNNING: usize = 12;

/// What the committers saw: every crash image with the ids whose flush had returned Ok before
/// it was taken, and the flushes that returned Ok after another thread's flush had failed.
struct Run {
    images: Vec<(PathBuf, BTreeSet<u64>)>,
    ok_after_failure: Vec<u64>,
}

/// Commits from `THREADS` threads while another thread takes crash images of the live files
/// into `images` (a power cut at that moment), then one more with the log still open.
fn commit_concurrently(
    dir: &Path,
    mode: Mode,
    keys: &KeyRing,
    storage: &FaultStorage,
    images: (&Path, u64),
) -> Run {
    // Writes and fdatasyncs take a random while (up to 300 µs), so rounds overlap and a crash
    // image may fall inside any of them; images are taken with the files frozen.
    let delayed = DelayStorage::new(storage.arc(), images.1).slow_syncs();
    let config = config_4k_pages(mode, keys, SyncMode::Durable).storage(delayed.arc());
    let wal = Wal::open(dir, config).expect("open");
    let acked = Mutex::new(BTreeSet::new());
    let ok_after_failure = Mutex::new(Vec::new());
    let failed = AtomicBool::new(false);
    let running = AtomicUsize::new(THREADS as usize);
    let taken = Mutex::new(Vec::new());
    let image = |k: usize| {
        // The acknowledgements first: each of these flushes returned before the image begins.
        let before = acked.lock().unwrap().clone();
        let path = images.0.join(format!("image-{k}"));
        delayed.frozen(|| {
            storage.crash_image(dir, &path, &mut Rng::new(images.1 + k as u64), Tear::Prefix)
        });
        taken.lock().unwrap().push((path, before));
    };
    std::thread::scope(|s| {
        let (running, image) = (&running, &image);
        s.spawn(move || {
            for k in 0..IMAGES_WHILE_RUNNING {
                std::thread::sleep(std::time::Duration::from_millis(1));
                if running.load(Ordering::SeqCst) == 0 {
                    return;
                }
                image(k);
            }
        });
        for t in 0..THREADS {
            let (wal, acked, ok_after_failure, failed) = (&wal, &acked, &ok_after_failure, &failed);
            s.spawn(move || {
                commit_ids(t, wal, acked, ok_after_failure, failed);
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    // Before the `Wal` goes: dropping it would write and fdatasync what no flush did.
    image(IMAGES_WHILE_RUNNING);
    drop(wal);
    Run {
        images: taken.into_inner().unwrap(),
        ok_after_failure: ok_after_failure.into_inner().unwrap(),
    }
}

/// Thread `t`'s commits: append a record, flush it, note its id if the flush returned Ok.
fn commit_ids(
    t: u64,
    wal: &Wal,
    acked: &Mutex<BTreeSet<u64>>,
    ok_after_failure: &Mutex<Vec<u64>>,
    failed: &AtomicBool,
) {
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
        let run = commit_concurrently(&dir, mode, &keys, &storage, (tmp.path(), seed));
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
        // A failure stops the committers early, perhaps before the first image.
        assert!(
            faulty || run.images.len() > 1,
            "{what}: no image taken while the committers ran"
        );
        for (k, (image, acked)) in run.images.iter().enumerate() {
            let what = format!("{what}, image {k}");
            let found: BTreeSet<u64> = ids_in(image, &keys, &what).into_iter().collect();
            let lost: Vec<u64> = acked.difference(&found).copied().collect();
            assert!(
                lost.is_empty(),
                "{what}: {} acknowledged records missing from the crash image (of {}): {:?}",
                lost.len(),
                acked.len(),
                &lost[..lost.len().min(10)]
            );
        }
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
