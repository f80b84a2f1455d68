//! Entries per second committed through a single-node openraft on the walcrypt log store (each
//! mode, durable: every entry fdatasynced before raft counts it), beside an in-memory log store
//! run through the same raft. 1, 4 and 16 concurrent clients; 100 B and 4 KiB values.
//!
//! A second table drives the store alone, the way a raft core would but without openraft: a
//! core task takes every write waiting (up to 256), appends them as one batch and answers the
//! clients from the flush callback. It shows what the store can take when appends are batched.
//!
//! `cargo bench -p walcrypt-openraft --bench raft_append [-- --seconds S --repeats R]`
//! prints markdown tables: the median of R runs of S seconds for each cell, and each walcrypt
//! mode's ratio to the in-memory store measured in the same run.
//!
//! openraft's own `openraft-memstore` crate implements the v1 storage API, which is compiled
//! out once any crate in the build enables `storage-v2`, so it cannot run beside this store;
//! the in-memory store here is the same design (entries in a map, callback at once).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, OptionalSend, Raft, RaftLogReader,
    StorageError, Vote,
};
use parking_lot::Mutex;
use walcrypt::{Config, KeyRing, Mode, SyncMode};
use walcrypt_openraft::WalLogStore;
use walcrypt_openraft::kv::{KvStateMachine, NodeId, Request, Router, TypeConfig};

#[derive(Default)]
struct MemInner {
    log: BTreeMap<u64, Entry<TypeConfig>>,
    purged: Option<LogId<NodeId>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
}

