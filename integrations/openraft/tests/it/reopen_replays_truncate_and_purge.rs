//! Truncation and purge on the append-only log: the store reopens to exactly the state it had
//! (entries, their LSNs, vote, committed, purge point), purge removes whole segment files that
//! hold only purged entries, a purge at or below the purge point changes nothing, and the vote
//! survives the removal of the segment it was first written in. A raft node restarted after a purge past its snapshot rebuilds its state machine
//! from the sealed snapshot and the log.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{BasicNode, LogState, Raft, RaftLogReader, ServerState, Vote};
use support::{assert_entry, config, entry, log_id, segment_files};
use walcrypt::{KeyRing, Lsn, Mode, SealedFiles};
use walcrypt_openraft::WalLogStore;
use walcrypt_openraft::kv::{KvStateMachine, Request, Router, SNAPSHOT_FILE_NAME, TypeConfig};

type Store = WalLogStore<TypeConfig>;

/// (term, index) of every entry the store should hold, and their LSNs.
async fn snapshot(store: &mut Store) -> Vec<(u64, u64, Lsn)> {
    let entries = store.try_get_log_entries(0..).await.unwrap();
    entries
        .iter()
        .map(|e| {
            let lsn = store
                .lsn_of(e.log_id.index)
                .expect("an LSN for every entry");
            (e.log_id.leader_id.term, e.log_id.index, lsn)
        })
        .collect()
}

async fn scenario(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let mut store = Store::open(dir.path(), config(mode, &keys)).unwrap();

    // The vote is written once, into the first segment.
    store.save_vote(&Vote::new(1, 1)).await.unwrap();
    store
        .blocking_append((0..200).map(|i| entry(1, i)))
        .await
        .unwrap();
    // A conflicting suffix from 150 on is replaced by term 2.
    store.truncate(log_id(1, 150)).await.unwrap();
    assert_eq!(store.try_get_log_entries(150..).await.unwrap().len(), 0);
    store
        .blocking_append((150..260).map(|i| entry(2, i)))
        .await
        .unwrap();
    store.save_committed(Some(log_id(2, 255))).await.unwrap();
    // A truncation that nothing overwrites: 250.. is gone.
    store.truncate(log_id(2, 250)).await.unwrap();
    store.blocking_append([]).await.unwrap(); // a flush

    let mut reopened = reopen(store, dir.path(), mode, &keys).await;
    assert_eq!(
        reopened.get_log_state().await.unwrap(),
        LogState {
            last_purged_log_id: None,
            last_log_id: Some(log_id(2, 249)),
        },
        "{mode}"
    );
    assert_entry(
        &reopened.try_get_log_entries(149..=149).await.unwrap()[0],
        1,
        149,
    );
    assert_entry(
        &reopened.try_get_log_entries(150..=150).await.unwrap()[0],
        2,
        150,
    );

    // Purge a prefix: whole segments before the first kept entry go away.
    let files_before = segment_files(dir.path());
    reopened.purge(log_id(2, 180)).await.unwrap();
    let files_after = segment_files(dir.path());
    assert!(
        files_after < files_before,
        "{mode}: purge removed no segment file ({files_before} before)"
    );
    assert_eq!(
        reopened.try_get_log_entries(0..=180).await.unwrap().len(),
        0
    );
    assert_eq!(reopened.try_get_log_entries(181..).await.unwrap().len(), 69);

    let mut again = reopen(reopened, dir.path(), mode, &keys).await;
    assert_eq!(
        again.get_log_state().await.unwrap().last_purged_log_id,
        Some(log_id(2, 180)),
        "{mode}"
    );
    // The first segment, holding the only vote record written by save_vote, is gone: the vote
    // came back from the copy purge wrote after its purge record.
    assert_eq!(
        again.read_vote().await.unwrap(),
        Some(Vote::new(1, 1)),
        "{mode}"
    );
    assert_eq!(
        again.read_committed().await.unwrap(),
        Some(log_id(2, 255)),
        "{mode}"
    );

    // Purge past the last entry (as after installing a snapshot), then append after it.
    again.purge(log_id(3, 300)).await.unwrap();
    again
        .blocking_append((301..310).map(|i| entry(3, i)))
        .await
        .unwrap();
    let mut last = reopen(again, dir.path(), mode, &keys).await;
    assert_eq!(
        last.get_log_state().await.unwrap(),
        LogState {
            last_purged_log_id: Some(log_id(3, 300)),
            last_log_id: Some(log_id(3, 309)),
        },
        "{mode}"
    );
    assert_eq!(
        segment_files(dir.path()),
        1,
        "{mode}: only the last segment is needed"
    );
}

