//! One measured cell (workload x mode x threads x round) and one recovery measurement.

use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use walcrypt::{Compression, Config, KeyRing, Lsn, Mode, SyncMode, Wal, WalStats};

use crate::cpu::{CpuTime, Switches};
use crate::lines::{self, Lines};
use crate::syscalls::{Calls, Counting};
use crate::workload::{EngineWork, RedoApply, Workload};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What one cell measured.
#[derive(Debug, Clone)]
pub struct Cell {
    pub workload: Workload,
    pub mode: Mode,
    pub threads: usize,
    pub round: usize,
    pub elapsed: f64,
    pub txns: u64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub cpu: CpuTime,
    /// Context switches of the whole process during the cell.
    pub switches: Switches,
    pub stats: WalStats,
    /// The workers' shared-line writes and transfers (feature `line-ledger`; `None` without).
    pub lines: Option<Lines>,
    /// The workers' system calls (`None` where the kernel does not let them be counted).
    pub calls: Option<Calls>,
}

impl Cell {
    pub fn txn_per_s(&self) -> f64 {
        self.txns as f64 / self.elapsed
    }
    pub fn wal_mb_per_s(&self) -> f64 {
        self.stats.record_bytes as f64 / self.elapsed / 1e6
    }
    fn per_txn(&self, ns: u64) -> f64 {
        ns as f64 / self.txns.max(1) as f64
    }
    pub fn insert_ns_per_txn(&self) -> f64 {
        self.per_txn(self.stats.insert_lock_ns)
    }
    pub fn write_ns_per_txn(&self) -> f64 {
        self.per_txn(self.stats.write_lock_ns)
    }
    pub fn encrypt_ns_per_txn(&self) -> f64 {
        self.per_txn(self.stats.write_lock_encrypt_ns)
    }
    /// User + system CPU microseconds of the whole process per transaction. On a machine
    /// whose cores the cell saturates, txn/s is cores ÷ this; it is also what a busy machine's
    /// other load distorts least.
    pub fn cpu_us_per_txn(&self) -> f64 {
        (self.cpu.user + self.cpu.sys) * 1e6 / self.txns.max(1) as f64
    }
    /// Both critical sections: the serial part of a transaction.
    pub fn serial_ns_per_txn(&self) -> f64 {
        self.insert_ns_per_txn() + self.write_ns_per_txn()
    }
    /// fdatasync per transaction: a Durable commit's in the sync turn after the write lock
    /// (not in [`Cell::write_ns_per_txn`]), a switch's, `sync`'s and `close`'s under it.
    pub fn fsync_ns_per_txn(&self) -> f64 {
        self.per_txn(self.stats.fsync_ns)
    }
    /// Write-outs per transaction: ranges reserved and written (a commit's, or an
    /// appender's facing a full buffer, or `sync`'s).
    pub fn write_outs_per_txn(&self) -> f64 {
        self.per_txn(self.stats.write_outs)
    }
    /// Write-lock acquisitions per transaction: the write-outs, plus the flushes that took
    /// the lock to find their record in a write-out already under way.
    pub fn write_locks_per_txn(&self) -> f64 {
        self.per_txn(self.stats.write_lock_acquisitions)
    }
    /// Commits per write-out: how many transactions one write-out served.
    pub fn commits_per_write_out(&self) -> f64 {
        if self.stats.write_outs == 0 {
            return f64::NAN;
        }
        self.txns as f64 / self.stats.write_outs as f64
    }
    pub fn fsyncs_per_txn(&self) -> f64 {
        self.per_txn(self.stats.fsyncs)
    }
    pub fn pages_per_txn(&self) -> f64 {
        self.per_txn(self.stats.pages_written)
    }
    pub fn full_waits_per_txn(&self) -> f64 {
        self.per_txn(self.stats.buffer_full_waits)
    }
    pub fn voluntary_switches_per_txn(&self) -> f64 {
        self.per_txn(self.switches.voluntary)
    }
    pub fn involuntary_switches_per_txn(&self) -> f64 {
        self.per_txn(self.switches.involuntary)
    }
    /// The workers' futex calls per transaction; NaN where they were not counted.
    pub fn futex_calls_per_txn(&self) -> f64 {
        self.calls.map_or(f64::NAN, |c| self.per_txn(c.futex))
    }
    /// The workers' system calls (every kind) per transaction; NaN where not counted.
    pub fn syscalls_per_txn(&self) -> f64 {
        self.calls.map_or(f64::NAN, |c| self.per_txn(c.all))
    }
    /// Shared-line writes per transaction; NaN without the feature `line-ledger`.
    pub fn line_writes_per_txn(&self) -> f64 {
        self.lines
            .as_ref()
            .map_or(f64::NAN, |l| self.per_txn(l.writes))
    }
    /// Line transfers per transaction; NaN without the feature.
    pub fn line_transfers_per_txn(&self) -> f64 {
        self.lines
            .as_ref()
            .map_or(f64::NAN, |l| self.per_txn(l.transfers))
    }
    /// Writes to lines other threads write too (every line but the threads' own) per
    /// transaction; NaN without the feature.
    pub fn shared_line_writes_per_txn(&self) -> f64 {
        self.lines
            .as_ref()
            .map_or(f64::NAN, |l| self.per_txn(l.writes - l.own_writes()))
    }
    /// Writes to lines of the writing thread's own (lane, statistics shard) per record
    /// appended; NaN without the feature.
    pub fn own_writes_per_record(&self) -> f64 {
        self.lines.as_ref().map_or(f64::NAN, |l| {
            l.own_writes() as f64 / self.stats.appends.max(1) as f64
        })
    }
    /// Writes to the lines every appender writes, per record appended; NaN without the
    /// feature.
    pub fn append_writes_per_record(&self) -> f64 {
        self.lines.as_ref().map_or(f64::NAN, |l| {
            l.append_writes() as f64 / self.stats.appends.max(1) as f64
        })
    }
    /// Writes to the commit path's lines per write-out (every flush's writes to them, also
    /// of one that wrote nothing, over the write-outs); NaN without the feature or without a
    /// write-out.
    pub fn commit_writes_per_write_out(&self) -> f64 {
        match &self.lines {
            Some(l) if self.stats.write_outs > 0 => {
                l.commit_writes() as f64 / self.stats.write_outs as f64
            }
            _ => f64::NAN,
        }
    }
    /// Shared-line writes (the threads' own lines left out) over the budget of 1 per record plus 4
    /// per write-out: at most 1 where the budget holds; NaN without the feature.
    pub fn line_budget_ratio(&self) -> f64 {
        self.lines.as_ref().map_or(f64::NAN, |l| {
            let budget = self.stats.appends as f64 + 4.0 * self.stats.write_outs as f64;
            (l.writes - l.own_writes()) as f64 / budget.max(1.0)
        })
    }
}

