//! An append that would leave a hole after the last log index (the last entry, or the purge
//! point when no entry is left), or put an entry at or below the purge point, is refused, and
//! changes nothing on disk or in memory.

use crate::support;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{LogState, RaftLogReader};
use support::{assert_entry, config, entry, log_id};
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

/// After a purge the last log index is the purge point (as `get_log_state` reports it) until
/// an entry follows it: an entry further on than the one right after it is refused and changes
/// nothing; entries at or below it are purged as they arrive (nothing is written for them, the
/// rest of their batch is appended). Either way the store reopens to the state it had live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_after_a_purge_leaves_no_hole_and_no_entry_at_or_below_the_purge_point() {
    let keys = KeyRing::generate().unwrap();
    // (purge point, batch, whether it is refused, the entries left)
    let cases = [
        (9, 20..25, true, 10..10), // a gap after a purge that left no entry
        (9, 11..12, true, 10..10), // one past the index after the purge point
        (9, 5..7, false, 10..10),  // below the purge point, no entry left
        (9, 7..12, false, 10..12), // across the purge point, no entry left
        (4, 2..4, false, 5..10),   // below the purge point, entries left
        (4, 3..7, false, 5..7),    // across the purge point: 5 and 6 replaced, 7.. gone
    ];
    for (purged, batch, refused, left) in cases {
        let what = format!("purge {purged}, append {batch:?}");
        let dir = tempfile::tempdir().unwrap();
        let mut store =
            WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
        store
            .blocking_append((0..10).map(|i| entry(1, i)))
            .await
            .unwrap();
        store.purge(log_id(1, purged)).await.unwrap();
        let before = store.get_log_state().await.unwrap();

        let appended = store
            .blocking_append(batch.clone().map(|i| entry(2, i)))
            .await;
        match (appended, refused) {
            (Ok(()), false) => {}
            (Err(e), true) => {
                let message = e.to_string();
                assert!(
                    message.contains("hole"),
                    "{what}: unexpected error: {message}"
                );
                assert_eq!(store.get_log_state().await.unwrap(), before, "{what}");
            }
            (result, _) => panic!("{what}: {result:?}"),
        }
        // Entries of term 2 where the batch put them, of term 1 where the log kept its own.
        let term = |i: u64| if batch.contains(&i) { 2 } else { 1 };
        let live = LogState {
            last_purged_log_id: Some(log_id(1, purged)),
            last_log_id: Some(match left.clone().last() {
                Some(i) => log_id(term(i), i),
                None => log_id(1, purged),
            }),
        };
        assert_eq!(store.get_log_state().await.unwrap(), live, "{what}");
        let want: Vec<_> = left.clone().map(|i| log_id(term(i), i)).collect();
        assert_eq!(log_ids(&mut store).await, want, "{what}");
        drop(store);

        let mut reopened =
            WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys))
                .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
        assert_eq!(reopened.get_log_state().await.unwrap(), live, "{what}");
        assert_eq!(log_ids(&mut reopened).await, want, "{what}");
        // The next entry goes right after the last log index.
        let next = live.last_log_id.map_or(0, |l| l.index + 1);
        reopened.blocking_append([entry(3, next)]).await.unwrap();
        assert!(
            reopened
                .blocking_append([entry(3, next + 2)])
                .await
                .is_err(),
            "{what}"
        );
    }
}

/// What openraft itself does after a purge stays accepted, live and at reopen: a purge beyond
/// the last entry (after installing a snapshot) followed by the entry after it, a truncation
/// below the purge point followed by the entry after the purge point, and a fresh log taking
/// its first entry at an index other than 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_that_follow_the_purge_point_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let mut store =
        WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    store
        .blocking_append((3..10).map(|i| entry(1, i)))
        .await
        .unwrap();
    store.purge(log_id(1, 4)).await.unwrap();
    store.truncate(log_id(1, 2)).await.unwrap();
    let empty = LogState {
        last_purged_log_id: Some(log_id(1, 4)),
        last_log_id: Some(log_id(1, 4)),
    };
    assert_eq!(store.get_log_state().await.unwrap(), empty);
    store
        .blocking_append((5..8).map(|i| entry(2, i)))
        .await
        .unwrap();
    store.purge(log_id(3, 100)).await.unwrap();
    store
        .blocking_append((101..103).map(|i| entry(3, i)))
        .await
        .unwrap();
    let live = LogState {
        last_purged_log_id: Some(log_id(3, 100)),
        last_log_id: Some(log_id(3, 102)),
    };
    assert_eq!(store.get_log_state().await.unwrap(), live);
    let entries = log_ids(&mut store).await;
    drop(store);
    let mut reopened =
        WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    assert_eq!(reopened.get_log_state().await.unwrap(), live);
    assert_eq!(log_ids(&mut reopened).await, entries);
}

/// The log ids of every entry, each entry's payload checked.
async fn log_ids(store: &mut WalLogStore<TypeConfig>) -> Vec<openraft::LogId<u64>> {
    let entries = store.try_get_log_entries(0..).await.unwrap();
    for e in &entries {
        assert_entry(e, e.log_id.leader_id.term, e.log_id.index);
    }
    entries.into_iter().map(|e| e.log_id).collect()
}

/// A log that starts further on than index 0 (nothing purged yet) refuses a purge point that
/// would leave a gap before its first entry, and changes nothing; the purge point right before
/// the first entry is taken. The store reopens to the state it had live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_that_would_leave_a_gap_before_the_first_entry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let mut store =
        WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    store
        .blocking_append((5..10).map(|i| entry(1, i)))
        .await
        .unwrap();
    let before = store.get_log_state().await.unwrap();
    for upto in [2, 3] {
        let message = match store.purge(log_id(1, upto)).await {
            Ok(()) => panic!("purge {upto} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(message.contains("hole"), "unexpected error: {message}");
        assert_eq!(store.get_log_state().await.unwrap(), before, "purge {upto}");
    }
    let ids = log_ids(&mut store).await;
    drop(store);
    let mut reopened =
        WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    assert_eq!(reopened.get_log_state().await.unwrap(), before);
    assert_eq!(log_ids(&mut reopened).await, ids);

    reopened.purge(log_id(1, 4)).await.unwrap();
    let live = LogState {
        last_purged_log_id: Some(log_id(1, 4)),
        last_log_id: Some(log_id(1, 9)),
    };
    assert_eq!(reopened.get_log_state().await.unwrap(), live);
    drop(reopened);
    let mut again =
        WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    assert_eq!(again.get_log_state().await.unwrap(), live);
    assert_eq!(log_ids(&mut again).await, ids);
}