/// Closes `store` (drops it, as a crash after its last flush would) and reopens the directory;
/// checks that the reopened store has exactly the state the old one had.
async fn reopen(mut store: Store, dir: &std::path::Path, mode: Mode, keys: &KeyRing) -> Store {
    // The state to compare with, taken before the old store lets go of the log.
    let mut expected = MemoryCopy::take(&mut store).await;
    drop(store);
    let mut reopened = Store::open(dir, config(mode, keys)).unwrap();
    expected.compare(&mut reopened, mode).await;
    reopened
}

/// What a store reported before it was closed.
struct MemoryCopy {
    entries: Vec<(u64, u64, Lsn)>,
    state: LogState<TypeConfig>,
    vote: Option<Vote<u64>>,
    committed: Option<openraft::LogId<u64>>,
}

impl MemoryCopy {
    async fn take(store: &mut Store) -> MemoryCopy {
        MemoryCopy {
            entries: snapshot(store).await,
            state: store.get_log_state().await.unwrap(),
            vote: store.read_vote().await.unwrap(),
            committed: store.read_committed().await.unwrap(),
        }
    }

    async fn compare(&mut self, after: &mut Store, mode: Mode) {
        let got = MemoryCopy::take(after).await;
        assert_eq!(
            got.entries, self.entries,
            "{mode}: entries or their LSNs differ after reopen"
        );
        assert_eq!(
            got.state, self.state,
            "{mode}: log state differs after reopen"
        );
        assert_eq!(got.vote, self.vote, "{mode}: vote differs after reopen");
        assert_eq!(
            got.committed, self.committed,
            "{mode}: committed differs after reopen"
        );
        for e in after.try_get_log_entries(0..).await.unwrap() {
            assert_entry(&e, e.log_id.leader_id.term, e.log_id.index);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_replays_truncate_and_purge_in_every_mode() {
    for mode in Mode::ALL {
        scenario(mode).await;
    }
}

/// A purge at or below the purge point (a stale one, which openraft ignores) writes nothing and
/// removes nothing: the purge point stays, live and after reopen, also when the record of the
/// higher purge point lies in a segment that the lower one's removal would have taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_at_or_below_the_purge_point_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let mode = Mode::PerRecord;
    let mut store = Store::open(dir.path(), config(mode, &keys)).unwrap();
    store
        .blocking_append((0..50).map(|i| entry(1, i)))
        .await
        .unwrap();
    // Beyond the last entry, as after installing a snapshot.
    store.purge(log_id(1, 100)).await.unwrap();
    // Enough records to move the log into later segments than the purge record's.
    let files = segment_files(dir.path());
    for i in 0..4000 {
        store
            .save_committed(Some(log_id(1, 40 + i % 2)))
            .await
            .unwrap();
    }
    store
        .blocking_append((101..110).map(|i| entry(2, i)))
        .await
        .unwrap();
    let files_before = segment_files(dir.path());
    assert!(files_before > files, "{files_before} segment files");
    let live = LogState {
        last_purged_log_id: Some(log_id(1, 100)),
        last_log_id: Some(log_id(2, 109)),
    };

    store.purge(log_id(1, 60)).await.unwrap();
    assert_eq!(store.get_log_state().await.unwrap(), live);
    assert_eq!(
        segment_files(dir.path()),
        files_before,
        "a stale purge removed files"
    );
    let mut reopened = reopen(store, dir.path(), mode, &keys).await;
    assert_eq!(reopened.get_log_state().await.unwrap(), live);
    assert_eq!(reopened.try_get_log_entries(0..).await.unwrap().len(), 9);

    // At the purge point itself, after the reopen.
    let files_reopened = segment_files(dir.path());
    reopened.purge(log_id(1, 100)).await.unwrap();
    assert_eq!(segment_files(dir.path()), files_reopened);
    let mut again = reopen(reopened, dir.path(), mode, &keys).await;
    assert_eq!(again.get_log_state().await.unwrap(), live);
}

/// The value written under key `i` in the node test: easy to find in a file in plaintext.
fn node_value(i: u64) -> Vec<u8> {
    format!("SNAPSHOT-PLAINTEXT value {i:04} {}", "x".repeat(400)).into_bytes()
}

/// Starts (or restarts) node 1 alone: its log in `dir/raft-log`, its snapshots sealed under the
/// same keys in `dir/snapshots`, which the log's key retirement consults.
async fn start_node(dir: &Path, keys: &KeyRing) -> (Raft<TypeConfig>, KvStateMachine) {
    let snapshots = dir.join("snapshots");
    let log_config = config(Mode::PerRecord, keys).sealed_dirs([&snapshots]);
    let store = Store::open(dir.join("raft-log"), log_config).unwrap();
    let sm = KvStateMachine::open(&snapshots, SealedFiles::new(keys)).unwrap();
    let raft_config = openraft::Config {
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        ..Default::default()
    }
    .validate()
    .unwrap();
    let raft = Raft::new(
        1,
        Arc::new(raft_config),
        Router::default(),
        store,
        sm.clone(),
    )
    .await
    .unwrap();
    (raft, sm)
}

async fn write_values(raft: &Raft<TypeConfig>, range: std::ops::Range<u64>) {
    for i in range {
        let req = Request {
            key: format!("key-{i:04}"),
            value: node_value(i),
        };
        raft.client_write(req).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_after_a_purge_past_its_snapshot_rebuilds_its_state_from_the_sealed_snapshot_and_the_log()
 {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wait = Some(Duration::from_secs(10));

    let (raft, sm) = start_node(dir.path(), &keys).await;
    let members = BTreeMap::from([(1, BasicNode::default())]);
    raft.initialize(members).await.unwrap();
    raft.wait(wait)
        .state(ServerState::Leader, "node 1 leads")
        .await
        .unwrap();
    write_values(&raft, 0..300).await;

    // A snapshot of everything applied, then the log purged through it.
    raft.trigger().snapshot().await.unwrap();
    let metrics = raft
        .wait(wait)
        .metrics(
            |m| m.snapshot.is_some() && m.snapshot == m.last_applied,
            "snapshot of everything applied",
        )
        .await
        .unwrap();
    let snapshot = metrics.snapshot.unwrap();
    assert_eq!(sm.snapshot_last_log_id(), Some(snapshot));
    raft.trigger().purge_log(snapshot.index).await.unwrap();
    raft.wait(wait)
        .purged(Some(snapshot), "log purged through the snapshot")
        .await
        .unwrap();
    // Entries after the snapshot live in the log only.
    write_values(&raft, 300..350).await;
    let applied = raft.metrics().borrow().last_applied;

    let file = std::fs::read(dir.path().join("snapshots").join(SNAPSHOT_FILE_NAME)).unwrap();
    assert!(file.len() > 300 * 400, "the snapshot file holds the state");
    for needle in [&node_value(7)[..], b"SNAPSHOT-PLAINTEXT", b"key-0007"] {
        assert!(
            !file.windows(needle.len()).any(|w| w == needle),
            "the snapshot file holds plaintext"
        );
    }

    raft.shutdown().await.unwrap();
    drop(raft);
    drop(sm);

    let (raft, sm) = start_node(dir.path(), &keys).await;
    assert_eq!(sm.snapshot_last_log_id(), Some(snapshot));
    // The metrics are published once the node's core runs.
    raft.wait(wait)
        .purged(Some(snapshot), "the log stays purged")
        .await
        .unwrap();
    // The committed log id of the last writes may not have been flushed before the drop: the
    // node applies them once it leads again.
    raft.wait(wait)
        .applied_index_at_least(applied.map(|l| l.index), "everything applied again")
        .await
        .unwrap();
    assert_eq!(sm.len(), 350);
    for i in 0..350 {
        assert_eq!(
            sm.get(&format!("key-{i:04}")),
            Some(node_value(i)),
            "key {i} after the restart"
        );
    }
    raft.shutdown().await.unwrap();
}
