//! Entries are readable as soon as `append` returns, while their flush callback waits for the
//! fdatasync; one fdatasync round serves many waiting appends.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use openraft::RaftLogReader;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use support::{Gated, GatedFs, assert_entry, config, entry};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::WalLogStore;
use walcrypt_openraft::kv::TypeConfig;

const APPENDS: u64 = 8;

async fn wait_readable(store: &mut WalLogStore<TypeConfig>, index: u64) {
    for _ in 0..2000 {
        if !store
            .try_get_log_entries(index..=index)
            .await
            .unwrap()
            .is_empty()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("entry {index} never became readable");
}

async fn scenario(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let gate = Arc::new(GatedFs::default());
    let cfg = config(mode, &keys).storage(Arc::new(Gated(gate.clone())));
    let mut store = WalLogStore::<TypeConfig>::open(dir.path(), cfg).unwrap();

    gate.close();
    let synced_before = gate.finished();
    let mut waiting = Vec::new();
    for i in 0..APPENDS {
        let mut clone = store.clone();
        waiting.push(tokio::spawn(async move {
            clone.blocking_append([entry(1, i)]).await
        }));
        wait_readable(&mut store, i).await;
    }
    // The vote is written after the entries and waits for the same fdatasync.
    let mut voter = store.clone();
    let vote = tokio::spawn(async move { voter.save_vote(&openraft::Vote::new(3, 1)).await });

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        gate.started() > synced_before,
        "{mode}: no fdatasync was even started"
    );
    assert_eq!(
        gate.finished(),
        synced_before,
        "{mode}: an fdatasync got past the gate"
    );
    for task in &waiting {
        assert!(
            !task.is_finished(),
            "{mode}: a flush callback fired before fdatasync"
        );
    }
    assert!(
        !vote.is_finished(),
        "{mode}: save_vote returned before fdatasync"
    );
    let all = store.try_get_log_entries(0..APPENDS).await.unwrap();
    assert_eq!(
        all.len() as u64,
        APPENDS,
        "{mode}: appended entries are not all readable"
    );
    for (i, got) in all.iter().enumerate() {
        assert_entry(got, 1, i as u64);
    }

    gate.open();
    for task in waiting {
        task.await.unwrap().unwrap();
    }
    vote.await.unwrap().unwrap();
    let syncs = gate.finished() - synced_before;
    assert!(syncs >= 1, "{mode}: callbacks fired without any fdatasync");
    // The first round was blocked with one waiter; every other one queued behind it and is
    // served by the next round: a few fdatasyncs, not one per append.
    assert!(
        syncs <= 4,
        "{mode}: {syncs} fdatasyncs for {} waiters: no group commit",
        APPENDS + 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_wait_for_fdatasync_in_every_mode() {
    for mode in Mode::ALL {
        scenario(mode).await;
    }
}