pub struct CellSpec<'a> {
    pub dir: &'a Path,
    pub keys: &'a KeyRing,
    pub workload: Workload,
    pub mode: Mode,
    pub threads: usize,
    pub round: usize,
    pub sync: SyncMode,
    pub duration: Duration,
    pub work: EngineWork,
    pub compression: Compression,
    /// One `append_batch` per transaction instead of one `append` per record.
    pub batch: bool,
    /// The log's segment size, when not the library's default.
    pub segment_bytes: Option<u64>,
}

/// Runs `threads` transaction loops against a fresh log for `duration`.
pub fn run_cell(spec: &CellSpec) -> Result<Cell, BoxError> {
    let mut config = Config::new(spec.mode)
        .keys(spec.keys.clone())
        .sync(spec.sync)
        .compression(spec.compression);
    if let Some(bytes) = spec.segment_bytes {
        config = config.segment_size(bytes);
    }
    let wal = Wal::open(spec.dir, config)?;
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(spec.threads + 1);
    let records = spec.workload.records();
    let (start, (cpu0, switches0), stats0, outcomes, end, (cpu1, switches1), stats1) =
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..spec.threads)
                .map(|t| {
                    let (wal, stop, barrier) = (&wal, &stop, &barrier);
                    let (work, batch) = (spec.work, spec.batch);
                    s.spawn(move || {
                        let data = spec.workload.data(0x5eed + t as u64);
                        barrier.wait();
                        // Counted from here: nothing this thread did before the cell.
                        let _ = lines::take();
                        let counting = Counting::start();
                        txn_loop(wal, stop, (work, batch), records, &data, t as u64)
                            .map(|(n, l)| (n, l, lines::take(), counting.and_then(Counting::stop)))
                    })
                })
                .collect();
            let stats0 = wal.stats();
            let cpu0 = CpuTime::now();
            let switches0 = Switches::now();
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
            let end = Instant::now();
            let usage1 = (CpuTime::now(), Switches::now());
            (
                start,
                (cpu0, switches0),
                stats0,
                outcomes,
                end,
                usage1,
                wal.stats(),
            )
        });
    wal.close()?;
    let mut txns = 0;
    let mut lats = Vec::new();
    let mut counted: Option<Lines> = None;
    // Counted only if every worker's calls were.
    let mut calls = Some(Calls::default());
    for outcome in outcomes {
        let (n, l, thread_lines, thread_calls) = outcome?;
        match (calls.as_mut(), thread_calls) {
            (Some(sum), Some(mine)) => sum.add(mine),
            _ => calls = None,
        }
        txns += n;
        lats.extend(l);
        if let Some(thread_lines) = thread_lines {
            counted
                .get_or_insert_with(Lines::default)
                .add(&thread_lines);
        }
    }
    lats.sort_unstable();
    Ok(Cell {
        workload: spec.workload,
        mode: spec.mode,
        threads: spec.threads,
        round: spec.round,
        elapsed: (end - start).as_secs_f64(),
        txns,
        lat_p50_us: percentile(&lats, 0.50) / 1e3,
        lat_p99_us: percentile(&lats, 0.99) / 1e3,
        cpu: cpu1.since(cpu0),
        switches: switches1.since(switches0),
        stats: delta(stats1, stats0),
        lines: counted,
        calls,
    })
}

