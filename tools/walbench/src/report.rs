//! Medians over rounds, ratios to plaintext, the stdout tables and the CSV files.

use std::fmt::Write as _;

use walcrypt::Mode;

use crate::lines::Lines;
use crate::run::{Cell, Replay};
use crate::workload::Workload;

/// The median of `xs` (the mean of the middle two for an even count); NaN when empty.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// One (workload, mode, threads) line: medians over rounds.
#[derive(Debug, Clone)]
pub struct Summary {
    pub workload: Workload,
    pub mode: Mode,
    pub threads: usize,
    pub rounds: usize,
    pub txn_per_s: f64,
    pub wal_mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub cpu_us: f64,
    pub insert_ns: f64,
    pub write_ns: f64,
    pub encrypt_ns: f64,
    pub serial_ns: f64,
    /// The ledger of the commit path, per transaction (medians over rounds): fdatasync time
    /// (inside `write_ns`), write-outs, commits per write-out, write-lock acquisitions,
    /// fdatasyncs, page images written, buffer-full write-outs, context switches.
    pub fsync_ns: f64,
    pub write_outs: f64,
    pub write_locks: f64,
    pub commits_per_write_out: f64,
    pub fsyncs: f64,
    pub pages: f64,
    pub full_waits: f64,
    pub vcsw: f64,
    pub ivcsw: f64,
    /// The workers' futex calls and all their system calls per transaction (NaN where the
    /// kernel does not let them be counted: syscalls.rs).
    pub futex_calls: f64,
    pub syscalls: f64,
    /// The shared-line ledger per transaction (medians over rounds; NaN without the feature
    /// `line-ledger`): writes, line transfers, writes to the threads' own lines (lane,
    /// statistics shard) per record, to the lines every appender writes per record,
    /// commit-path writes per write-out, and writes but the own lines' over the budget of 1
    /// per record + 4 per write-out.
    pub line_writes: f64,
    pub line_transfers: f64,
    pub shared_line_writes: f64,
    pub own_writes_per_record: f64,
    pub append_writes_per_record: f64,
    pub commit_writes_per_write_out: f64,
    pub line_budget: f64,
    /// Per line label over all rounds: writes and transfers per transaction, most written
    /// first; empty without the feature.
    pub line_sites: Vec<(&'static str, f64, f64)>,
    /// Per-round ratio to plaintext (same workload, threads and round), median; NaN without
    /// a plaintext cell.
    pub txn_ratio: f64,
    pub cpu_ratio: f64,
    pub insert_ratio: f64,
    pub write_ratio: f64,
}

pub fn summarize(cells: &[Cell]) -> Vec<Summary> {
    let mut keys: Vec<(Workload, Mode, usize)> = Vec::new();
    for c in cells {
        let k = (c.workload, c.mode, c.threads);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let order = |m: Mode| Mode::ALL.iter().position(|x| *x == m).unwrap_or(0);
    let worder = |w: Workload| Workload::ALL.iter().position(|x| *x == w).unwrap_or(0);
    keys.sort_by_key(|&(w, m, t)| (worder(w), t, order(m)));
    keys.into_iter()
        .map(|(w, m, t)| {
            let mine: Vec<&Cell> = cells
                .iter()
                .filter(|c| (c.workload, c.mode, c.threads) == (w, m, t))
                .collect();
            let med = |f: &dyn Fn(&Cell) -> f64| median(mine.iter().map(|c| f(c)).collect());
            let ratio = |f: &dyn Fn(&Cell) -> f64| {
                median(
                    mine.iter()
                        .filter_map(|c| {
                            let base = cells.iter().find(|b| {
                                (b.workload, b.mode, b.threads, b.round)
                                    == (w, Mode::Plaintext, t, c.round)
                            })?;
                            Some(f(c) / f(base))
                        })
                        .collect(),
                )
            };
            Summary {
                workload: w,
                mode: m,
                threads: t,
                rounds: mine.len(),
                txn_per_s: med(&|c| c.txn_per_s()),
                wal_mb_per_s: med(&|c| c.wal_mb_per_s()),
                p50_us: med(&|c| c.lat_p50_us),
                p99_us: med(&|c| c.lat_p99_us),
                user_s: med(&|c| c.cpu.user),
                sys_s: med(&|c| c.cpu.sys),
                cpu_us: med(&|c| c.cpu_us_per_txn()),
                insert_ns: med(&|c| c.insert_ns_per_txn()),
                write_ns: med(&|c| c.write_ns_per_txn()),
                encrypt_ns: med(&|c| c.encrypt_ns_per_txn()),
                serial_ns: med(&|c| c.serial_ns_per_txn()),
                fsync_ns: med(&|c| c.fsync_ns_per_txn()),
                write_outs: med(&|c| c.write_outs_per_txn()),
                write_locks: med(&|c| c.write_locks_per_txn()),
                commits_per_write_out: med(&|c| c.commits_per_write_out()),
                fsyncs: med(&|c| c.fsyncs_per_txn()),
                pages: med(&|c| c.pages_per_txn()),
                full_waits: med(&|c| c.full_waits_per_txn()),
                vcsw: med(&|c| c.voluntary_switches_per_txn()),
                ivcsw: med(&|c| c.involuntary_switches_per_txn()),
                futex_calls: med(&|c| c.futex_calls_per_txn()),
                syscalls: med(&|c| c.syscalls_per_txn()),
                line_writes: med(&|c| c.line_writes_per_txn()),
                line_transfers: med(&|c| c.line_transfers_per_txn()),
                shared_line_writes: med(&|c| c.shared_line_writes_per_txn()),
                own_writes_per_record: med(&|c| c.own_writes_per_record()),
                append_writes_per_record: med(&|c| c.append_writes_per_record()),
                commit_writes_per_write_out: med(&|c| c.commit_writes_per_write_out()),
                line_budget: med(&|c| c.line_budget_ratio()),
                line_sites: sites_per_txn(&mine),
                txn_ratio: ratio(&|c| c.txn_per_s()),
                cpu_ratio: ratio(&|c| c.cpu_us_per_txn()),
                insert_ratio: ratio(&|c| c.insert_ns_per_txn()),
                write_ratio: ratio(&|c| c.write_ns_per_txn()),
            }
        })
        .collect()
}

/// Each line label's writes and transfers per transaction, summed over `cells`' rounds.
fn sites_per_txn(cells: &[&Cell]) -> Vec<(&'static str, f64, f64)> {
    let mut total = Lines::default();
    let mut txns = 0u64;
    for c in cells {
        if let Some(lines) = &c.lines {
            total.add(lines);
            txns += c.txns;
        }
    }
    let txns = txns.max(1) as f64;
    total
        .sites
        .iter()
        .map(|s| (s.label, s.writes as f64 / txns, s.transfers as f64 / txns))
        .collect()
}

/// `x` with `digits` decimals, or `—` when not counted (no feature `line-ledger`) or not
/// defined (no write-out).
fn counted(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "—".into()
    }
}

/// `x` for a CSV field: empty when not counted.
fn csv_counted(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        String::new()
    }
}

