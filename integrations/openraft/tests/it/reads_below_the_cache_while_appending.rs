//! Reads of old entries (served from the log, the cache holding only a few) run while another
//! task appends, flushes and purges old segments: every read returns exactly the entries asked
//! for that were not purged (around the read), whole, and the appends are not disturbed.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::RaftLogReader;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use support::{assert_entry, config, entry, log_id};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::kv::TypeConfig;
use walcrypt_openraft::{StoreOptions, WalLogStore};

const ENTRIES: u64 = 600;

async fn scenario(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let options = StoreOptions::default().cache_entries(4);
    let store =
        WalLogStore::<TypeConfig>::open_with(dir.path(), config(mode, &keys), options).unwrap();
    // How many entries (from index 0) have been appended and reported durable.
    let durable = Arc::new(AtomicU64::new(0));
    // The first index kept by the purge about to run (set before it), and by the last purge
    // done (set after it).
    let announced = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));

    let mut writer = store.clone();
    let written = durable.clone();
    let (announce, finish) = (announced.clone(), done.clone());
    let appender = tokio::spawn(async move {
        let mut next = 0;
        while next < ENTRIES {
            let n = 1 + next % 7;
            let to = (next + n).min(ENTRIES);
            writer
                .blocking_append((next..to).map(|i| entry(1, i)))
                .await
                .unwrap();
            let crossed = next / 100 != to / 100;
            next = to;
            written.store(next, Ordering::Release);
            if crossed && next > 200 {
                let upto = next - 200;
                announce.store(upto + 1, Ordering::Release);
                writer.purge(log_id(1, upto)).await.unwrap();
                finish.store(upto + 1, Ordering::Release);
            }
        }
    });

    let mut readers = Vec::new();
    for r in 0..2u64 {
        let mut reader = store.clone();
        let durable = durable.clone();
        let (announced, done) = (announced.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut reads = 0;
            let mut seed = r + 1;
            loop {
                let count = durable.load(Ordering::Acquire);
                if count >= ENTRIES && reads > 0 {
                    break;
                }
                if count == 0 {
                    tokio::task::yield_now().await;
                    continue;
                }
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Mostly above the purge point; sometimes from below it.
                let kept_before = done.load(Ordering::Acquire);
                let floor = if seed % 8 == 0 { 0 } else { kept_before };
                let lo = floor + (seed >> 33) % (count - floor);
                let hi = (lo + 1 + (seed >> 20) % 60).min(count);
                let got = reader.try_get_log_entries(lo..hi).await.unwrap();
                let kept_after = announced.load(Ordering::Acquire);
                // Entries purged around the read may be missing at the front, no others.
                let start = hi - got.len() as u64;
                assert!(
                    got.is_empty() || (start >= lo.max(kept_before) && start <= lo.max(kept_after)),
                    "{mode}: {} entries for {lo}..{hi}, purge point {kept_before}..{kept_after}",
                    got.len()
                );
                assert!(
                    !got.is_empty() || hi <= kept_after,
                    "{mode}: nothing for {lo}..{hi}, purge point {kept_after}"
                );
                for (i, e) in (start..hi).zip(&got) {
                    assert_entry(e, 1, i);
                }
                reads += 1;
                tokio::task::yield_now().await;
            }
            reads
        }));
    }
    appender.await.unwrap();
    for reader in readers {
        assert!(reader.await.unwrap() > 0, "{mode}: no read ran");
    }
    let mut store = store;
    let first = done.load(Ordering::Acquire);
    assert!(first > 0, "{mode}: no purge ran");
    let all = store.try_get_log_entries(0..ENTRIES).await.unwrap();
    assert_eq!(all.len() as u64, ENTRIES - first, "{mode}");
    assert_entry(&all[0], 1, first);
    assert!(store.cached_entries() < 16, "{mode}: the cache grew");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_below_the_cache_while_appending_in_every_mode() {
    for mode in Mode::ALL {
        scenario(mode).await;
    }
}
