//! The scaling model: a prediction from measured critical-section time, not a measurement.
//!
//! Each transaction spends `t_par` outside the WAL locks (engine work, building and sealing
//! records, waiting for nothing) and `t_ser` holding them (insert lock plus write lock, as
//! `WalStats` measures). With `n` clients on `n` cores,
//!
//! ```text
//! X(n) = n / (t_par + n * t_ser)
//! ```
//!
//! which is n / (t_par + t_ser) at one client and tends to the ceiling 1 / t_ser: however
//! many cores, the locks serve one transaction at a time. (The `n * t_ser` term is the
//! pessimistic queueing assumption that a client waits for every other client's critical
//! section; it makes the knee gradual instead of a hard corner.)

use std::fmt::Write as _;

use walcrypt::Mode;

use crate::report::Summary;
use crate::workload::Workload;

#[derive(Debug, Clone)]
pub struct Fit {
    pub workload: Workload,
    pub mode: Mode,
    /// Seconds per transaction outside the locks.
    pub t_par: f64,
    /// Seconds per transaction inside the locks.
    pub t_ser: f64,
    /// Thread counts the two were taken from.
    pub par_from: usize,
    pub ser_from: usize,
}

impl Fit {
    pub fn predict(&self, n: usize) -> f64 {
        n as f64 / (self.t_par + n as f64 * self.t_ser)
    }
    pub fn ceiling(&self) -> f64 {
        1.0 / self.t_ser
    }
}

/// The measured cells of (`w`, `m`), the one with the fewest threads, and the one with the
/// most threads that fit this machine's `cores` (the fewest if none fits); `None` without
/// cells.
fn cells(
    rows: &[Summary],
    w: Workload,
    m: Mode,
    cores: usize,
) -> Option<(Vec<&Summary>, &Summary, &Summary)> {
    let mine: Vec<&Summary> = rows
        .iter()
        .filter(|r| r.workload == w && r.mode == m)
        .collect();
    let first = *mine.iter().min_by_key(|r| r.threads)?;
    let within = mine
        .iter()
        .filter(|r| r.threads <= cores.max(1))
        .max_by_key(|r| r.threads)
        .copied()
        .unwrap_or(first);
    Some((mine, first, within))
}

/// Fits every (workload, mode) with measured cells. `t_par` comes from the smallest thread
/// count (ideally 1: no waiting), `t_ser` from the largest thread count that does not exceed
/// this machine's cores, so lock holders were not preempted by other clients (which would
/// inflate hold times with time spent descheduled).
pub fn fit(rows: &[Summary], cores: usize) -> Vec<Fit> {
    let mut fits = Vec::new();
    for w in Workload::ALL {
        for m in Mode::ALL {
            let Some((_, first, ser)) = cells(rows, w, m, cores) else {
                continue;
            };
            // Per-client time per transaction at the smallest count (valid while it fits the
            // cores), minus that cell's own critical sections.
            let per_client = first.threads as f64 / first.txn_per_s;
            let t_ser = ser.serial_ns * 1e-9;
            let t_par = (per_client - first.serial_ns * 1e-9).max(0.0);
            if t_ser > 0.0 && per_client.is_finite() {
                fits.push(Fit {
                    workload: w,
                    mode: m,
                    t_par,
                    t_ser,
                    par_from: first.threads,
                    ser_from: ser.threads,
                });
            }
        }
    }
    fits
}

/// 1, 2, 4, ... up to `max`, and `max` itself.
pub fn model_points(max: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|n| *n <= max)
        .collect();
    if v.last() != Some(&max) {
        v.push(max);
    }
    v
}

pub fn table(fits: &[Fit], max: usize) -> String {
    let points = model_points(max);
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<5} {:<9} {:>8} {:>8} {:>10}",
        "load", "mode", "t_par us", "t_ser us", "ceiling/s"
    );
    for n in &points {
        let _ = write!(s, " {:>15}", format!("n={n} txn/s x_pt"));
    }
    s.push('\n');
    for f in fits {
        let base = fits
            .iter()
            .find(|b| b.workload == f.workload && b.mode == Mode::Plaintext);
        let _ = write!(
            s,
            "{:<5} {:<9} {:>8.2} {:>8.3} {:>10.0}",
            f.workload.name(),
            f.mode.name(),
            f.t_par * 1e6,
            f.t_ser * 1e6,
            f.ceiling()
        );
        for &n in &points {
            let x = f.predict(n);
            let r = base.map_or(f64::NAN, |b| x / b.predict(n));
            let _ = write!(s, " {:>9.0} {:>5.2}", x, r);
        }
        s.push('\n');
    }
    s
}

