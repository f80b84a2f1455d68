//! Reads of old entries (served from the log, the cache holding only a few) run while other
//! tasks append and flush: every read returns exactly the entries asked for, whole, and the
//! appends are not disturbed.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::RaftLogReader;
use openraft::storage::RaftLogStorageExt;
use support::{assert_entry, config, entry};
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

    let mut writer = store.clone();
    let written = durable.clone();
    let appender = tokio::spawn(async move {
        let mut next = 0;
        while next < ENTRIES {
            let n = 1 + next % 7;
            let to = (next + n).min(ENTRIES);
            writer
                .blocking_append((next..to).map(|i| entry(1, i)))
                .await
                .unwrap();
            next = to;
            written.store(next, Ordering::Release);
        }
    });

    let mut readers = Vec::new();
    for r in 0..2u64 {
        let mut reader = store.clone();
        let durable = durable.clone();
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
                let lo = (seed >> 33) % count;
                let hi = (lo + 1 + (seed >> 20) % 60).min(count);
                let got = reader.try_get_log_entries(lo..hi).await.unwrap();
                assert_eq!(got.len() as u64, hi - lo, "{mode}: entries in {lo}..{hi}");
                for (i, e) in (lo..hi).zip(&got) {
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
    let all = store.try_get_log_entries(0..ENTRIES).await.unwrap();
    assert_eq!(all.len() as u64, ENTRIES, "{mode}");
    assert!(store.cached_entries() < 16, "{mode}: the cache grew");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_below_the_cache_while_appending_in_every_mode() {
    for mode in Mode::ALL {
        scenario(mode).await;
    }
}
