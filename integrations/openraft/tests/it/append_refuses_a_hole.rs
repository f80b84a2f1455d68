//! An append that would leave a hole after the last entry is refused, and changes nothing on
//! disk or in memory.

use crate::support;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{LogState, RaftLogReader};
use support::{config, entry, log_id};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::WalLogStore;
use walcrypt_openraft::kv::TypeConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_after_a_gap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let mut store =
        WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    store
        .blocking_append((1..=3).map(|i| entry(1, i)))
        .await
        .unwrap();

    let refused = store.blocking_append([entry(1, 5)]).await;
    let message = format!(
        "{:?}",
        refused.expect_err("index 5 after 3 must be refused")
    );
    assert!(message.contains("hole"), "unexpected error: {message}");

    let want = LogState {
        last_purged_log_id: None,
        last_log_id: Some(log_id(1, 3)),
    };
    assert_eq!(store.get_log_state().await.unwrap(), want);
    drop(store);
    let mut reopened =
        WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    assert_eq!(reopened.get_log_state().await.unwrap(), want);
    assert_eq!(reopened.try_get_log_entries(0..).await.unwrap().len(), 3);
}
