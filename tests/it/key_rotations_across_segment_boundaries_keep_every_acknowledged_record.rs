//! Data-key rotations while threads append and flush, with segments small enough (8 pages) that
//! the log crosses a segment boundary every few records, so rotations race appenders carrying
//! the log into the segment a rotation expects to switch to, and the preparer making the
//! next one. Segments are prepared ahead (the default), so every rotation makes its replacement
//! segment before the switch and puts it in place after it.
//!
//! Every acknowledged record (its `flush` returned Ok) reads back after a reopen with the
//! store's keys, byte for byte, under a key that was active while it was appended (perrecord:
//! the record's key; pagelevel: the key of the page it starts in); every segment lists exactly
//! the one key its records or pages use; no temporary segment file is left.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use support::{env_usize, payload};
use walcrypt::{Config, Kek, KeyProvider, KeyStore, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 1024;
const ROTATIONS: u32 = 16;

fn config(mode: Mode, sync: SyncMode, store: &Arc<KeyStore>) -> Config {
    Config::new(mode)
        .sync(sync)
        .page_size(PAGE)
        .segment_size(8 * PAGE)
        .buffer_size(4 * PAGE as usize)
        .key_store(store.clone())
}

/// One acknowledged record: where it is, what it holds, and the range of key ids that were
/// active while it was appended.
struct Acked {
    lsn: Lsn,
    payload: Vec<u8>,
    keys: (u32, u32),
}

fn append_while_rotating(wal: &Arc<Wal>, threads: u64) -> Vec<Acked> {
    // `begun`: the id of the newest rotation started; `done`: of the newest one finished.
    let begun = Arc::new(AtomicU32::new(1));
    let done = Arc::new(AtomicU32::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let appenders: Vec<_> = (0..threads)
        .map(|t| {
            let (wal, begun, done, stop) = (wal.clone(), begun.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) || n < 20 {
                    let p = payload(t << 32 | n, 40 + (n * 37 % 400) as usize);
                    let lo = done.load(Ordering::Acquire);
                    let lsn = wal.append(t as u8, &p).unwrap();
                    let hi = begun.load(Ordering::Acquire);
                    // Most records are flushed one by one; some wait for a later flush.
                    if n % 3 != 1 {
                        wal.flush(lsn).unwrap();
                    }
                    acked.push(Acked {
                        lsn,
                        payload: p,
                        keys: (lo, hi),
                    });
                    n += 1;
                }
                let last = acked.last().map(|a| a.lsn).unwrap();
                wal.flush(last).unwrap();
                acked
            })
        })
        .collect();
    let mut from = wal.end_lsn();
    for expected in 2..2 + ROTATIONS {
        // Rotate after 4 to 16 more pages of log: at every place in a segment, sometimes
        // after the appenders carried the log across a boundary on their own.
        let ahead = (4 + u64::from(expected) * 5 % 13) * PAGE;
        while u64::from(wal.end_lsn()) < u64::from(from) + ahead {
            std::thread::yield_now();
        }
        from = wal.end_lsn();
        begun.store(expected, Ordering::Release);
        assert_eq!(wal.rotate_data_key().unwrap(), expected);
        done.store(expected, Ordering::Release);
    }
    stop.store(true, Ordering::Release);
    appenders
        .into_iter()
        .flat_map(|a| a.join().unwrap())
        .collect()
}

/// The key each record (perrecord) or the page each record starts in (pagelevel) uses, by
/// record LSN; checks on the way that every segment lists one key and that everything in it
/// uses that key.
fn keys_used(reader: &Reader, mode: Mode) -> HashMap<Lsn, u32> {
    let seg = reader.geometry().segment_size;
    let listed: HashMap<u64, Vec<u32>> = reader
        .segments()
        .iter()
        .map(|s| {
            let ids: Vec<u32> = s.header.key_checks.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids.len(), 1, "{mode}: {:?}", s.header);
            (u64::from(s.header.start), ids)
        })
        .collect();
    let mut page_keys = HashMap::new();
    if mode == Mode::PageLevel {
        for p in reader.page_headers().unwrap() {
            if let Some(h) = p.header
                && h.key_id != 0
            {
                let page = u64::from(p.page_lsn);
                assert!(
                    listed[&(page - page % seg)].contains(&h.key_id),
                    "{mode}: page {} uses key {}, its segment lists {:?}",
                    p.page_lsn,
                    h.key_id,
                    listed[&(page - page % seg)]
                );
                page_keys.insert(page, h.key_id);
            }
        }
    }
    let mut used = HashMap::new();
    for r in reader.raw_records_from(Lsn::default()) {
        let r = r.unwrap();
        let at = u64::from(r.lsn);
        let key = match mode {
            Mode::PageLevel => page_keys.get(&(at - at % PAGE)).copied(),
            _ => r.header.encryption.map(|(id, _)| id),
        };
        if let Some(key) = key {
            assert!(
                listed[&(at - at % seg)].contains(&key),
                "{mode}: record {} uses key {key}, its segment lists {:?}",
                r.lsn,
                listed[&(at - at % seg)]
            );
            used.insert(r.lsn, key);
        }
    }
    used
}

#[test]
fn every_acknowledged_record_reads_back_under_its_key() {
    let loops = env_usize("WALCRYPT_ROTATION_LOOPS", 1);
    for _ in 0..loops {
        for (mode, sync) in [
            (Mode::PerRecord, SyncMode::Durable),
            (Mode::PageLevel, SyncMode::Durable),
            (Mode::PerRecord, SyncMode::Buffered),
            (Mode::PageLevel, SyncMode::Buffered),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("test kek").unwrap());
            let store = Arc::new(KeyStore::create(dir.path().join("keys"), kek.clone()).unwrap());
            let wal = Arc::new(Wal::open(dir.path(), config(mode, sync, &store)).unwrap());
            let acked = append_while_rotating(&wal, 3);
            // Dropped, not closed: what the records' flushes made durable is what counts.
            drop(Arc::into_inner(wal).unwrap());

            let reopened = Arc::new(KeyStore::open(dir.path().join("keys"), kek).unwrap());
            let mut replayed = HashMap::new();
            let wal = Wal::open_and_replay(
                dir.path(),
                config(mode, sync, &reopened),
                Lsn::default(),
                |r| {
                    replayed.insert(r.lsn, r.payload);
                    Ok(())
                },
            )
            .unwrap_or_else(|e| panic!("{mode} {sync:?}: reopen: {e}"));
            wal.close().unwrap();
            let reader = Reader::open(dir.path(), Some(reopened.ring())).unwrap();
            assert!(
                reader.segments().len() > ROTATIONS as usize + 4,
                "{mode} {sync:?}: {} segments; the appenders crossed boundaries between rotations",
                reader.segments().len()
            );
            let used = keys_used(&reader, mode);
            for a in &acked {
                assert_eq!(
                    replayed.get(&a.lsn),
                    Some(&a.payload),
                    "{mode} {sync:?}: acknowledged record at {} lost or altered",
                    a.lsn
                );
                let key = used[&a.lsn];
                assert!(
                    (a.keys.0..=a.keys.1).contains(&key),
                    "{mode} {sync:?}: record {} uses key {key}, keys {}..={} were active",
                    a.lsn,
                    a.keys.0,
                    a.keys.1
                );
            }
            let tmp: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".tmp"))
                .collect();
            assert!(tmp.is_empty(), "{mode} {sync:?}: {tmp:?}");
        }
    }
}
