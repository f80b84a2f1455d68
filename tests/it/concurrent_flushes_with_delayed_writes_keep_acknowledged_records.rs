//! Many threads append and flush at once while every write is delayed by a random while (so
//! write-outs reserved in one order land in another). Crash images taken in the middle of the
//! run, with every change to the files stopped, and one at the end must hold every record
//! whose flush had returned Ok by then, in every mode: for `Buffered` an image of the files
//! as they are (a process crash), for `Durable` a power failure that keeps only what was
//! fdatasync'ed and drops or tears everything after it. A flush that returned before a write
//! below its record had landed (or an fdatasync that ran before it) loses a record here.
//!
//! WALCRYPT_DELAYED_WRITES_SEED sets the seed.

use crate::support;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Mutex;

use support::delay::DelayStorage;
use support::faults::{FaultStorage, Tear};
use support::{Rng, check_payload, config_4k_pages, copy_dir, payload_for, seed_from_env};
use walcrypt::{KeyRing, Mode, SyncMode, Wal};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 120;
const IMAGES: usize = 3;

/// Opens an image as a writer would after a crash, then reads every record id in it.
fn ids_in(image: &Path, mode: Mode, keys: &KeyRing, what: &str) -> HashSet<u64> {
    let wal = Wal::open(image, config_4k_pages(mode, keys, SyncMode::Durable))
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    wal.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
    support::try_read_records(image, keys)
        .unwrap_or_else(|e| panic!("{what}: read: {e}"))
        .iter()
        .map(|r| check_payload(r.kind, &r.payload).unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect()
}

fn check_image(image: &Path, acked: &[u64], mode: Mode, keys: &KeyRing, what: &str) {
    let found = ids_in(image, mode, keys, what);
    let lost: Vec<u64> = acked
        .iter()
        .filter(|id| !found.contains(id))
        .copied()
        .collect();
    assert!(
        lost.is_empty(),
        "{what}: {} of {} acknowledged records missing, first {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
}

#[test]
fn concurrent_flushes_with_delayed_writes_keep_acknowledged_records() {
    let seed = seed_from_env("WALCRYPT_DELAYED_WRITES_SEED");
    let mut rng = Rng::new(seed);
    for mode in [Mode::Plaintext, Mode::PerRecord, Mode::PageLevel] {
        for sync in [SyncMode::Buffered, SyncMode::Durable] {
            let what = format!("{mode} {sync:?} seed {seed}");
            let dir = tempfile::tempdir().unwrap();
            let images = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let faults = FaultStorage::new();
            let delayed = DelayStorage::new(faults.arc(), rng.next_u64());
            let config = config_4k_pages(mode, &keys, sync).storage(delayed.arc());
            let wal = Wal::open(dir.path(), config).unwrap();
            let acked = Mutex::new(Vec::new());

            // A crash image as of now: the files with no change in progress, and the records
            // acknowledged before it.
            let take_image = |n: usize, rng: &mut Rng| {
                let out = images.path().join(format!("image-{n}"));
                let acked_then = delayed.frozen(|| {
                    let acked_then = acked.lock().unwrap().clone();
                    match sync {
                        SyncMode::Buffered => copy_dir(dir.path(), &out),
                        _ => {
                            faults.crash_image(dir.path(), &out, rng, Tear::AnySectors);
                        }
                    }
                    acked_then
                });
                (out, acked_then)
            };

            let mut taken = Vec::new();
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (wal, acked) = (&wal, &acked);
                    s.spawn(move || {
                        for i in 0..PER_THREAD {
                            let id = 1 + t * PER_THREAD + i;
                            let (kind, payload) = payload_for(id);
                            let lsn = wal.append(kind, &payload).unwrap();
                            wal.flush(lsn).unwrap();
                            acked.lock().unwrap().push(id);
                        }
                    });
                }
                for n in 0..IMAGES {
                    // Wait for the writers to get on before each image.
                    let want = (n + 1) * (THREADS * PER_THREAD) as usize / (IMAGES + 1);
                    while acked.lock().unwrap().len() < want {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    taken.push(take_image(n, &mut rng));
                }
            });
            assert_eq!(acked.lock().unwrap().len() as u64, THREADS * PER_THREAD);
            for (n, (image, acked_then)) in taken.iter().enumerate() {
                assert!(!acked_then.is_empty(), "{what}: image {n} taken too early");
                check_image(
                    image,
                    acked_then,
                    mode,
                    &keys,
                    &format!("{what}, image {n}"),
                );
            }
            let (last, acked_now) = take_image(IMAGES, &mut rng);
            check_image(
                &last,
                &acked_now,
                mode,
                &keys,
                &format!("{what}, at the end"),
            );
            wal.close().unwrap();
        }
    }
}
