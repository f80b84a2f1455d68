//! `save_vote` returns only after the vote (and the committed log id written before it) is
//! fdatasynced; both survive a crash (the store dropped without closing, then reopened).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use openraft::Vote;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use support::{Gated, GatedFs, config, entry, log_id};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::WalLogStore;
use walcrypt_openraft::kv::TypeConfig;

async fn scenario(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let gate = Arc::new(GatedFs::default());
    let cfg = config(mode, &keys).storage(Arc::new(Gated(gate.clone())));
    let mut store = WalLogStore::<TypeConfig>::open(dir.path(), cfg).unwrap();
    store
        .blocking_append((0..5).map(|i| entry(1, i)))
        .await
        .unwrap();

    gate.close();
    let before = gate.finished();
    // Not flushed by itself: made durable by the vote's flush.
    store.save_committed(Some(log_id(1, 4))).await.unwrap();
    let mut voter = store.clone();
    let saving = tokio::spawn(async move { voter.save_vote(&Vote::new_committed(7, 2)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !saving.is_finished(),
        "{mode}: save_vote returned before its fdatasync"
    );
    gate.open();
    saving.await.unwrap().unwrap();
    assert!(
        gate.finished() > before,
        "{mode}: save_vote returned without an fdatasync"
    );

    // A crash right after: nothing else is written, the store is dropped without closing.
    drop(store);
    let mut reopened = WalLogStore::<TypeConfig>::open(dir.path(), config(mode, &keys)).unwrap();
    assert_eq!(
        reopened.read_vote().await.unwrap(),
        Some(Vote::new_committed(7, 2)),
        "{mode}: vote lost"
    );
    assert_eq!(
        reopened.read_committed().await.unwrap(),
        Some(log_id(1, 4)),
        "{mode}: committed log id lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vote_and_committed_are_durable_in_every_mode() {
    for mode in Mode::ALL {
        scenario(mode).await;
    }
}
