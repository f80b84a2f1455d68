//! With a cache of a few entries, every older entry is read back from the log: ranges that
//! span many segments, cross the cache boundary, follow a truncation deep below the cache and
//! a purge, and the same after a reopen (which refills the cache from the log).

use crate::support;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{LogState, RaftLogReader, Vote};
use support::{assert_entry, config, entry, log_id, segment_files};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::kv::TypeConfig;
use walcrypt_openraft::{StoreOptions, WalLogStore};

type Store = WalLogStore<TypeConfig>;

const CACHE: usize = 8;

/// Reads `lo..hi` and checks every entry against `term_of`.
async fn check_range(store: &mut Store, lo: u64, hi: u64, term_of: impl Fn(u64) -> u64) {
    let got = store.try_get_log_entries(lo..hi).await.unwrap();
    assert_eq!(got.len() as u64, hi - lo, "entries in {lo}..{hi}");
    for (i, e) in (lo..hi).zip(&got) {
        assert_entry(e, term_of(i), i);
    }
}

async fn scenario(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let options = StoreOptions::default().cache_entries(CACHE);
    let mut store = Store::open_with(dir.path(), config(mode, &keys), options.clone()).unwrap();

    store.save_vote(&Vote::new(1, 1)).await.unwrap();
    // 400 entries of up to 3 KB in batches of 25: about ten 64 KiB segments, with a
    // committed record between batches.
    for batch in 0..16 {
        let from = batch * 25;
        store
            .blocking_append((from..from + 25).map(|i| entry(1, i)))
            .await
            .unwrap();
        store
            .save_committed(Some(log_id(1, from + 20)))
            .await
            .unwrap();
    }
    assert!(segment_files(dir.path()) >= 5, "{mode}: too few segments");
    // Only the durable tail is kept once the next append has run.
    store.blocking_append([entry(1, 400)]).await.unwrap();
    assert!(
        store.cached_entries() <= CACHE,
        "{mode}: {} entries cached",
        store.cached_entries()
    );
    let term1 = |_| 1;
    check_range(&mut store, 0, 401, term1).await; // all of it, across every segment
    check_range(&mut store, 390, 401, term1).await; // across the cache boundary
    check_range(&mut store, 37, 38, term1).await; // one entry deep below
    check_range(&mut store, 38, 120, term1).await; // right after the last read
    check_range(&mut store, 10, 20, term1).await; // behind the last read

    // A conflicting suffix from 150 on, far below the cache: the cache is emptied and the new
    // last entry (149) read back; the old records stay in the log and must be skipped.
    store.truncate(log_id(1, 150)).await.unwrap();
    assert_eq!(
        store.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 149)),
        "{mode}"
    );
    store
        .blocking_append((150..300).map(|i| entry(2, i)))
        .await
        .unwrap();
    store.blocking_append([entry(2, 300)]).await.unwrap();
    let after_truncate = |i| if i < 150 { 1 } else { 2 };
    check_range(&mut store, 100, 301, after_truncate).await;
    assert!(
        store
            .try_get_log_entries(301..500)
            .await
            .unwrap()
            .is_empty(),
        "{mode}: entries past the end"
    );

    // Purge a prefix: reads start at the purge point; below it nothing comes back.
    store.purge(log_id(1, 120)).await.unwrap();
    assert!(
        store.try_get_log_entries(0..121).await.unwrap().is_empty(),
        "{mode}: purged entries came back"
    );
    check_range(&mut store, 121, 301, after_truncate).await;
    let mut partly = store.try_get_log_entries(100..130).await.unwrap();
    assert_eq!(partly.len(), 9, "{mode}: 121..130 of 100..130");
    assert_entry(&partly.remove(0), 1, 121);

    // Reopened: the same entries, the cache refilled with the newest ones.
    drop(store);
    let mut reopened = Store::open_with(dir.path(), config(mode, &keys), options).unwrap();
    assert_eq!(
        reopened.cached_entries(),
        CACHE,
        "{mode}: cache after reopen"
    );
    assert_eq!(
        reopened.get_log_state().await.unwrap(),
        LogState {
            last_purged_log_id: Some(log_id(1, 120)),
            last_log_id: Some(log_id(2, 300)),
        },
        "{mode}"
    );
    check_range(&mut reopened, 121, 301, after_truncate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_below_the_cache_in_every_mode() {
    for mode in Mode::ALL {
        scenario(mode).await;
    }
}

/// A truncation replayed at open that leaves fewer entries in memory than the cache holds:
/// the store reads the newest ones back, so the last log id is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_after_a_deep_truncation_refills_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let options = StoreOptions::default().cache_entries(CACHE);
    let mut store =
        Store::open_with(dir.path(), config(Mode::PerRecord, &keys), options.clone()).unwrap();
    store
        .blocking_append((1..=100).map(|i| entry(1, i)))
        .await
        .unwrap();
    store.truncate(log_id(1, 50)).await.unwrap();
    store.blocking_append([]).await.unwrap();
    drop(store);

    let mut reopened =
        Store::open_with(dir.path(), config(Mode::PerRecord, &keys), options).unwrap();
    assert_eq!(reopened.cached_entries(), CACHE);
    assert_eq!(
        reopened.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 49))
    );
    check_range(&mut reopened, 1, 50, |_| 1).await;
}

/// In pagelevel mode the first record after a reopen starts a fresh page; an entry there,
/// once out of the cache, is read back like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_entry_after_a_reopen_reads_back_in_every_mode() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let options = StoreOptions::default().cache_entries(2);
        let open = || Store::open_with(dir.path(), config(mode, &keys), options.clone()).unwrap();
        let mut store = open();
        store
            .blocking_append((1..=5).map(|i| entry(1, i)))
            .await
            .unwrap();
        drop(store);
        let mut store = open();
        for i in 6..=12 {
            store.blocking_append([entry(1, i)]).await.unwrap();
        }
        check_range(&mut store, 6, 13, |_| 1).await;
        check_range(&mut store, 1, 13, |_| 1).await;
    }
}
