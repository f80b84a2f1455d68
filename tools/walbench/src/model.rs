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

/// Fits every (workload, mode) with measured cells. `t_par` comes from the smallest thread
/// count (ideally 1: no waiting), `t_ser` from the largest thread count that does not exceed
/// this machine's cores, so lock holders were not preempted by other clients (which would
/// inflate hold times with time spent descheduled).
pub fn fit(rows: &[Summary], cores: usize) -> Vec<Fit> {
    let mut fits = Vec::new();
    for w in Workload::ALL {
        for m in Mode::ALL {
            let mine: Vec<&Summary> = rows
                .iter()
                .filter(|r| r.workload == w && r.mode == m)
                .collect();
            let Some(first) = mine.iter().min_by_key(|r| r.threads) else {
                continue;
            };
            let ser = mine
                .iter()
                .filter(|r| r.threads <= cores.max(1))
                .max_by_key(|r| r.threads)
                .unwrap_or(first);
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
}
