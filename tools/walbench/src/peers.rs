//! `walbench --peers`: walcrypt's modes beside other write-ahead logs on one commit workload.
//!
//! Every system runs the same transactions: T threads, each appending K records of S bytes of
//! incompressible data and then committing, durably (`data`: the commit returns once the data
//! is on stable storage) or not (`none`: the commit hands the bytes to the OS). Cells are
//! interleaved like the study's: within a round all systems of one (shape, sync, threads) run
//! back to back, in an order that rotates, and the tables quote medians over rounds.
//!
//! The peers, okaywal 0.3 and raft-engine 0.4, are compiled in only with walbench's `peers`
//! feature (they are walbench's dependencies, never the library's); without it the run shows
//! walcrypt's modes alone and says how to build the rest. What a commit means in each system:
//!
//! * walcrypt: `append` per record, then `flush` of the last LSN; `SyncMode::Durable`
//!   fdatasyncs (group commit), `SyncMode::Buffered` writes to the OS page cache. Like an
//!   embedder that checkpoints, and like okaywal under `LogVoid` (which checkpoints each file
//!   as soon as it is full), walcrypt's cells purge the log behind them: each time a commit
//!   has carried the log into a new segment, a checkpoint thread calls
//!   `purge_before(flushed end)`, which keeps the purged files for reuse
//!   (`Config::recycle_segments`, default 4), so new segments are recycled files, not
//!   zero-filled ones.
//! * okaywal: `begin_entry`, one `write_chunk` per record, `commit`, which always fdatasyncs
//!   (group commit, on a cloned file handle, in preallocated and recycled files); it has no
//!   non-durable commit, so its `none` cells are empty.
//! * raft-engine: one `LogBatch` with a `put` per record (the same K keys per thread, so the
//!   memtable stays small) and `Engine::write(batch, sync)`; `sync` makes the write group's
//!   leader fdatasync. Batch compression is off (the data is incompressible anyway).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

use crate::report::median;
use crate::run::BoxError;
use crate::workload::payload;

/// One transaction shape: `count` records of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub size: usize,
    pub count: usize,
}

impl Shape {
    pub fn name(self) -> String {
        let size = if self.size >= 1024 && self.size.is_multiple_of(1024) {
            format!("{}KiB", self.size / 1024)
        } else {
            format!("{}B", self.size)
        };
        format!("{size}x{}", self.count)
    }
}

impl std::str::FromStr for Shape {
    type Err = String;
    fn from_str(s: &str) -> Result<Shape, String> {
        let bad = || format!("`{s}` is not SIZExCOUNT (bytes x records, e.g. 100x5 or 8192x1)");
        let (size, count) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let size: usize = size.trim().parse().map_err(|_| bad())?;
        let count: usize = count.trim().parse().map_err(|_| bad())?;
        if !(1..=(1 << 20)).contains(&size) || !(1..=1000).contains(&count) {
            return Err(format!(
                "`{s}`: records of 1 B to 1 MiB, 1 to 1000 per transaction"
            ));
        }
        Ok(Shape { size, count })
    }
}

/// A system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    Walcrypt(Mode),
    Okaywal,
    RaftEngine,
}

impl System {
    pub fn name(self) -> String {
        match self {
            System::Walcrypt(mode) => format!("walcrypt-{}", mode.name()),
            System::Okaywal => "okaywal".into(),
            System::RaftEngine => "raft-engine".into(),
        }
    }

    /// The systems this build can run: walcrypt's `modes`, then the peers if compiled in.
    pub fn available(modes: &[Mode]) -> Vec<System> {
        let mut all: Vec<System> = modes.iter().map(|&m| System::Walcrypt(m)).collect();
        if cfg!(feature = "peers") {
            all.extend([System::Okaywal, System::RaftEngine]);
        }
        all
    }

    /// Whether the system has a commit of this durability.
    fn supports(self, durable: bool) -> bool {
        durable || self != System::Okaywal
    }
}

/// A log that commits transactions of several records.
trait Store: Sync {
    fn commit(&self, thread: usize, records: &[&[u8]]) -> Result<(), BoxError>;
}

