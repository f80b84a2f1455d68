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

/// After a purge, the log lost the segment file holding the first entries kept (removed by
/// hand: to walcrypt that looks like a purge). The store refuses to open, naming the first
/// entry left and the one the purge point says must come first, rather than serving a log with
/// a gap after its purge point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_missing_the_entries_after_its_purge_point_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let mut store =
        WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    store
        .blocking_append((0..400).map(|i| entry(1, i)))
        .await
        .unwrap();
    store.purge(log_id(1, 5)).await.unwrap();
    drop(store);
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    // The oldest file holds entry 6, the first one after the purge point.
    std::fs::remove_file(&files[0]).unwrap();
    match WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)) {
        Err(walcrypt_openraft::Error::Hole {
            index, expected, ..
        }) => {
            assert_eq!(expected, 6);
            assert!(index > 6, "first entry left {index}");
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("a log missing entries after its purge point opened"),
    }
}