/// One worker: engine work, append the transaction's records (one `append` each, or with
/// `batch` one `append_batch` for all), commit (flush). Returns the transaction count and each
/// commit's latency (first append to flush return) in ns.
fn txn_loop(
    wal: &Wal,
    stop: &AtomicBool,
    (work, batch): (EngineWork, bool),
    records: &[(u8, usize)],
    data: &[u8],
    seed: u64,
) -> Result<(u64, Vec<u32>), BoxError> {
    let mut lats = Vec::with_capacity(1 << 16);
    let mut txns = 0u64;
    let mut salt = seed;
    while !stop.load(Ordering::Relaxed) {
        salt = work.run(salt);
        let began = Instant::now();
        let mut last = Lsn::default();
        if batch {
            let lsns = wal.append_batch(records.iter().map(|&(kind, len)| (kind, &data[..len])))?;
            last = lsns.last().copied().unwrap_or(last);
        } else {
            for &(kind, len) in records {
                last = wal.append(kind, &data[..len])?;
            }
        }
        wal.flush(last)?;
        lats.push(began.elapsed().as_nanos().min(u32::MAX as u128) as u32);
        txns += 1;
    }
    Ok((txns, lats))
}

/// The `q` quantile of `sorted` (0 when empty).
pub(crate) fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i] as f64
}

fn delta(after: WalStats, before: WalStats) -> WalStats {
    WalStats {
        appends: after.appends - before.appends,
        payload_bytes: after.payload_bytes - before.payload_bytes,
        record_bytes: after.record_bytes - before.record_bytes,
        insert_lock_ns: after.insert_lock_ns - before.insert_lock_ns,
        write_lock_acquisitions: after.write_lock_acquisitions - before.write_lock_acquisitions,
        write_outs: after.write_outs - before.write_outs,
        write_lock_ns: after.write_lock_ns - before.write_lock_ns,
        write_lock_encrypt_ns: after.write_lock_encrypt_ns - before.write_lock_encrypt_ns,
        fsync_ns: after.fsync_ns - before.fsync_ns,
        fsyncs: after.fsyncs - before.fsyncs,
        pages_written: after.pages_written - before.pages_written,
        buffer_full_waits: after.buffer_full_waits - before.buffer_full_waits,
    }
}

