//! One thread truncates the log below its one-entry cache (so the truncation reads the new last
//! entry back from the log) and appends the removed entries again, round after round, while
//! another thread keeps reading entries from below the cache. Both finish: the truncation's
//! read-back and the reader's log reads take the store's locks in the same order. A watchdog
//! fails the test with a message instead of letting a deadlock hang it.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use openraft::RaftLogReader;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use support::{assert_entry, config, entry, log_id};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::kv::TypeConfig;
use walcrypt_openraft::{StoreOptions, WalLogStore};

type Store = WalLogStore<TypeConfig>;

/// Entries 0..4 are in the log; each round truncates from index 2 and appends 2 and 3 again.
const ENTRIES: u64 = 4;
const TRUNCATE_FROM: u64 = 2;
const ROUNDS: u64 = 100;

/// Far beyond what the rounds take (well under a second each way); only a deadlock gets here.
const WATCHDOG: Duration = Duration::from_secs(60);

/// Sets the flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Truncates from `TRUNCATE_FROM` (the cache holds only entry 3, so the truncation empties it
/// and reads entry 1 back from the log) and appends the entries removed again.
fn truncate_and_append(mut store: Store) {
    runtime().block_on(async move {
        for _ in 0..ROUNDS {
            store.truncate(log_id(1, TRUNCATE_FROM)).await.unwrap();
            store
                .blocking_append((TRUNCATE_FROM..ENTRIES).map(|i| entry(1, i)))
                .await
                .unwrap();
        }
    });
}

/// Reads entries 1..3 (below the cache, or partly cached after a truncation) until told to
/// stop; returns how many reads ran.
fn read_below_the_cache(mut store: Store, stop: &AtomicBool) -> u64 {
    runtime().block_on(async move {
        let mut reads = 0;
        while !stop.load(Ordering::Acquire) || reads == 0 {
            let got = store.try_get_log_entries(1..3).await.unwrap();
            // A read that meets a truncation sees the log before or after it: entry 2 may be
            // missing, never entry 1.
            assert!(
                (1..=2).contains(&got.len()),
                "{} entries for 1..3",
                got.len()
            );
            for (i, e) in (1..).zip(&got) {
                assert_entry(e, 1, i);
            }
            reads += 1;
        }
        reads
    })
}

fn scenario(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let options = StoreOptions::default().cache_entries(1);
    let mut store = Store::open_with(dir.path(), config(mode, &keys), options).unwrap();
    runtime().block_on(async {
        store
            .blocking_append((0..ENTRIES).map(|i| entry(1, i)))
            .await
            .unwrap();
        // The next append evicts what became durable: only the last entry stays cached.
        store
            .blocking_append([entry(1, ENTRIES - 1)])
            .await
            .unwrap();
    });
    assert_eq!(store.cached_entries(), 1, "{mode}: cache");

    let (done, finished) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let truncator = {
        let (store, done, stop) = (store.clone(), done.clone(), stop.clone());
        std::thread::spawn(move || {
            // Stops the reader however this thread ends.
            let _stop = StopOnDrop(stop);
            truncate_and_append(store);
            let _ = done.send(());
        })
    };
    let reader = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let reads = read_below_the_cache(store, &stop);
            let _ = done.send(());
            reads
        })
    };
    // A thread that panics ends without sending: the joins below report why.
    for _ in 0..2 {
        match finished.recv_timeout(WATCHDOG) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "{mode}: truncating and reading below the cache did not finish within \
                 {WATCHDOG:?}: the two threads are deadlocked"
            ),
        }
    }
    truncator.join().expect("the truncating thread panicked");
    let reads = reader.join().expect("the reading thread panicked");
    assert!(reads > 0, "{mode}: no read ran");
}

#[test]
fn truncating_and_appending_again_beside_a_reader_below_the_cache_finishes_in_every_mode() {
    for mode in Mode::ALL {
        scenario(mode);
    }
}
