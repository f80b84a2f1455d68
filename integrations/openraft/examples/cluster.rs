//! A three-node raft cluster in one process, each node on its own encrypted walcrypt log with
//! its own key ring: writes are committed, the leader is stopped, a new leader is elected and
//! writes continue; the stopped node is then restarted from its log and catches up (each store
//! caches only the newest 32 entries, so the entries it missed are read back from the new
//! leader's log), and all three take more writes. Then one node builds a snapshot, sealed into
//! its snapshot directory under its own keys, purges its log through it, takes more writes, is
//! stopped and restarted: it rebuilds its state from the sealed snapshot plus the entries after
//! it in its log. At the end it shows what walcrypt's reader (the library under `wal-dump`)
//! sees of each node's log, without the key and with it, and checks that no value written
//! appears in plaintext in any log or snapshot file.
//!
//! Run: `cargo run -p walcrypt-openraft --example cluster [-- --keep DIR]`. With `--keep DIR`
//! the logs, snapshots and key files stay in DIR, for `wal-dump DIR/node-1/raft-log --key-file
//! DIR/node-1/keys`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Raft, ServerState};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SealedFiles, SyncMode};
use walcrypt_openraft::kv::{KvStateMachine, NodeId, Request, Router, TypeConfig};
use walcrypt_openraft::record::{self, KIND_ENTRY, LogRecord};
use walcrypt_openraft::{StoreOptions, WalLogStore};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The value of write `i`: easy to find in a file if it were stored in plaintext.
fn value(i: u64) -> Vec<u8> {
    format!("PLAINTEXT-MARKER account {i:05} balance {}", i * 1000).into_bytes()
}

struct Node {
    id: NodeId,
    mode: Mode,
    log_dir: PathBuf,
    snapshot_dir: PathBuf,
    key_file: PathBuf,
    raft: Raft<TypeConfig>,
    sm: KvStateMachine,
}

/// How many of the newest entries each store keeps in memory: small, so that catching up a
/// restarted node reads entries back from the leader's log.
const CACHE_ENTRIES: usize = 32;

/// Starts node `id`, or restarts it from its snapshot, log and key file when they exist.
async fn start_node(base: &Path, id: NodeId, mode: Mode, router: &Router) -> Res<Node> {
    let dir = base.join(format!("node-{id}"));
    std::fs::create_dir_all(&dir)?;
    let key_file = dir.join("keys");
    let keys = if key_file.exists() {
        KeyRing::load(&key_file)?
    } else {
        // Each node generates its own key ring; it never leaves the node.
        let keys = KeyRing::generate()?;
        keys.save(&key_file)?;
        keys
    };
    let log_dir = dir.join("raft-log");
    let snapshot_dir = dir.join("snapshots");
    // Snapshots are sealed under the log's keys; key retirement keeps the keys they use.
    let files = SealedFiles::new(&keys);
    let config = Config::new(mode)
        .keys(keys)
        .sync(SyncMode::Durable)
        .sealed_dirs([&snapshot_dir]);
    let options = StoreOptions::default().cache_entries(CACHE_ENTRIES);
    let store = WalLogStore::<TypeConfig>::open_with(&log_dir, config, options)?;
    // Starts from the sealed snapshot in `snapshot_dir`, if any; openraft then applies the
    // committed entries after it from the log.
    let sm = KvStateMachine::open(&snapshot_dir, files)?;
    let raft_config = openraft::Config {
        heartbeat_interval: 100,
        election_timeout_min: 400,
        election_timeout_max: 800,
        ..Default::default()
    }
    .validate()?;
    let raft = Raft::new(id, Arc::new(raft_config), router.clone(), store, sm.clone()).await?;
    router.add(id, raft.clone());
    Ok(Node {
        id,
        mode,
        log_dir,
        snapshot_dir,
        key_file,
        raft,
        sm,
    })
}