pub fn csv(fits: &[Fit], max: usize) -> String {
    let mut s = String::from(
        "workload,mode,t_par_us,t_ser_us,par_from_threads,ser_from_threads,cores,\
         predicted_txn_per_s,ratio_to_plaintext\n",
    );
    for f in fits {
        let base = fits
            .iter()
            .find(|b| b.workload == f.workload && b.mode == Mode::Plaintext);
        for n in model_points(max) {
            let x = f.predict(n);
            let r = base.map_or(f64::NAN, |b| x / b.predict(n));
            let _ = writeln!(
                s,
                "{},{},{:.3},{:.4},{},{},{},{:.1},{:.4}",
                f.workload.name(),
                f.mode.name(),
                f.t_par * 1e6,
                f.t_ser * 1e6,
                f.par_from,
                f.ser_from,
                n,
                x,
                r
            );
        }
    }
    s
}

/// Core counts the projection reaches beyond the measured thread counts.
pub const PROJECTED_CORES: [usize; 4] = [8, 16, 32, 64];

/// The projection of one (workload, mode) to many cores: a model, not a measurement.
///
/// From one measured row (the base: the largest thread count that fits this machine's cores,
/// else the smallest), `t_ser` is the ledger's serial time per transaction (`ser ns`:
/// insert-lock hold plus write-lock hold per transaction, which is the write-out's hold
/// divided by the commits it served, with the fdatasync and any pwrite done under the lock)
/// and `t_par` the rest of the process's CPU per transaction (`cpu us` less `t_ser`). Amdahl's
/// law as throughput (the universal scalability law with no coherency term):
///
/// ```text
/// X(n) = n / (t_par + n * t_ser)
/// ```
///
/// and the same with line transfers as serial time, `t_ser + L * t_line`, `t_line` the
/// assumed cost of one (`--line-ns`): `+lines` with `L` the transfers per transaction counted
/// at the largest measured thread count (on a machine with few cores, fewer than many cores
/// would see: a lower bound), `+all` with `L` every write to a line other threads write too
/// (every write but those to the threads' own lines, at the same thread count: each would move its
/// line; an upper bound).
#[derive(Debug, Clone)]
pub struct Projection {
    pub workload: Workload,
    pub mode: Mode,
    pub base_threads: usize,
    pub t_ser_ns: f64,
    pub t_par_ns: f64,
    /// Line transfers per transaction (NaN when not counted) and the thread count it is from.
    pub transfers: f64,
    pub transfers_from: usize,
    /// Writes to lines other threads write too, per transaction (NaN when not counted), at
    /// `transfers_from` threads.
    pub shared_writes: f64,
    pub line_ns: f64,
    /// Measured txn/s per thread count.
    pub measured: Vec<(usize, f64)>,
}

impl Projection {
    /// Amdahl: txn/s at `n` cores.
    pub fn amdahl(&self, n: usize) -> f64 {
        let n = n as f64;
        n * 1e9 / (self.t_par_ns + n * self.t_ser_ns)
    }

    /// Amdahl with each counted line transfer as `line_ns` of serial time; NaN when not
    /// counted.
    pub fn with_lines(&self, n: usize) -> f64 {
        self.with_transfers(n, self.transfers)
    }

    /// Amdahl with every write to a line other threads write as a transfer; NaN when not
    /// counted.
    pub fn with_all_lines(&self, n: usize) -> f64 {
        self.with_transfers(n, self.shared_writes)
    }

    fn with_transfers(&self, n: usize, transfers: f64) -> f64 {
        let n = n as f64;
        let t_ser = self.t_ser_ns + transfers * self.line_ns;
        n * 1e9 / (self.t_par_ns + n * t_ser)
    }

    fn measured_at(&self, n: usize) -> Option<f64> {
        self.measured.iter().find(|(t, _)| *t == n).map(|(_, x)| *x)
    }
}

/// One projection per (workload, mode) with measured rows.
pub fn project(rows: &[Summary], cores: usize, line_ns: f64) -> Vec<Projection> {
    let mut out = Vec::new();
    for w in Workload::ALL {
        for m in Mode::ALL {
            let Some((mine, _, base)) = cells(rows, w, m, cores) else {
                continue;
            };
            let Some(largest) = mine.iter().max_by_key(|r| r.threads) else {
                continue;
            };
            let t_ser_ns = base.serial_ns;
            out.push(Projection {
                workload: w,
                mode: m,
                base_threads: base.threads,
                t_ser_ns,
                t_par_ns: (base.cpu_us * 1e3 - t_ser_ns).max(0.0),
                transfers: largest.line_transfers,
                transfers_from: largest.threads,
                shared_writes: largest.shared_line_writes,
                line_ns,
                measured: mine.iter().map(|r| (r.threads, r.txn_per_s)).collect(),
            });
        }
    }
    out
}

/// The measured thread counts and [`PROJECTED_CORES`], ascending.
fn columns(projections: &[Projection]) -> Vec<usize> {
    let mut ns: Vec<usize> = projections
        .iter()
        .flat_map(|p| p.measured.iter().map(|(t, _)| *t))
        .chain(PROJECTED_CORES)
        .collect();
    ns.sort_unstable();
    ns.dedup();
    ns
}

fn thousands(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}k", x / 1e3)
    } else {
        "—".into()
    }
}