/// An in-memory log store: nothing is durable, the callback fires at once.
#[derive(Clone, Default)]
struct MemLog(Arc<Mutex<MemInner>>);

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .0
            .lock()
            .log
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = MemLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let m = self.0.lock();
        let last = m.log.last_key_value().map(|(_, e)| e.log_id);
        Ok(LogState {
            last_purged_log_id: m.purged,
            last_log_id: last.or(m.purged),
        })
    }

    async fn get_log_reader(&mut self) -> MemLog {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.0.lock().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.0.lock().vote)
    }

    async fn save_committed(
        &mut self,
        c: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        self.0.lock().committed = c;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.0.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut m = self.0.lock();
        for e in entries {
            m.log.insert(e.log_id.index, e);
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.0.lock().log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut m = self.0.lock();
        m.log = m.log.split_off(&(log_id.index + 1));
        m.purged = Some(log_id);
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Store {
    Memory,
    Wal(Mode),
}

impl Store {
    fn name(self) -> String {
        match self {
            Store::Memory => "in-memory".into(),
            Store::Wal(mode) => format!("walcrypt {mode}"),
        }
    }
}

struct Cell {
    entries_per_s: f64,
    entries_per_fsync: Option<f64>,
}

async fn start(
    store: Store,
    dir: &std::path::Path,
) -> (Raft<TypeConfig>, Option<WalLogStore<TypeConfig>>) {
    let config = Arc::new(
        openraft::Config {
            heartbeat_interval: 100,
            election_timeout_min: 200,
            election_timeout_max: 400,
            ..Default::default()
        }
        .validate()
        .expect("raft config"),
    );
    let router = Router::default();
    let sm = KvStateMachine::default();
    let (raft, wal) = match store {
        Store::Memory => (
            Raft::new(1, config, router, MemLog::default(), sm).await,
            None,
        ),
        Store::Wal(mode) => {
            let cfg = Config::new(mode)
                .keys(KeyRing::generate().expect("keys"))
                .sync(SyncMode::Durable);
            let log = WalLogStore::open(dir, cfg).expect("open the log store");
            (
                Raft::new(1, config, router, log.clone(), sm).await,
                Some(log),
            )
        }
    };
    let raft = raft.expect("start raft");
    raft.initialize(BTreeMap::from([(1, BasicNode::default())]))
        .await
        .expect("initialize");
    raft.wait(Some(Duration::from_secs(10)))
        .state(openraft::ServerState::Leader, "leader")
        .await
        .expect("leader");
    (raft, wal)
}

/// The store alone: clients hand writes to a core task that batches them into `append_entries`.
async fn run_store(store: Store, size: usize, clients: usize, seconds: f64) -> Cell {
    let dir = tempfile::tempdir().expect("temporary directory");
    let wal = match store {
        Store::Memory => None,
        Store::Wal(mode) => {
            let cfg = Config::new(mode)
                .keys(KeyRing::generate().expect("keys"))
                .sync(SyncMode::Durable);
            Some(WalLogStore::<TypeConfig>::open(dir.path(), cfg).expect("open the log store"))
        }
    };
    type Write = (Request, tokio::sync::oneshot::Sender<()>);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Write>();
    let core_wal = wal.clone();
    let core = tokio::spawn(async move {
        let mut memory: BTreeMap<u64, Entry<TypeConfig>> = BTreeMap::new();
        let mut next = 1u64;
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < 256 {
                match rx.try_recv() {
                    Ok(w) => batch.push(w),
                    Err(_) => break,
                }
            }
            let mut entries = Vec::with_capacity(batch.len());
            let mut replies = Vec::with_capacity(batch.len());
            for (req, reply) in batch {
                entries.push(Entry {
                    log_id: LogId::new(CommittedLeaderId::new(1, 1), next),
                    payload: EntryPayload::Normal(req),
                });
                replies.push(reply);
                next += 1;
            }
            match &core_wal {
                None => {
                    for e in entries {
                        memory.insert(e.log_id.index, e);
                    }
                    // Bounded, as a purge would keep it.
                    while memory.len() > 10_000 {
                        memory.pop_first();
                    }
                    for r in replies {
                        let _ = r.send(());
                    }
                }
                Some(w) => w
                    .append_entries(entries, move |res| {
                        res.expect("flush");
                        for r in replies {
                            let _ = r.send(());
                        }
                    })
                    .expect("append"),
            }
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let before = wal.as_ref().map(|w| w.wal_stats());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (tx, stop, done) = (tx.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let req = Request {
                    key: format!("c{c}-{}", n % 1024),
                    value: vec![(n % 251) as u8; size],
                };
                let (reply, wait) = tokio::sync::oneshot::channel();
                tx.send((req, reply)).expect("core running");
                wait.await.expect("reply");
                n += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    drop(tx);
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    core.await.expect("core task");
    finish(done.load(Ordering::Relaxed), elapsed, wal, before)
}

fn finish(
    entries: u64,
    elapsed: f64,
    wal: Option<WalLogStore<TypeConfig>>,
    before: Option<walcrypt::WalStats>,
) -> Cell {
    let entries_per_fsync = match (&wal, before) {
        (Some(w), Some(b)) => {
            let fsyncs = (w.wal_stats().fsyncs - b.fsyncs).max(1);
            Some(entries as f64 / fsyncs as f64)
        }
        _ => None,
    };
    Cell {
        entries_per_s: entries as f64 / elapsed,
        entries_per_fsync,
    }
}

/// Through a single-node openraft: clients call `client_write`.
async fn run_raft(store: Store, size: usize, clients: usize, seconds: f64) -> Cell {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (raft, wal) = start(store, dir.path()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let before = wal.as_ref().map(|w| w.wal_stats());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (raft, stop, done) = (raft.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let req = Request {
                    key: format!("c{c}-{}", n % 1024),
                    value: vec![(n % 251) as u8; size],
                };
                raft.client_write(req).await.expect("client write");
                n += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cell = finish(done.load(Ordering::Relaxed), elapsed, wal, before);
    raft.shutdown().await.expect("shutdown");
    cell
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds = arg(&args, "--seconds", 2.0);
    let repeats = arg(&args, "--repeats", 3.0) as usize;
    let stores = [
        Store::Memory,
        Store::Wal(Mode::Plaintext),
        Store::Wal(Mode::PerRecord),
        Store::Wal(Mode::PageLevel),
    ];
    println!(
        "median of {repeats} runs of {seconds} s each; walcrypt durable (fdatasync before an entry counts)"
    );
    for through_raft in [true, false] {
        println!();
        if through_raft {
            println!("through a single-node openraft 0.9 (client_write):");
        } else {
            println!("the store alone (a core task batches waiting writes into one append):");
        }
        println!();
        table(&stores, through_raft, seconds, repeats).await;
    }
}

async fn table(stores: &[Store], through_raft: bool, seconds: f64, repeats: usize) {
    println!("| value | clients | store | entries/s | vs in-memory | entries per fdatasync |");
    println!("| ---: | ---: | --- | ---: | ---: | ---: |");
    for size in [100usize, 4096] {
        for clients in [1usize, 4, 16] {
            let mut per_store: Vec<(Vec<f64>, Vec<f64>)> =
                vec![(Vec::new(), Vec::new()); stores.len()];
            // Interleave the stores within each repeat, so drift of the machine hits all alike.
            for _ in 0..repeats {
                for (i, &store) in stores.iter().enumerate() {
                    let cell = if through_raft {
                        run_raft(store, size, clients, seconds).await
                    } else {
                        run_store(store, size, clients, seconds).await
                    };
                    per_store[i].0.push(cell.entries_per_s);
                    if let Some(x) = cell.entries_per_fsync {
                        per_store[i].1.push(x);
                    }
                }
            }
            let memory = median(per_store[0].0.clone());
            for (i, &store) in stores.iter().enumerate() {
                let rate = median(per_store[i].0.clone());
                let batch = if per_store[i].1.is_empty() {
                    "-".to_string()
                } else {
                    format!("{:.1}", median(per_store[i].1.clone()))
                };
                println!(
                    "| {} | {clients} | {} | {:.0} | {:.3} | {batch} |",
                    if size == 100 { "100 B" } else { "4 KiB" },
                    store.name(),
                    rate,
                    rate / memory
                );
            }
        }
    }
}