fn ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "-".into()
    }
}

pub fn throughput_table(rows: &[Summary]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<5} {:<13} {:>3} {:>9} {:>6} {:>7} {:>8} {:>8} {:>6} {:>6} {:>7} {:>6} {:>8} {:>6} {:>8} {:>6} {:>8}",
        "load",
        "mode",
        "thr",
        "txn/s",
        "x_pt",
        "WAL MB/s",
        "p50 us",
        "p99 us",
        "usr s",
        "sys s",
        "cpu us",
        "x_pt",
        "ins ns",
        "x_pt",
        "wr ns",
        "x_pt",
        "enc ns"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<5} {:<13} {:>3} {:>9.0} {:>6} {:>7.1} {:>8.1} {:>8.1} {:>6.2} {:>6.2} {:>7.2} {:>6} {:>8.0} {:>6} {:>8.0} {:>6} {:>8.0}",
            r.workload.name(),
            r.mode.name(),
            r.threads,
            r.txn_per_s,
            ratio(r.txn_ratio),
            r.wal_mb_per_s,
            r.p50_us,
            r.p99_us,
            r.user_s,
            r.sys_s,
            r.cpu_us,
            ratio(r.cpu_ratio),
            r.insert_ns,
            ratio(r.insert_ratio),
            r.write_ns,
            ratio(r.write_ratio),
            r.encrypt_ns
        );
    }
    s
}

