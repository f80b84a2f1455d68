//! Six appenders (single records and batches, some flushed) and a flusher of the end run while
//! the data key is rotated 25 times, with a buffer of four 512-byte pages, so appenders make
//! room often and a rotation's segment switch may make room too while it holds the insert
//! position closed. In perrecord, pagelevel and perrecord-gcm, Buffered and Durable: every
//! call succeeds (debug builds check the positions' order at every write-lock release), no LSN
//! is handed out twice, and after a close every acknowledged record reads back with its
//! payload.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use walcrypt::{Config, Kek, KeyProvider, KeyStore, Lsn, Mode, Reader, SyncMode, Wal};

fn payload(t: u8, n: u32) -> Vec<u8> {
    let fill = (n as usize * 37 + t as usize * 11) % 300;
    format!("t{t} n{n} {}", "x".repeat(fill)).into_bytes()
}

/// One appender until `stop` (and at least 50 appends): every fifth call a batch of two, every
/// seventh append flushed. Returns what it appended, by LSN.
fn append(wal: &Wal, t: u8, stop: &AtomicBool) -> Vec<(Lsn, Vec<u8>)> {
    let mut mine = Vec::new();
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) || n < 50 {
        let p = payload(t, n);
        let lsn = if n.is_multiple_of(5) {
            let lsns = wal.append_batch([(t, &p[..]), (t, &p[..])]).unwrap();
            mine.push((lsns[1], p.clone()));
            lsns[0]
        } else {
            wal.append(t, &p).unwrap()
        };
        if n.is_multiple_of(7) {
            wal.flush(lsn).unwrap();
        }
        mine.push((lsn, p));
        n += 1;
    }
    mine
}

#[test]
fn appends_flushes_and_rotations_at_once_keep_every_record() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        for sync in [SyncMode::Buffered, SyncMode::Durable] {
            let dir = tempfile::tempdir().unwrap();
            let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("k").unwrap());
            let store = Arc::new(KeyStore::create(dir.path().join("keys"), kek.clone()).unwrap());
            let config = Config::new(mode)
                .sync(sync)
                .page_size(512)
                .segment_size(8 * 1024)
                .buffer_size(2 * 1024)
                .key_store(store);
            let wal = Wal::open(dir.path(), config).unwrap();
            let stop = AtomicBool::new(false);
            let mut all: HashMap<Lsn, Vec<u8>> = HashMap::new();
            std::thread::scope(|s| {
                let (wal, stop) = (&wal, &stop);
                let appenders: Vec<_> = (0..6u8)
                    .map(|t| s.spawn(move || append(wal, t, stop)))
                    .collect();
                let flusher = s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        wal.flush(wal.end_lsn()).unwrap();
                    }
                });
                for _ in 0..25 {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    wal.rotate_data_key().unwrap();
                }
                stop.store(true, Ordering::Relaxed);
                for appender in appenders {
                    for (lsn, p) in appender.join().unwrap() {
                        assert!(all.insert(lsn, p).is_none(), "{mode} {sync:?}: {lsn} twice");
                    }
                }
                flusher.join().unwrap();
            });
            wal.close().unwrap();
            let keys = KeyStore::open(dir.path().join("keys"), kek).unwrap();
            let reader = Reader::open(dir.path(), Some(keys.ring())).unwrap();
            let read: Vec<_> = reader
                .records_from(Lsn::default())
                .map(|r| r.unwrap())
                .collect();
            assert_eq!(read.len(), all.len(), "{mode} {sync:?}");
            for r in read {
                assert_eq!(
                    all.get(&r.lsn),
                    Some(&r.payload),
                    "{mode} {sync:?} at {}",
                    r.lsn
                );
            }
        }
    }
}