/// walcrypt with the embedder's checkpoint that okaywal's `LogVoid` stands for: each time a
/// commit has carried the log into a new segment, a checkpoint thread purges every segment
/// before the flushed end (`purge_before`), so purged files return to the pool and new
/// segments reuse them, as okaywal recycles its files. The committing thread only compares two
/// numbers and, once per segment, wakes the checkpoint thread.
struct WalcryptStore {
    wal: Arc<Wal>,
    /// The segment (its index) the last checkpoint request was made from.
    checkpointed: AtomicU64,
    segment_size: u64,
    wake: Option<mpsc::Sender<Lsn>>,
    checkpointer: Option<std::thread::JoinHandle<Result<(), walcrypt::Error>>>,
}

impl WalcryptStore {
    fn new(wal: Wal) -> Result<WalcryptStore, BoxError> {
        let wal = Arc::new(wal);
        let (wake, asked) = mpsc::channel::<Lsn>();
        let checkpointing = wal.clone();
        let checkpointer = std::thread::Builder::new()
            .name("walbench-checkpoint".into())
            .spawn(move || {
                while let Ok(mut lsn) = asked.recv() {
                    // Requests that piled up while a purge ran: the newest covers them all.
                    while let Ok(newer) = asked.try_recv() {
                        lsn = newer;
                    }
                    checkpointing.purge_before(lsn)?;
                }
                Ok(())
            })?;
        Ok(WalcryptStore {
            segment_size: wal.geometry().segment_size,
            wal,
            checkpointed: AtomicU64::new(0),
            wake: Some(wake),
            checkpointer: Some(checkpointer),
        })
    }
}

impl Store for WalcryptStore {
    fn commit(&self, _thread: usize, records: &[&[u8]]) -> Result<(), BoxError> {
        let mut last = Lsn::default();
        for record in records {
            last = self.wal.append(1, record)?;
        }
        self.wal.flush(last)?;
        let segment = u64::from(last) / self.segment_size;
        let before = self.checkpointed.load(Ordering::Relaxed);
        if segment > before
            && self
                .checkpointed
                .compare_exchange(before, segment, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            && let Some(wake) = &self.wake
        {
            let _ = wake.send(self.wal.flushed_lsn());
        }
        Ok(())
    }
}

impl Drop for WalcryptStore {
    fn drop(&mut self) {
        self.wake = None;
        if let Some(thread) = self.checkpointer.take() {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("walbench: checkpoint (purge_before) failed: {e}"),
                Err(_) => eprintln!("walbench: the checkpoint thread panicked"),
            }
        }
    }
}

#[cfg(feature = "peers")]
mod peer_stores {
    use super::*;

    pub struct OkaywalStore(pub okaywal::WriteAheadLog);

    impl Store for OkaywalStore {
        fn commit(&self, _thread: usize, records: &[&[u8]]) -> Result<(), BoxError> {
            let mut entry = self.0.begin_entry()?;
            for record in records {
                entry.write_chunk(record)?;
            }
            entry.commit()?;
            Ok(())
        }
    }

    pub struct RaftEngineStore {
        pub engine: raft_engine::Engine,
        pub sync: bool,
    }

    impl Store for RaftEngineStore {
        fn commit(&self, thread: usize, records: &[&[u8]]) -> Result<(), BoxError> {
            let mut batch = raft_engine::LogBatch::default();
            for (i, record) in records.iter().enumerate() {
                let key = (i as u32).to_be_bytes().to_vec();
                batch.put(thread as u64 + 1, key, record.to_vec())?;
            }
            self.engine.write(&mut batch, self.sync)?;
            Ok(())
        }
    }

    pub fn open_okaywal(dir: &Path) -> Result<Box<dyn Store>, BoxError> {
        let wal = okaywal::WriteAheadLog::recover(dir, okaywal::LogVoid)?;
        Ok(Box::new(OkaywalStore(wal)))
    }

    pub fn open_raft_engine(dir: &Path, durable: bool) -> Result<Box<dyn Store>, BoxError> {
        let config = raft_engine::Config {
            dir: dir.to_string_lossy().into_owned(),
            batch_compression_threshold: raft_engine::ReadableSize(0),
            ..Default::default()
        };
        let engine = raft_engine::Engine::open(config)?;
        Ok(Box::new(RaftEngineStore {
            engine,
            sync: durable,
        }))
    }
}

