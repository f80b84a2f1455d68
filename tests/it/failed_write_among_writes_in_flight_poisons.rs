//! One write fails (EIO) while other threads' write-outs are in flight, each delayed by a
//! random while. The log is poisoned: every flush that starts after any thread saw the
//! failure returns an error, as does every later append, flush and close; and the files as
//! they stand (a process crash) reopen to a prefix holding every record whose flush returned
//! Ok, in every mode and sync mode.
//!
//! WALCRYPT_FAILED_WRITE_SEED sets the seed.

use crate::support;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use support::delay::DelayStorage;
use support::faults::{Effect, FaultStorage, Op};
use support::{Rng, check_payload, config_4k_pages, copy_dir, payload_for, seed_from_env};
use walcrypt::{Error, KeyRing, Mode, SyncMode, Wal};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 200;

#[test]
fn failed_write_among_writes_in_flight_poisons() {
    let seed = seed_from_env("WALCRYPT_FAILED_WRITE_SEED");
    let mut rng = Rng::new(seed);
    for mode in [Mode::Plaintext, Mode::PerRecord, Mode::PageLevel] {
        for sync in [SyncMode::Buffered, SyncMode::Durable] {
            let what = format!("{mode} {sync:?} seed {seed}");
            let dir = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let faults = FaultStorage::new();
            let delayed = DelayStorage::new(faults.arc(), rng.next_u64());
            let config = config_4k_pages(mode, &keys, sync).storage(delayed.arc());
            let wal = Wal::open(dir.path(), config).unwrap();
            // Counted from here: the writes of the open are behind.
            let nth = faults.count(Op::Write) + rng.range(20, 120);
            faults.fail_nth(Op::Write, nth, Effect::Errno(libc::EIO));
            let acked = Mutex::new(Vec::new());
            let failed = AtomicBool::new(false);

            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (wal, acked, failed, what) = (&wal, &acked, &failed, &what);
                    s.spawn(move || {
                        for i in 0..PER_THREAD {
                            let id = 1 + t * PER_THREAD + i;
                            let (kind, payload) = payload_for(id);
                            let flushed = wal.append(kind, &payload).and_then(|lsn| {
                                // Read between the append and the flush: a flush started
                                // after the failure was seen must fail.
                                let seen = failed.load(Ordering::SeqCst);
                                let flushed = wal.flush(lsn);
                                assert!(
                                    !(seen && flushed.is_ok()),
                                    "{what}: a flush after the failure was Ok"
                                );
                                flushed
                            });
                            match flushed {
                                Ok(()) => {
                                    acked.lock().unwrap().push(id);
                                }
                                Err(Error::Io { .. } | Error::Poisoned(_)) => {
                                    failed.store(true, Ordering::SeqCst);
                                }
                                Err(e) => panic!("{what}: unexpected error {e}"),
                            }
                        }
                    });
                }
            });
            assert!(
                failed.load(Ordering::SeqCst),
                "{what}: the write never failed"
            );
            assert_eq!(faults.injected(), 1, "{what}: one injected failure");
            assert!(
                matches!(wal.append(1, b"after"), Err(Error::Poisoned(_))),
                "{what}: append after the failure"
            );
            assert!(
                wal.flush(wal.end_lsn()).is_err(),
                "{what}: flush after the failure"
            );

            // The files as they stand, as a killed process would leave them.
            let image = tempfile::tempdir().unwrap();
            delayed.frozen(|| copy_dir(dir.path(), image.path()));
            assert!(wal.close().is_err(), "{what}: close after the failure");

            let reopened = Wal::open(image.path(), config_4k_pages(mode, &keys, sync)).unwrap();
            reopened.close().unwrap();
            let ids: Vec<u64> = support::try_read_records(image.path(), &keys)
                .unwrap_or_else(|e| panic!("{what}: read: {e}"))
                .iter()
                .map(|r| {
                    check_payload(r.kind, &r.payload).unwrap_or_else(|e| panic!("{what}: {e}"))
                })
                .collect();
            let acked = acked.into_inner().unwrap();
            assert!(
                !acked.is_empty(),
                "{what}: nothing was acknowledged before the failure"
            );
            let missing: Vec<&u64> = acked.iter().filter(|id| !ids.contains(id)).collect();
            assert!(
                missing.is_empty(),
                "{what}: acknowledged records lost: {missing:?}"
            );
        }
    }
}