pub fn projection_table(projections: &[Projection]) -> String {
    let ns = columns(projections);
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<5} {:<13} {:<8} {:>4} {:>8} {:>9} {:>8}",
        "load", "mode", "row", "base", "t_ser ns", "t_par ns", "L*t_line"
    );
    for n in &ns {
        let _ = write!(s, " {:>8}", format!("n={n}"));
    }
    s.push('\n');
    for p in projections {
        let lead = |row: &str| format!("{:<5} {:<13} {:<8}", p.workload.name(), p.mode.name(), row);
        let _ = write!(
            s,
            "{} {:>4} {:>8} {:>9} {:>8}",
            lead("measured"),
            "",
            "",
            "",
            ""
        );
        for &n in &ns {
            let _ = write!(s, " {:>8}", p.measured_at(n).map_or("·".into(), thousands));
        }
        s.push('\n');
        let _ = write!(
            s,
            "{} {:>4} {:>8.0} {:>9.0} {:>8}",
            lead("amdahl"),
            p.base_threads,
            p.t_ser_ns,
            p.t_par_ns,
            ""
        );
        for &n in &ns {
            let _ = write!(s, " {:>8}", thousands(p.amdahl(n)));
        }
        s.push('\n');
        for (row, transfers) in [("+lines", p.transfers), ("+all", p.shared_writes)] {
            let extra = transfers * p.line_ns;
            let _ = write!(
                s,
                "{} {:>4} {:>8.0} {:>9.0} {:>8}",
                lead(row),
                p.base_threads,
                p.t_ser_ns,
                p.t_par_ns,
                if extra.is_finite() {
                    format!("{extra:.0}")
                } else {
                    "—".into()
                }
            );
            for &n in &ns {
                let _ = write!(s, " {:>8}", thousands(p.with_transfers(n, transfers)));
            }
            s.push('\n');
        }
    }
    s
}

pub fn projection_csv(projections: &[Projection]) -> String {
    let mut s = String::from(
        "workload,mode,base_threads,t_ser_ns,t_par_ns,line_transfers_per_txn,\
         line_transfers_from_threads,shared_line_writes_per_txn,line_ns,cores,\
         measured_txn_per_s,amdahl_txn_per_s,with_lines_txn_per_s,with_all_lines_txn_per_s\n",
    );
    let field = |x: f64| {
        if x.is_finite() {
            format!("{x:.1}")
        } else {
            String::new()
        }
    };
    for p in projections {
        for n in columns(std::slice::from_ref(p)) {
            let _ = writeln!(
                s,
                "{},{},{},{:.1},{:.1},{},{},{},{:.1},{},{},{},{},{}",
                p.workload.name(),
                p.mode.name(),
                p.base_threads,
                p.t_ser_ns,
                p.t_par_ns,
                if p.transfers.is_finite() {
                    format!("{:.4}", p.transfers)
                } else {
                    String::new()
                },
                p.transfers_from,
                field(p.shared_writes),
                p.line_ns,
                n,
                p.measured_at(n).map_or(String::new(), field),
                field(p.amdahl(n)),
                field(p.with_lines(n)),
                field(p.with_all_lines(n))
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_is_linear_then_capped() {
        let f = Fit {
            workload: Workload::Oltp,
            mode: Mode::Plaintext,
            t_par: 10e-6,
            t_ser: 1e-6,
            par_from: 1,
            ser_from: 2,
        };
        assert!((f.predict(1) - 1.0 / 11e-6).abs() < 1.0);
        assert!(f.predict(1000) < f.ceiling());
        assert!(f.predict(1000) > 0.9 * f.ceiling());
        assert_eq!(model_points(32), vec![1, 2, 4, 8, 16, 32]);
        assert_eq!(model_points(24), vec![1, 2, 4, 8, 16, 24]);
    }

    #[test]
    fn the_projection_is_amdahl_and_line_transfers_lower_it() {
        let p = Projection {
            workload: Workload::Oltp,
            mode: Mode::Plaintext,
            base_threads: 1,
            t_ser_ns: 200.0,
            t_par_ns: 9800.0,
            transfers: 2.0,
            transfers_from: 16,
            shared_writes: 4.0,
            line_ns: 100.0,
            measured: vec![(1, 100e3)],
        };
        assert!((p.amdahl(1) - 100e3).abs() < 1e-6);
        // 64 cores: 64 / (9.8 us + 64 * 0.2 us).
        assert!((p.amdahl(64) - 64e9 / (9800.0 + 64.0 * 200.0)).abs() < 1e-6);
        assert!(p.with_lines(64) < p.amdahl(64));
        assert!((p.with_lines(64) - 64e9 / (9800.0 + 64.0 * 400.0)).abs() < 1e-6);
        assert!(p.with_all_lines(64) < p.with_lines(64));
        let table = projection_table(std::slice::from_ref(&p));
        assert!(table.contains("n=64") && table.contains("100.0k"));
        let uncounted = Projection {
            transfers: f64::NAN,
            ..p
        };
        assert!(uncounted.with_lines(8).is_nan());
        assert!(projection_table(&[uncounted]).contains('—'));
    }
}