fn open(spec: &PeerSpec) -> Result<Box<dyn Store>, BoxError> {
    let (dir, keys, durable) = (spec.dir, spec.keys, spec.durable);
    match spec.system {
        System::Walcrypt(mode) => {
            let sync = if durable {
                SyncMode::Durable
            } else {
                SyncMode::Buffered
            };
            let mut config = Config::new(mode).keys(keys.clone()).sync(sync);
            if let Some(bytes) = spec.segment_bytes {
                config = config.segment_size(bytes);
            }
            Ok(Box::new(WalcryptStore::new(Wal::open(dir, config)?)?))
        }
        #[cfg(feature = "peers")]
        System::Okaywal => peer_stores::open_okaywal(dir),
        #[cfg(feature = "peers")]
        System::RaftEngine => peer_stores::open_raft_engine(dir, durable),
        #[cfg(not(feature = "peers"))]
        System::Okaywal | System::RaftEngine => Err(format!(
            "{} is compiled in only with walbench's `peers` feature",
            spec.system.name()
        )
        .into()),
    }
}

/// What one peer cell measured.
#[derive(Debug, Clone)]
pub struct PeerCell {
    pub shape: Shape,
    pub durable: bool,
    pub threads: usize,
    pub system: System,
    pub txn_per_s: f64,
    pub p99_us: f64,
}

pub struct PeerSpec<'a> {
    pub dir: &'a Path,
    pub keys: &'a KeyRing,
    pub system: System,
    pub shape: Shape,
    pub durable: bool,
    pub threads: usize,
    pub duration: Duration,
    /// walcrypt's segment size, when not its default (`--segment-mib`).
    pub segment_bytes: Option<u64>,
}

/// Runs one cell on a fresh log in `spec.dir`; `None` when the system has no such commit.
pub fn run_peer_cell(spec: &PeerSpec) -> Result<Option<PeerCell>, BoxError> {
    if !spec.system.supports(spec.durable) {
        return Ok(None);
    }
    let store = open(spec)?;
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(spec.threads + 1);
    let (elapsed, outcomes) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|t| {
                let (store, stop, barrier) = (&*store, &stop, &barrier);
                let shape = spec.shape;
                s.spawn(move || {
                    let data: Vec<Vec<u8>> = (0..shape.count)
                        .map(|i| payload(0x9e37 + (t * 1000 + i) as u64, shape.size))
                        .collect();
                    let records: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
                    barrier.wait();
                    commit_loop(store, stop, t, &records)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(spec.duration);
        stop.store(true, Ordering::Relaxed);
        let outcomes: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            })
            .collect();
        (start.elapsed().as_secs_f64(), outcomes)
    });
    drop(store);
    let mut txns = 0;
    let mut lats = Vec::new();
    for outcome in outcomes {
        let (n, l) = outcome?;
        txns += n;
        lats.extend(l);
    }
    lats.sort_unstable();
    let p99 = crate::run::percentile(&lats, 0.99) / 1e3;
    Ok(Some(PeerCell {
        shape: spec.shape,
        durable: spec.durable,
        threads: spec.threads,
        system: spec.system,
        txn_per_s: txns as f64 / elapsed,
        p99_us: p99,
    }))
}

fn commit_loop(
    store: &dyn Store,
    stop: &AtomicBool,
    thread: usize,
    records: &[&[u8]],
) -> Result<(u64, Vec<u32>), BoxError> {
    let mut lats = Vec::with_capacity(1 << 16);
    let mut txns = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        store.commit(thread, records)?;
        lats.push(began.elapsed().as_nanos().min(u32::MAX as u128) as u32);
        txns += 1;
    }
    Ok((txns, lats))
}

/// Medians over rounds of one (shape, sync, threads, system).
#[derive(Debug, Clone)]
pub struct PeerSummary {
    pub shape: Shape,
    pub durable: bool,
    pub threads: usize,
    pub system: System,
    pub rounds: usize,
    pub txn_per_s: f64,
    pub p99_us: f64,
}

pub fn summarize(cells: &[PeerCell]) -> Vec<PeerSummary> {
    let mut out: Vec<PeerSummary> = Vec::new();
    for c in cells {
        let same = |r: &PeerSummary| {
            r.shape == c.shape
                && r.durable == c.durable
                && r.threads == c.threads
                && r.system == c.system
        };
        if out.iter().any(same) {
            continue;
        }
        let group: Vec<&PeerCell> = cells
            .iter()
            .filter(|x| {
                x.shape == c.shape
                    && x.durable == c.durable
                    && x.threads == c.threads
                    && x.system == c.system
            })
            .collect();
        out.push(PeerSummary {
            shape: c.shape,
            durable: c.durable,
            threads: c.threads,
            system: c.system,
            rounds: group.len(),
            txn_per_s: median(group.iter().map(|x| x.txn_per_s).collect()),
            p99_us: median(group.iter().map(|x| x.p99_us).collect()),
        });
    }
    out
}