/// Waits until one of `nodes` is leader and returns its id.
async fn wait_for_leader(nodes: &[&Node]) -> Res<NodeId> {
    for _ in 0..100 {
        for node in nodes {
            let m = node.raft.metrics().borrow().clone();
            if m.state == ServerState::Leader {
                return Ok(node.id);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("no leader elected within 10 s".into())
}

/// Writes keys `range` through the leader, following a forward to a new leader.
async fn write(nodes: &[&Node], mut leader: NodeId, range: std::ops::Range<u64>) -> Res<NodeId> {
    for i in range {
        loop {
            let raft = &nodes
                .iter()
                .find(|n| n.id == leader)
                .ok_or("no such node")?
                .raft;
            let req = Request {
                key: format!("account-{i:05}"),
                value: value(i),
            };
            match raft.client_write(req).await {
                Ok(_) => break,
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                    leader = match f.leader_id {
                        Some(id) => id,
                        None => wait_for_leader(nodes).await?,
                    };
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(leader)
}

/// Waits until every node in `nodes` has applied `writes` writes, and checks them.
async fn wait_applied(nodes: &[&Node], writes: u64) -> Res<()> {
    for node in nodes {
        for _ in 0..200 {
            if node.sm.len() as u64 >= writes {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let last = writes - 1;
        if node.sm.len() as u64 != writes
            || node.sm.get(&format!("account-{last:05}")) != Some(value(last))
        {
            return Err(format!(
                "node {} holds {} writes, not the {writes} written",
                node.id,
                node.sm.len()
            )
            .into());
        }
    }
    Ok(())
}

/// What the library's reader shows of a log: headers without the key, then contents with it.
fn show_log(node: &Node) -> Res<()> {
    println!(
        "node {} ({} mode): {}",
        node.id,
        node.mode,
        node.log_dir.display()
    );
    let reader = Reader::open(&node.log_dir, None)?;
    for seg in reader.segments() {
        let ids: Vec<u32> = seg.header.key_checks.iter().map(|(id, _)| *id).collect();
        println!(
            "  segment {:>10}  log id {:016x}  key ids {:?}",
            seg.header.start.to_string(),
            seg.header.log_id,
            ids
        );
    }
    if node.mode == Mode::PageLevel {
        let headers: Vec<_> = reader
            .page_headers()?
            .into_iter()
            .filter_map(|p| p.header)
            .collect();
        let key_ids: BTreeSet<u32> = headers.iter().map(|h| h.key_id).collect();
        println!(
            "  without the key: {} page headers (key ids {key_ids:?}); page bodies, record headers included, are ciphertext",
            headers.len()
        );
    } else {
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        let mut shown = 0;
        for rec in reader.raw_records_from(reader.first_lsn()?) {
            let rec = rec?;
            *kinds.entry(record::kind_name(rec.header.kind)).or_default() += 1;
            if shown < 4 {
                let key = rec.header.encryption.map(|(id, _)| format!("key {id}"));
                println!(
                    "  without the key: LSN {:>10}  kind {:#04x} {:<9}  len {:>4}  {}",
                    rec.lsn.to_string(),
                    rec.header.kind,
                    record::kind_name(rec.header.kind),
                    rec.header.len,
                    key.unwrap_or_else(|| "plaintext".into())
                );
                shown += 1;
            }
        }
        println!("  without the key: record headers by kind {kinds:?}");
    }
    let keys = KeyRing::load(&node.key_file)?;
    let reader = Reader::open(&node.log_dir, Some(keys))?;
    let mut last_entry = None;
    let mut records = 0;
    for rec in reader.records_from(Lsn::default()) {
        let rec = rec?;
        records += 1;
        if rec.kind == KIND_ENTRY
            && let LogRecord::<openraft::Entry<TypeConfig>, NodeId>::Entry(entry) =
                LogRecord::decode(rec.kind, &rec.payload)?
        {
            last_entry = Some(entry.log_id);
        }
    }
    match last_entry {
        Some(id) => println!("  with its key: {records} records, last entry {id}"),
        None => println!("  with its key: {records} records, no entry"),
    }
    Ok(())
}

/// Fails if any file of the log or of the snapshot directory holds a written value in
/// plaintext.
fn check_no_plaintext(node: &Node, writes: u64) -> Res<()> {
    let needle = b"PLAINTEXT-MARKER";
    for dir in [&node.log_dir, &node.snapshot_dir] {
        for file in std::fs::read_dir(dir)? {
            let path = file?.path();
            let bytes = std::fs::read(&path)?;
            if bytes.windows(needle.len()).any(|w| w == needle) {
                return Err(format!("{} holds plaintext", path.display()).into());
            }
        }
    }
    println!(
        "  no plaintext: none of the {writes} values appears in {} or {}",
        node.log_dir.display(),
        node.snapshot_dir.display()
    );
    Ok(())
}

/// Has `node` build a snapshot of everything it applied and purge its log through it; returns
/// the snapshot's last log index.
async fn snapshot_and_purge(node: &Node) -> Res<u64> {
    let wait = Some(Duration::from_secs(10));
    node.raft.trigger().snapshot().await?;
    let metrics = node
        .raft
        .wait(wait)
        .metrics(
            |m| m.snapshot.is_some() && m.snapshot == m.last_applied,
            "a snapshot of everything applied",
        )
        .await?;
    let snapshot = metrics.snapshot.ok_or("no snapshot built")?;
    node.raft.trigger().purge_log(snapshot.index).await?;
    node.raft
        .wait(wait)
        .purged(Some(snapshot), "the log purged through the snapshot")
        .await?;
    Ok(snapshot.index)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let temp = tempfile_dir()?;
    let base = match args.iter().position(|a| a == "--keep") {
        Some(i) => PathBuf::from(args.get(i + 1).ok_or("--keep needs a directory")?),
        None => temp.clone(),
    };
    let router = Router::default();
    let modes = [Mode::PerRecord, Mode::PerRecord, Mode::PageLevel];
    let mut nodes = Vec::new();
    for (id, mode) in (1..=3).zip(modes) {
        nodes.push(start_node(&base, id, mode, &router).await?);
    }
    let members: BTreeMap<NodeId, BasicNode> =
        nodes.iter().map(|n| (n.id, BasicNode::default())).collect();
    nodes[0].raft.initialize(members).await?;

    let all: Vec<&Node> = nodes.iter().collect();
    let leader = wait_for_leader(&all).await?;
    println!("leader elected: node {leader}");
    let leader = write(&all, leader, 0..100).await?;
    println!("100 writes committed through node {leader}");

    println!("stopping the leader, node {leader}");
    router.remove(leader);
    nodes
        .iter()
        .find(|n| n.id == leader)
        .ok_or("leader not found")?
        .raft
        .shutdown()
        .await?;

    let rest: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let new_leader = wait_for_leader(&rest).await?;
    println!("new leader elected: node {new_leader}");
    let new_leader = write(&rest, new_leader, 100..200).await?;
    println!("100 more writes committed through node {new_leader}");
    wait_applied(&rest, 200).await?;
    println!("both running nodes applied all 200 writes");
    drop(rest);

    // The stopped node comes back on its own log and key file: it replays its log (the first
    // 100 writes), and the leader sends it the 100 it missed, read from the leader's log.
    let index = nodes
        .iter()
        .position(|n| n.id == leader)
        .ok_or("leader not found")?;
    // Dropping the stopped node's last handle lets its log store close (and unlock its
    // directory) before the new one opens it.
    let stopped = nodes.remove(index);
    let mode = stopped.mode;
    drop(stopped);
    nodes.insert(index, start_node(&base, leader, mode, &router).await?);
    println!("node {leader} restarted from its log");
    let all: Vec<&Node> = nodes.iter().collect();
    wait_applied(&all[index..=index], 200).await?;
    println!("node {leader} caught up: it applied all 200 writes");
    let last_leader = write(&all, new_leader, 200..250).await?;
    println!("50 more writes committed through node {last_leader}, with all three nodes up");
    wait_applied(&all, 250).await?;
    println!("all three nodes applied all 250 writes");

    // A follower snapshots and purges its log through the snapshot, takes 50 more writes (in
    // its log only), and is restarted: the first 250 writes can come back only from its sealed
    // snapshot.
    let index = nodes
        .iter()
        .position(|n| n.id != last_leader)
        .ok_or("no follower")?;
    let follower = nodes[index].id;
    let snapshot_index = snapshot_and_purge(all[index]).await?;
    println!(
        "node {follower} sealed a snapshot through index {snapshot_index} into {} and purged its log through it",
        all[index].snapshot_dir.display()
    );
    let last_leader = write(&all, last_leader, 250..300).await?;
    wait_applied(&all, 300).await?;
    println!("50 more writes committed through node {last_leader}; all three nodes applied 300");
    router.remove(follower);
    all[index].raft.shutdown().await?;
    drop(all);
    let stopped = nodes.remove(index);
    let mode = stopped.mode;
    drop(stopped);
    let restarted = start_node(&base, follower, mode, &router).await?;
    // Raft::new has rebuilt the state: the snapshot, then the committed entries after it.
    let rebuilt = restarted.sm.len();
    let from_snapshot = restarted.sm.snapshot_last_log_id().map(|l| l.index);
    if from_snapshot != Some(snapshot_index) || restarted.sm.get("account-00000") != Some(value(0))
    {
        return Err(format!("node {follower} did not start from its sealed snapshot").into());
    }
    println!(
        "node {follower} restarted: {rebuilt} writes rebuilt from its snapshot (through index {snapshot_index}) and its log"
    );
    nodes.insert(index, restarted);
    let all: Vec<&Node> = nodes.iter().collect();
    wait_applied(&all, 300).await?;
    println!("node {follower} holds all 300 writes");
    for node in &all {
        node.raft.shutdown().await?;
    }
    drop(all);

    println!();
    println!("what walcrypt's reader shows of each log:");
    for node in &nodes {
        show_log(node)?;
        check_no_plaintext(node, 300)?;
    }
    // Each node generated its own ring: the key check values in the segment headers differ.
    let mut checks = BTreeSet::new();
    for node in &nodes {
        let reader = Reader::open(&node.log_dir, None)?;
        for seg in reader.segments() {
            checks.extend(seg.header.key_checks.iter().map(|(_, kcv)| *kcv));
        }
    }
    if checks.len() < nodes.len() {
        return Err("two nodes share a data key".into());
    }
    println!("key rings: every node's key has its own check value; no node can read another's log");
    drop(nodes);
    if base == temp {
        std::fs::remove_dir_all(&temp)?;
    }
    Ok(())
}

/// A fresh directory under the system's temporary directory.
fn tempfile_dir() -> Res<PathBuf> {
    let dir = std::env::temp_dir().join(format!("walcrypt-raft-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