/// Writes `workload` transactions carrying about `bytes` of payload into a fresh log at `dir`
/// from one thread, commits now and then, and drops the log without closing it (a crash of the
/// process: no checkpoint, nothing but the log). Every mode gets the same records, so replays
/// compare the same work; perrecord's larger headers make its log a little longer. Returns the
/// record bytes (headers and payloads) written.
pub fn write_recovery_log(
    dir: &Path,
    keys: &KeyRing,
    workload: Workload,
    mode: Mode,
    bytes: u64,
    compression: Compression,
    segment_bytes: Option<u64>,
) -> Result<u64, BoxError> {
    let mut config = Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Buffered)
        .compression(compression);
    if let Some(bytes) = segment_bytes {
        config = config.segment_size(bytes);
    }
    let wal = Wal::open(dir, config)?;
    let data = workload.data(0xfeed);
    let mut last = Lsn::default();
    while wal.stats().payload_bytes < bytes {
        for _ in 0..64 {
            for &(kind, len) in workload.records() {
                last = wal.append(kind, &data[..len])?;
            }
        }
        wal.flush(last)?;
    }
    let written = wal.stats().record_bytes;
    drop(wal);
    Ok(written)
}

/// One timed replay of the whole log at `dir` (or the mean of several, see [`replay_for`]).
#[derive(Debug, Clone, Copy)]
pub struct Replay {
    pub wall: f64,
    pub cpu: CpuTime,
    /// CPU of the thread that called `open_and_replay` (parsing, checksums, the callback);
    /// the rest of `cpu` is the library's read-ahead thread.
    pub caller: CpuTime,
    pub records: u64,
    /// How many replays the figures are the mean of.
    pub replays: u32,
}

/// Replays the log at `dir` again and again until `min` wall time has passed; the figures are
/// the means per replay. A small log replays in milliseconds, too short to time on a shared
/// machine; repeating keeps it in the page cache, so this times reading from memory, the
/// checksums, decryption and the apply callback, not the disk.
pub fn replay_for(
    dir: &Path,
    keys: &KeyRing,
    mode: Mode,
    apply: Option<EngineWork>,
    min: Duration,
) -> Result<Replay, BoxError> {
    let mut total = Replay {
        wall: 0.0,
        cpu: CpuTime::default(),
        caller: CpuTime::default(),
        records: 0,
        replays: 0,
    };
    while total.replays == 0 || total.wall < min.as_secs_f64() {
        let r = replay(dir, keys, mode, apply)?;
        total.wall += r.wall;
        total.cpu.user += r.cpu.user;
        total.cpu.sys += r.cpu.sys;
        total.caller.user += r.caller.user;
        total.caller.sys += r.caller.sys;
        total.records = r.records;
        total.replays += 1;
    }
    let n = f64::from(total.replays);
    total.wall /= n;
    total.cpu.user /= n;
    total.cpu.sys /= n;
    total.caller.user /= n;
    total.caller.sys /= n;
    Ok(total)
}

/// Replays the whole log at `dir`. With `apply`, every record goes through simulated redo
/// ([`RedoApply`]) inside the callback; without, the callback only touches the payload
/// (decode only).
pub fn replay(
    dir: &Path,
    keys: &KeyRing,
    mode: Mode,
    apply: Option<EngineWork>,
) -> Result<Replay, BoxError> {
    let config = Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Buffered);
    let mut redo = apply.map(RedoApply::new);
    let mut records = 0u64;
    let cpu0 = CpuTime::now();
    let caller0 = CpuTime::thread_now();
    let started = Instant::now();
    let wal = Wal::open_and_replay(dir, config, Lsn::default(), |record| {
        records += 1;
        match redo.as_mut() {
            Some(redo) => redo.apply(&record.payload),
            None => {
                std::hint::black_box(&record.payload);
            }
        }
        Ok(())
    })?;
    let wall = started.elapsed().as_secs_f64();
    let caller = CpuTime::thread_now().since(caller0);
    let cpu = CpuTime::now().since(cpu0);
    drop(wal);
    Ok(Replay {
        wall,
        cpu,
        caller,
        records,
        replays: 1,
    })
}