pub fn sync_name(durable: bool) -> &'static str {
    if durable { "data" } else { "none" }
}

/// One row per (shape, sync, threads), one txn/s column per system, and the ratio of each
/// walcrypt mode to the best peer of that row.
pub fn table(rows: &[PeerSummary], systems: &[System]) -> String {
    let peers: Vec<System> = systems
        .iter()
        .copied()
        .filter(|s| !matches!(s, System::Walcrypt(_)))
        .collect();
    let mut out = format!("{:<10} {:<4} {:>3}", "shape", "sync", "thr");
    for s in systems {
        out.push_str(&format!(" {:>20}", s.name()));
    }
    if !peers.is_empty() {
        for s in systems.iter().filter(|s| matches!(s, System::Walcrypt(_))) {
            out.push_str(&format!(" {:>14}", format!("{}/best", short_name(*s))));
        }
    }
    out.push('\n');
    let mut keys: Vec<(Shape, bool, usize)> = Vec::new();
    for r in rows {
        if !keys.contains(&(r.shape, r.durable, r.threads)) {
            keys.push((r.shape, r.durable, r.threads));
        }
    }
    for (shape, durable, threads) in keys {
        let get = |s: System| {
            rows.iter()
                .find(|r| {
                    r.shape == shape
                        && r.durable == durable
                        && r.threads == threads
                        && r.system == s
                })
                .map(|r| r.txn_per_s)
        };
        out.push_str(&format!(
            "{:<10} {:<4} {:>3}",
            shape.name(),
            sync_name(durable),
            threads
        ));
        for &s in systems {
            let v = get(s).map_or("-".into(), |v| format!("{v:.0}"));
            out.push_str(&format!(" {v:>20}"));
        }
        let best_peer = peers.iter().filter_map(|&p| get(p)).fold(0.0f64, f64::max);
        if !peers.is_empty() {
            for &s in systems.iter().filter(|s| matches!(s, System::Walcrypt(_))) {
                let v = match get(s) {
                    Some(v) if best_peer > 0.0 => format!("{:.2}", v / best_peer),
                    _ => "-".into(),
                };
                out.push_str(&format!(" {v:>14}"));
            }
        }
        out.push('\n');
    }
    out
}

fn short_name(s: System) -> String {
    match s {
        System::Walcrypt(mode) => mode.name().to_string(),
        other => other.name(),
    }
}

pub fn csv(rows: &[PeerSummary]) -> String {
    let mut out = String::from(
        "shape,record_bytes,records_per_txn,sync,threads,system,rounds,txn_per_s,p99_us\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{:.1},{:.1}\n",
            r.shape.name(),
            r.shape.size,
            r.shape.count,
            sync_name(r.durable),
            r.threads,
            r.system.name(),
            r.rounds,
            r.txn_per_s,
            r.p99_us
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_name() {
        let s: Shape = "8192x1".parse().unwrap();
        assert_eq!(
            s,
            Shape {
                size: 8192,
                count: 1
            }
        );
        assert_eq!(s.name(), "8KiBx1");
        assert_eq!("100X5".parse::<Shape>().unwrap().name(), "100Bx5");
        for bad in ["100", "x5", "0x5", "100x0", "100x1001", "2000000x1", "ax1"] {
            assert!(bad.parse::<Shape>().is_err(), "{bad}");
        }
    }

    #[test]
    fn okaywal_has_no_non_durable_commit() {
        assert!(System::Okaywal.supports(true));
        assert!(!System::Okaywal.supports(false));
        assert!(System::RaftEngine.supports(false));
    }

    #[test]
    fn table_compares_each_mode_with_the_best_peer() {
        let shape = Shape {
            size: 100,
            count: 5,
        };
        let row = |system, txn_per_s| PeerSummary {
            shape,
            durable: true,
            threads: 1,
            system,
            rounds: 3,
            txn_per_s,
            p99_us: 1.0,
        };
        let systems = [
            System::Walcrypt(Mode::Plaintext),
            System::Okaywal,
            System::RaftEngine,
        ];
        let rows = [
            row(systems[0], 9000.0),
            row(systems[1], 12000.0),
            row(systems[2], 6000.0),
        ];
        let text = table(&rows, &systems);
        let last = text.lines().last().unwrap();
        assert!(last.trim_end().ends_with("0.75"), "{text}");
    }
}
