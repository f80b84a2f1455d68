//! `Wal::append_batch` places a batch's records one after the other, with no other thread's
//! record between them, returns their LSNs, and one flush of the last LSN makes them durable.

use crate::support;

use std::sync::Arc;

use support::{payload, read_all, small_config};
use walcrypt::{Error, KeyRing, Lsn, Mode, Wal};

const THREADS: u64 = 4;
const BATCHES: u64 = 40;
const PER_BATCH: u64 = 3;

fn batch_payload(thread: u64, batch: u64, i: u64) -> Vec<u8> {
    let mut p = payload(
        thread * 10_000 + batch * 10 + i,
        20 + (i as usize * 97) % 300,
    );
    p.splice(0..0, [thread as u8, batch as u8, i as u8]);
    p
}

#[test]
fn batches_from_many_threads_stay_together_and_survive_reopen() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Arc::new(Wal::open(dir.path(), small_config(mode, &keys)).unwrap());
        let handed_out: Vec<Vec<(Lsn, Vec<u8>)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let wal = &wal;
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        for b in 0..BATCHES {
                            let payloads: Vec<_> =
                                (0..PER_BATCH).map(|i| batch_payload(t, b, i)).collect();
                            let lsns = wal
                                .append_batch(payloads.iter().map(|p| (t as u8 + 1, &p[..])))
                                .unwrap();
                            assert_eq!(lsns.len(), PER_BATCH as usize);
                            assert!(lsns.windows(2).all(|w| w[0] < w[1]));
                            wal.flush(*lsns.last().unwrap()).unwrap();
                            assert!(wal.flushed_lsn() > *lsns.last().unwrap());
                            mine.extend(lsns.into_iter().zip(payloads));
                        }
                        mine
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        // An empty batch appends nothing.
        let end = wal.end_lsn();
        assert_eq!(wal.append_batch(std::iter::empty()).unwrap(), vec![]);
        assert_eq!(wal.end_lsn(), end);
        assert_eq!(wal.stats().appends, THREADS * BATCHES * PER_BATCH, "{mode}");
        Arc::into_inner(wal).unwrap().close().unwrap();

        let log = read_all(dir.path(), Some(keys.clone()));
        assert_eq!(log.len() as u64, THREADS * BATCHES * PER_BATCH, "{mode}");
        // Every batch is a run of consecutive records in the log, in its order.
        for run in log.chunks(PER_BATCH as usize) {
            let (t, b) = (run[0].2[0], run[0].2[1]);
            for (i, (_, kind, p)) in run.iter().enumerate() {
                assert_eq!(*kind, t + 1, "{mode}");
                assert_eq!(
                    (p[0], p[1], p[2] as usize),
                    (t, b, i),
                    "{mode}: batch torn apart"
                );
            }
        }
        // The LSNs handed out are where the records are.
        for (lsn, p) in handed_out.iter().flatten() {
            let found = log.iter().find(|(l, _, _)| l == lsn).unwrap();
            assert_eq!(&found.2, p, "{mode}");
        }
    }
}

#[test]
fn a_batch_with_an_oversized_record_appends_none_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PerRecord, &keys)).unwrap();
    let first = wal.append(1, b"before").unwrap();
    let end = wal.end_lsn();
    // Zeroed memory from the allocator: never touched, so it costs no real memory.
    let huge = vec![0u8; walcrypt::inspect::MAX_PAYLOAD + 1];
    let batch = [(1, &b"small"[..]), (1, &huge[..]), (1, b"after")];
    assert!(matches!(
        wal.append_batch(batch),
        Err(Error::RecordTooLarge { .. })
    ));
    assert_eq!(wal.end_lsn(), end);
    wal.flush(first).unwrap();
    wal.close().unwrap();
    let log = read_all(dir.path(), Some(keys));
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].2, b"before");
}

#[test]
fn a_batch_of_one_record_returns_its_lsn() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        wal.append(1, b"before").unwrap();
        let lsns = wal.append_batch([(2, &b"alone"[..])]).unwrap();
        assert_eq!(lsns.len(), 1, "{mode}");
        wal.flush(lsns[0]).unwrap();
        wal.close().unwrap();
        let log = read_all(dir.path(), Some(keys));
        assert_eq!(
            log.last().map(|r| (r.0, r.2.clone())),
            Some((lsns[0], b"alone".to_vec()))
        );
    }
}