/// The ledger of the commit path: the same rows as [`throughput_table`], per transaction.
/// Serial time (`ser ns`, the model's t_ser, is the median of each round's insert-lock plus
/// write-lock hold, so it differs from the sum of the two medians when rounds disagree;
/// `sync ns` is the fdatasync time, which a Durable commit spends in the sync turn after the
/// write lock), then counts that do not depend on how many cores ran the cell: write-lock
/// acquisitions (write-outs), commits per write-out, fdatasyncs, pages written, buffer-full
/// write-outs, the process's voluntary and involuntary context switches, and the workers'
/// futex calls and system calls.
pub fn ledger_table(rows: &[Summary]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<5} {:<13} {:>3} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7}",
        "load",
        "mode",
        "thr",
        "ins ns",
        "wr ns",
        "sync ns",
        "ser ns",
        "wouts",
        "txn/wo",
        "syncs",
        "pages",
        "full",
        "vcsw",
        "ivcsw",
        "futex",
        "sysc",
        "lw/txn",
        "lx/txn",
        "own/rec",
        "sh/rec",
        "lw/wo",
        "budget"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<5} {:<13} {:>3} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.3} {:>7} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7}",
            r.workload.name(),
            r.mode.name(),
            r.threads,
            r.insert_ns,
            r.write_ns,
            r.fsync_ns,
            r.serial_ns,
            r.write_outs,
            fixed(r.commits_per_write_out, 2),
            r.fsyncs,
            r.pages,
            r.full_waits,
            r.vcsw,
            r.ivcsw,
            counted(r.futex_calls, 3),
            counted(r.syscalls, 2),
            counted(r.line_writes, 2),
            counted(r.line_transfers, 2),
            counted(r.own_writes_per_record, 2),
            counted(r.append_writes_per_record, 2),
            counted(r.commit_writes_per_write_out, 2),
            counted(r.line_budget, 2)
        );
    }
    s
}

/// The shared-line ledger by line label, one row per (workload, mode, threads): each label's
/// writes / transfers per transaction, most written first. Empty without the feature.
pub fn line_sites_table(rows: &[Summary]) -> String {
    let mut s = String::new();
    for r in rows.iter().filter(|r| !r.line_sites.is_empty()) {
        let sites: Vec<String> = r
            .line_sites
            .iter()
            .filter(|(_, w, _)| *w >= 0.005)
            .map(|(label, w, x)| format!("{label} {w:.2}/{x:.2}"))
            .collect();
        let _ = writeln!(
            s,
            "{:<5} {:<13} {:>3}  {}",
            r.workload.name(),
            r.mode.name(),
            r.threads,
            sites.join(", ")
        );
    }
    s
}

/// `x` with `digits` decimals, or `-` when it is not a number (no write-out in the cell).
fn fixed(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "-".into()
    }
}

pub fn throughput_csv(rows: &[Summary]) -> String {
    let mut s = String::from(
        "workload,mode,threads,rounds,txn_per_s,txn_ratio_to_plaintext,wal_mb_per_s,\
         commit_p50_us,commit_p99_us,user_cpu_s,sys_cpu_s,insert_lock_ns_per_txn,\
         insert_ratio_to_plaintext,write_lock_ns_per_txn,write_ratio_to_plaintext,\
         write_lock_encrypt_ns_per_txn,serial_ns_per_txn,cpu_us_per_txn,cpu_ratio_to_plaintext,\
         fsync_ns_per_txn,write_outs_per_txn,commits_per_write_out,\
         write_lock_acquisitions_per_txn,\
         fsyncs_per_txn,pages_written_per_txn,buffer_full_waits_per_txn,\
         voluntary_switches_per_txn,involuntary_switches_per_txn,line_writes_per_txn,\
         line_transfers_per_txn,own_line_writes_per_record,append_line_writes_per_record,\
         commit_line_writes_per_write_out,line_writes_over_budget,futex_calls_per_txn,\
         syscalls_per_txn\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{:.1},{:.4},{:.2},{:.2},{:.2},{:.4},{:.4},{:.1},{:.4},{:.1},{:.4},{:.1},{:.1},{:.3},{:.4},{:.1},{:.5},{:.3},{:.5},{:.5},{:.5},{:.5},{:.5},{:.5},{},{},{},{},{},{},{},{}",
            r.workload.name(),
            r.mode.name(),
            r.threads,
            r.rounds,
            r.txn_per_s,
            r.txn_ratio,
            r.wal_mb_per_s,
            r.p50_us,
            r.p99_us,
            r.user_s,
            r.sys_s,
            r.insert_ns,
            r.insert_ratio,
            r.write_ns,
            r.write_ratio,
            r.encrypt_ns,
            r.serial_ns,
            r.cpu_us,
            r.cpu_ratio,
            r.fsync_ns,
            r.write_outs,
            r.commits_per_write_out,
            r.write_locks,
            r.fsyncs,
            r.pages,
            r.full_waits,
            r.vcsw,
            r.ivcsw,
            csv_counted(r.line_writes, 4),
            csv_counted(r.line_transfers, 4),
            csv_counted(r.own_writes_per_record, 4),
            csv_counted(r.append_writes_per_record, 4),
            csv_counted(r.commit_writes_per_write_out, 4),
            csv_counted(r.line_budget, 4),
            csv_counted(r.futex_calls, 4),
            csv_counted(r.syscalls, 4)
        );
    }
    s
}

