//! Medians over rounds, ratios to plaintext, the stdout tables and the CSV files.

use std::fmt::Write as _;

use walcrypt::Mode;

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
                txn_ratio: ratio(&|c| c.txn_per_s()),
                cpu_ratio: ratio(&|c| c.cpu_us_per_txn()),
                insert_ratio: ratio(&|c| c.insert_ns_per_txn()),
                write_ratio: ratio(&|c| c.write_ns_per_txn()),
            }
        })
        .collect()
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

pub fn throughput_csv(rows: &[Summary]) -> String {
    let mut s = String::from(
        "workload,mode,threads,rounds,txn_per_s,txn_ratio_to_plaintext,wal_mb_per_s,\
         commit_p50_us,commit_p99_us,user_cpu_s,sys_cpu_s,insert_lock_ns_per_txn,\
         insert_ratio_to_plaintext,write_lock_ns_per_txn,write_ratio_to_plaintext,\
         write_lock_encrypt_ns_per_txn,serial_ns_per_txn,cpu_us_per_txn,cpu_ratio_to_plaintext\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{:.1},{:.4},{:.2},{:.2},{:.2},{:.4},{:.4},{:.1},{:.4},{:.1},{:.4},{:.1},{:.1},{:.3},{:.4}",
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
            r.cpu_ratio
        );
    }
    s
}

/// Every round of every cell, raw, for re-analysis.
pub fn rounds_csv(cells: &[Cell]) -> String {
    let mut s = String::from(
        "workload,mode,threads,round,elapsed_s,txns,commit_p50_us,commit_p99_us,user_cpu_s,\
         sys_cpu_s,appends,payload_bytes,record_bytes,insert_lock_ns,write_lock_acquisitions,\
         write_lock_ns,write_lock_encrypt_ns,fsync_ns,fsyncs,pages_written,buffer_full_waits\n",
    );
    for c in cells {
        let st = &c.stats;
        let _ = writeln!(
            s,
            "{},{},{},{},{:.6},{},{:.2},{:.2},{:.4},{:.4},{},{},{},{},{},{},{},{},{},{},{}",
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
            st.write_lock_ns,
            st.write_lock_encrypt_ns,
            st.fsync_ns,
            st.fsyncs,
            st.pages_written,
            st.buffer_full_waits
        );
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
