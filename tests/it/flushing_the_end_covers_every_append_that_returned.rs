//! With appends sealing and copying outside the insert lock, `end_lsn()` counts records other
//! threads are still copying. Four threads append records of every size (some larger than a
//! page, some larger than the whole buffer, some as batches) while a fifth, again and again,
//! notes which appends have returned, flushes `end_lsn()`, and reads the files with a fresh
//! `Reader`: every record whose append had returned before `end_lsn()` was read must be there,
//! byte for byte, in every mode. A write-out that passed an insertion still in progress would
//! leave a hole (zeros, or a record cut short) that a flush vouches for.

use crate::support;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use support::Rng;
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 150;

fn record(id: u64) -> Vec<u8> {
    let mut rng = Rng::new(id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 7);
    let len = match rng.below(10) {
        0..=5 => rng.range(1, 300),
        6..=8 => rng.range(300, 3000),
        _ => rng.range(9000, 12_000),
    } as usize;
    let mut payload = id.to_le_bytes().to_vec();
    payload.extend(support::payload(id, len));
    payload
}

#[test]
fn every_append_that_returned_is_in_the_files_after_a_flush_of_the_end() {
    for mode in Mode::ALL {
        for sync in [SyncMode::Buffered, SyncMode::Durable] {
            let dir = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let config = Config::new(mode)
                .keys(keys.clone())
                .sync(sync)
                .page_size(1024)
                .segment_size(64 * 1024)
                .buffer_size(8 * 1024);
            let wal = Wal::open(dir.path(), config).unwrap();
            let returned: Mutex<HashMap<u64, Vec<u8>>> = Mutex::new(HashMap::new());
            let done = AtomicBool::new(false);
            let mut checks = 0;
            std::thread::scope(|s| {
                let appenders: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let (wal, returned) = (&wal, &returned);
                        s.spawn(move || {
                            let mut i = 0;
                            while i < PER_THREAD {
                                let id = t * PER_THREAD + i;
                                if i % 7 == 3 && i + 1 < PER_THREAD {
                                    let (a, b) = (record(id), record(id + 1));
                                    let lsns =
                                        wal.append_batch([(1, &a[..]), (1, &b[..])]).unwrap();
                                    let mut returned = returned.lock().unwrap();
                                    returned.insert(u64::from(lsns[0]), a);
                                    returned.insert(u64::from(lsns[1]), b);
                                    i += 2;
                                } else {
                                    let payload = record(id);
                                    let lsn = wal.append(1, &payload).unwrap();
                                    returned.lock().unwrap().insert(u64::from(lsn), payload);
                                    i += 1;
                                }
                            }
                        })
                    })
                    .collect();
                let checker = s.spawn(|| {
                    let mut checks = 0;
                    while !done.load(Ordering::Acquire) || checks < 3 {
                        let before: HashMap<u64, Vec<u8>> = returned.lock().unwrap().clone();
                        let end = wal.end_lsn();
                        wal.flush(end)
                            .unwrap_or_else(|e| panic!("{mode} {sync:?}: flush of {end}: {e}"));
                        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
                        let mut seen: HashMap<u64, Vec<u8>> = HashMap::new();
                        for r in reader.records_from(Lsn::default()) {
                            let r = r.unwrap_or_else(|e| panic!("{mode} {sync:?}: {e}"));
                            if u64::from(r.lsn) >= u64::from(end) {
                                break;
                            }
                            seen.insert(u64::from(r.lsn), r.payload);
                        }
                        for (lsn, payload) in &before {
                            assert_eq!(
                                seen.get(lsn),
                                Some(payload),
                                "{mode} {sync:?}: the record at {} returned before end_lsn() \
                                 was {end}, and the flush of {end} returned",
                                Lsn(*lsn)
                            );
                        }
                        checks += 1;
                    }
                    checks
                });
                for appender in appenders {
                    appender.join().unwrap();
                }
                done.store(true, Ordering::Release);
                checks = checker.join().unwrap();
            });
            assert!(checks >= 3, "{mode} {sync:?}: only {checks} checks");
            let total = returned.lock().unwrap().len() as u64;
            assert_eq!(total, THREADS * PER_THREAD, "{mode} {sync:?}");
            wal.close().unwrap();
            let all = support::read_all(dir.path(), Some(keys));
            assert_eq!(all.len() as u64, total, "{mode} {sync:?}: after close");
        }
    }
}