/// Every round of every cell, raw, for re-analysis.
pub fn rounds_csv(cells: &[Cell]) -> String {
    let mut s = String::from(
        "workload,mode,threads,round,elapsed_s,txns,commit_p50_us,commit_p99_us,user_cpu_s,\
         sys_cpu_s,appends,payload_bytes,record_bytes,insert_lock_ns,write_lock_acquisitions,\
         write_outs,write_lock_ns,write_lock_encrypt_ns,fsync_ns,fsyncs,pages_written,buffer_full_waits,\
         voluntary_switches,involuntary_switches,line_writes,line_transfers,futex_calls,\
         syscalls\n",
    );
    for c in cells {
        let st = &c.stats;
        let (line_writes, line_transfers) = c.lines.as_ref().map_or_else(
            || (String::new(), String::new()),
            |l| (l.writes.to_string(), l.transfers.to_string()),
        );
        let (futex_calls, syscalls) = c.calls.map_or_else(
            || (String::new(), String::new()),
            |calls| (calls.futex.to_string(), calls.all.to_string()),
        );
        let _ = writeln!(
            s,
            "{},{},{},{},{:.6},{},{:.2},{:.2},{:.4},{:.4},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            c.workload.name(),
            c.mode.name(),
            c.threads,
            c.round,
            c.elapsed,
            c.txns,
            c.lat_p50_us,
            c.lat_p99_us,
            c.cpu.user,
            c.cpu.sys,
            st.appends,
            st.payload_bytes,
            st.record_bytes,
            st.insert_lock_ns,
            st.write_lock_acquisitions,
            st.write_outs,
            st.write_lock_ns,
            st.write_lock_encrypt_ns,
            st.fsync_ns,
            st.fsyncs,
            st.pages_written,
            st.buffer_full_waits,
            c.switches.voluntary,
            c.switches.involuntary,
            line_writes,
            line_transfers,
            futex_calls,
            syscalls
        );
    }
    s
}

/// Every round's shared-line counts per line label (empty but for its header without the
/// feature `line-ledger`).
pub fn lines_csv(cells: &[Cell]) -> String {
    let mut s = String::from("workload,mode,threads,round,txns,label,writes,transfers\n");
    for c in cells {
        for site in c.lines.iter().flat_map(|l| &l.sites) {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{}",
                c.workload.name(),
                c.mode.name(),
                c.threads,
                c.round,
                c.txns,
                site.label,
                site.writes,
                site.transfers
            );
        }
    }
    s
}

/// Replays of one (workload, mode) log with one kind of apply.
#[derive(Debug, Clone)]
pub struct RecoveryRuns {
    pub workload: Workload,
    pub mode: Mode,
    /// Simulated redo per record in microseconds; 0 = decode only (a callback that only
    /// touches the payload).
    pub apply_us: f64,
    pub log_bytes: u64,
    pub runs: Vec<Replay>,
}

/// `none` for decode only, else the simulated redo per record, e.g. `1.0us`.
pub fn apply_label(apply_us: f64) -> String {
    if apply_us > 0.0 {
        format!("{apply_us:.1}us")
    } else {
        "none".into()
    }
}

#[derive(Debug, Clone)]
pub struct RecoverySummary {
    pub workload: Workload,
    pub mode: Mode,
    pub apply_us: f64,
    pub log_mib: f64,
    pub records: u64,
    pub wall_s: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub mb_per_s: f64,
    /// User + system CPU nanoseconds per byte of log, per replay.
    pub cpu_ns_per_byte: f64,
    /// Replays per timed measurement (the figures are means per replay).
    pub replays: u32,
    pub wall_ratio: f64,
    pub user_ratio: f64,
    /// CPU seconds of the calling thread per replay (parsing, checksums, the callback).
    pub caller_s: f64,
    /// CPU seconds of the other threads per replay (the library's read-ahead thread).
    pub ahead_s: f64,
    /// The wall-time ratio the two threads allow when each has a core: the busier thread's
    /// CPU over plaintext's busier thread (same apply and repeat), median over repeats.
    pub bound_ratio: f64,
}

/// Medians per (workload, mode, apply); ratios against the plaintext replay of the same
/// workload, apply and repeat, then the median over repeats.
pub fn summarize_recovery(all: &[RecoveryRuns]) -> Vec<RecoverySummary> {
    all.iter()
        .map(|r| {
            let base = all.iter().find(|b| {
                b.workload == r.workload && b.apply_us == r.apply_us && b.mode == Mode::Plaintext
            });
            let per_run = |f: &dyn Fn(&Replay) -> f64| {
                let Some(base) = base else {
                    return f64::NAN;
                };
                median(
                    r.runs
                        .iter()
                        .zip(&base.runs)
                        .map(|(a, b)| f(a) / f(b))
                        .collect(),
                )
            };
            let busier = |x: &Replay| {
                let caller = x.caller.user + x.caller.sys;
                caller.max(x.cpu.user + x.cpu.sys - caller)
            };
            let wall_s = median(r.runs.iter().map(|x| x.wall).collect());
            let cpu_s = median(r.runs.iter().map(|x| x.cpu.user + x.cpu.sys).collect());
            RecoverySummary {
                workload: r.workload,
                mode: r.mode,
                apply_us: r.apply_us,
                log_mib: r.log_bytes as f64 / (1 << 20) as f64,
                records: r.runs.first().map_or(0, |x| x.records),
                wall_s,
                user_s: median(r.runs.iter().map(|x| x.cpu.user).collect()),
                sys_s: median(r.runs.iter().map(|x| x.cpu.sys).collect()),
                mb_per_s: r.log_bytes as f64 / wall_s / 1e6,
                cpu_ns_per_byte: cpu_s * 1e9 / r.log_bytes.max(1) as f64,
                replays: r.runs.iter().map(|x| x.replays).min().unwrap_or(0),
                wall_ratio: per_run(&|x| x.wall),
                user_ratio: per_run(&|x| x.cpu.user),
                caller_s: median(
                    r.runs
                        .iter()
                        .map(|x| x.caller.user + x.caller.sys)
                        .collect(),
                ),
                ahead_s: median(
                    r.runs
                        .iter()
                        .map(|x| x.cpu.user + x.cpu.sys - x.caller.user - x.caller.sys)
                        .collect(),
                ),
                bound_ratio: per_run(&busier),
            }
        })
        .collect()
}

pub fn recovery_table(rows: &[RecoverySummary]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<5} {:<6} {:<9} {:>7} {:>9} {:>5} {:>8} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7}",
        "load",
        "apply",
        "mode",
        "log MiB",
        "records",
        "reps",
        "wall s",
        "usr s",
        "sys s",
        "MB/s",
        "cpu ns/B",
        "x_wall",
        "x_usr",
        "caller s",
        "ahead s",
        "x_bound"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<5} {:<6} {:<9} {:>7.1} {:>9} {:>5} {:>8.4} {:>7.4} {:>7.4} {:>8.0} {:>8.3} {:>7} {:>7} {:>8.4} {:>7.4} {:>7}",
            r.workload.name(),
            apply_label(r.apply_us),
            r.mode.name(),
            r.log_mib,
            r.records,
            r.replays,
            r.wall_s,
            r.user_s,
            r.sys_s,
            r.mb_per_s,
            r.cpu_ns_per_byte,
            ratio(r.wall_ratio),
            ratio(r.user_ratio),
            r.caller_s,
            r.ahead_s,
            ratio(r.bound_ratio)
        );
    }
    s
}

pub fn recovery_csv(rows: &[RecoverySummary]) -> String {
    let mut s = String::from(
        "workload,apply,apply_us_per_record,mode,log_mib,records,wall_s,user_cpu_s,sys_cpu_s,\
         mb_per_s,cpu_ns_per_byte,replays,wall_ratio_to_plaintext,user_ratio_to_plaintext,\
         caller_cpu_s,read_ahead_cpu_s,two_core_bound_ratio_to_plaintext\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{:.3},{},{:.2},{},{:.5},{:.5},{:.5},{:.1},{:.4},{},{:.4},{:.4},{:.5},{:.5},{:.4}",
            r.workload.name(),
            apply_label(r.apply_us),
            r.apply_us,
            r.mode.name(),
            r.log_mib,
            r.records,
            r.wall_s,
            r.user_s,
            r.sys_s,
            r.mb_per_s,
            r.cpu_ns_per_byte,
            r.replays,
            r.wall_ratio,
            r.user_ratio,
            r.caller_s,
            r.ahead_s,
            r.bound_ratio
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use walcrypt::WalStats;

    use super::*;
    use crate::cpu::{CpuTime, Switches};

    fn cell(mode: Mode, threads: usize, round: usize, txns: u64) -> Cell {
        Cell {
            workload: Workload::Oltp,
            mode,
            threads,
            round,
            elapsed: 1.0,
            txns,
            lat_p50_us: 5.0,
            lat_p99_us: 9.0,
            cpu: CpuTime {
                user: 0.5,
                sys: 0.25,
            },
            switches: Switches {
                voluntary: txns / 2,
                involuntary: txns / 4,
            },
            stats: WalStats {
                appends: txns * 5,
                insert_lock_ns: txns * 200,
                write_lock_acquisitions: txns / 2,
                write_outs: txns / 4,
                write_lock_ns: txns * 3000,
                fsync_ns: txns * 2000,
                fsyncs: txns / 4,
                pages_written: txns / 2,
                buffer_full_waits: txns / 100,
                ..WalStats::default()
            },
            lines: None,
            calls: Some(crate::syscalls::Calls {
                futex: txns * 3 / 2,
                all: txns * 4,
            }),
        }
    }

    #[test]
    fn ledger_is_per_transaction() {
        let cells: Vec<Cell> = (0..3)
            .flat_map(|round| {
                [
                    cell(Mode::Plaintext, 4, round, 1000),
                    cell(Mode::PageLevel, 4, round, 400),
                ]
            })
            .collect();
        let rows = summarize(&cells);
        assert_eq!(rows.len(), 2);
        let r = &rows[0];
        assert_eq!((r.mode, r.rounds), (Mode::Plaintext, 3));
        assert_eq!(r.insert_ns, 200.0);
        assert_eq!(r.write_ns, 3000.0);
        assert_eq!(r.fsync_ns, 2000.0);
        assert_eq!(r.serial_ns, 3200.0);
        assert_eq!(r.write_outs, 0.25);
        assert_eq!(r.commits_per_write_out, 4.0);
        assert_eq!(r.write_locks, 0.5);
        assert_eq!(r.fsyncs, 0.25);
        assert_eq!(r.pages, 0.5);
        assert_eq!(r.full_waits, 0.01);
        assert_eq!((r.vcsw, r.ivcsw), (0.5, 0.25));
        assert_eq!((r.futex_calls, r.syscalls), (1.5, 4.0));

        // The ledger has the throughput table's rows; no write-out prints `-`.
        let table = ledger_table(&rows);
        assert_eq!(
            table.lines().count(),
            throughput_table(&rows).lines().count()
        );
        // Not counted (no feature `line-ledger`): a dash, not zero.
        assert!(table.lines().nth(1).is_some_and(|l| l.ends_with("—")));
        let mut counted_cell = cell(Mode::Plaintext, 2, 0, 1000);
        counted_cell.lines = Some(crate::lines::Lines {
            writes: 9000,
            transfers: 500,
            sites: vec![
                crate::lines::Site {
                    label: "insert",
                    writes: 5000,
                    transfers: 400,
                },
                crate::lines::Site {
                    label: "lane.start",
                    writes: 3000,
                    transfers: 0,
                },
                crate::lines::Site {
                    label: "write",
                    writes: 1000,
                    transfers: 100,
                },
            ],
        });
        let counted_rows = summarize(&[counted_cell]);
        let r = &counted_rows[0];
        assert_eq!((r.line_writes, r.line_transfers), (9.0, 0.5));
        // 5 appends per transaction, 0.25 write-outs.
        assert_eq!(r.own_writes_per_record, 0.6);
        assert_eq!(r.append_writes_per_record, 1.0);
        assert_eq!(r.commit_writes_per_write_out, 4.0);
        assert_eq!(r.line_budget, 6.0 / 6.0);
        assert!(line_sites_table(&counted_rows).contains("insert 5.00/0.40"));
        let mut idle = cell(Mode::Plaintext, 1, 0, 10);
        idle.stats.write_outs = 0;
        assert!(ledger_table(&summarize(&[idle])).contains(" - "));

        // Every CSV line has as many fields as its header.
        for csv in [throughput_csv(&rows), rounds_csv(&cells)] {
            let fields: Vec<usize> = csv.lines().map(|l| l.split(',').count()).collect();
            assert!(fields.iter().all(|&n| n == fields[0]), "{csv}");
        }
    }
}
