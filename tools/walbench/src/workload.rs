//! The three workloads of the study and the simulated engine work around them.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// A transaction shape: the records one transaction appends before it commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Small OLTP writes: four row changes of about 100 B and a commit record.
    Oltp,
    /// COPY-like bulk load: one 32 KiB record and a commit record.
    Bulk,
    /// Full-page writes: an 8 KiB page image with a small header, a small change, a commit.
    Fpw,
}

/// Record kinds used by the workloads (the log does not interpret them).
const KIND_ROW: u8 = 1;
const KIND_COMMIT: u8 = 2;
const KIND_BULK: u8 = 3;
const KIND_FPI: u8 = 4;

const OLTP: &[(u8, usize)] = &[
    (KIND_ROW, 96),
    (KIND_ROW, 112),
    (KIND_ROW, 104),
    (KIND_ROW, 88),
    (KIND_COMMIT, 24),
];
const BULK: &[(u8, usize)] = &[(KIND_BULK, 32 << 10), (KIND_COMMIT, 24)];
const FPW: &[(u8, usize)] = &[
    (KIND_FPI, (8 << 10) + 24),
    (KIND_ROW, 100),
    (KIND_COMMIT, 24),
];

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Oltp, Workload::Bulk, Workload::Fpw];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Oltp => "oltp",
            Workload::Bulk => "bulk",
            Workload::Fpw => "fpw",
        }
    }

    /// (kind, payload length) of each record of one transaction, commit record last.
    pub fn records(self) -> &'static [(u8, usize)] {
        match self {
            Workload::Oltp => OLTP,
            Workload::Bulk => BULK,
            Workload::Fpw => FPW,
        }
    }

    pub fn payload_bytes_per_txn(self) -> usize {
        self.records().iter().map(|(_, len)| len).sum()
    }

    pub fn max_record(self) -> usize {
        self.records()
            .iter()
            .map(|(_, len)| *len)
            .max()
            .unwrap_or(0)
    }
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("unknown workload `{s}` (expected oltp, bulk or fpw)"))
    }
}

/// Payload bytes that look like data (not zeros), different per thread.
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// CPU work standing in for what the engine does per transaction outside the WAL (parsing,
/// executing, touching buffers): a hash loop, calibrated by time so it costs about the same on
/// any machine.
#[derive(Debug, Clone, Copy)]
pub struct EngineWork {
    iters: u64,
}

impl EngineWork {
    /// Calibrates the loop to `micros` of CPU. Uses the fastest of several trials, so a busy
    /// machine makes the work no shorter than asked.
    pub fn calibrate(micros: f64) -> EngineWork {
        if micros <= 0.0 {
            return EngineWork { iters: 0 };
        }
        let probe = EngineWork { iters: 200_000 };
        let best = (0..7)
            .map(|_| {
                let t = Instant::now();
                probe.run(7);
                t.elapsed()
            })
            .min()
            .unwrap_or(Duration::from_millis(1))
            .max(Duration::from_nanos(1));
        let per_us = probe.iters as f64 / (best.as_secs_f64() * 1e6);
        EngineWork {
            iters: (per_us * micros).round().max(1.0) as u64,
        }
    }

    pub fn run(&self, seed: u64) -> u64 {
        let mut x = seed;
        for i in 0..self.iters {
            x = (x ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
            x = black_box(x);
        }
        x
    }

    pub fn iterations(&self) -> u64 {
        self.iters
    }
}

/// Size of the page image that simulated redo writes into.
pub const APPLY_PAGE: usize = 8 << 10;

/// Simulated redo of one replayed record, as crash recovery applies it to its page: the
/// payload is copied into an 8 KiB page image at a cyclic offset (wrapping at the page end;
/// a record larger than the page is copied in page-sized chunks), then `work` runs (the
/// calibrated loop, standing in for locating the page and applying the change).
pub struct RedoApply {
    page: Box<[u8]>,
    offset: usize,
    work: EngineWork,
    salt: u64,
}

impl RedoApply {
    pub fn new(work: EngineWork) -> RedoApply {
        RedoApply {
            page: vec![0u8; APPLY_PAGE].into_boxed_slice(),
            offset: 0,
            work,
            salt: 0x0a11,
        }
    }

    pub fn apply(&mut self, payload: &[u8]) {
        for chunk in payload.chunks(APPLY_PAGE) {
            let first = chunk.len().min(APPLY_PAGE - self.offset);
            let (head, tail) = chunk.split_at(first);
            self.page[self.offset..self.offset + first].copy_from_slice(head);
            self.page[..tail.len()].copy_from_slice(tail);
            self.offset = (self.offset + chunk.len()) % APPLY_PAGE;
        }
        black_box(&self.page);
        self.salt = self.work.run(self.salt ^ payload.len() as u64);
    }

    /// The page image (for tests).
    #[cfg(test)]
    fn page(&self) -> &[u8] {
        &self.page
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redo_copies_into_the_page_cyclically() {
        let mut redo = RedoApply::new(EngineWork::calibrate(0.0));
        let a = payload(APPLY_PAGE - 10, 1);
        redo.apply(&a);
        assert_eq!(&redo.page()[..APPLY_PAGE - 10], &a[..]);
        // Wraps at the page end.
        let b = payload(30, 2);
        redo.apply(&b);
        assert_eq!(&redo.page()[APPLY_PAGE - 10..], &b[..10]);
        assert_eq!(&redo.page()[..20], &b[10..]);
        // Larger than the page: page-sized chunks, the last chunk wins where they overlap.
        let c = payload(2 * APPLY_PAGE + 5, 3);
        redo.apply(&c);
        let last = &c[2 * APPLY_PAGE..];
        assert_eq!(&redo.page()[20..25], last);
        assert_eq!(&redo.page()[25..], &c[APPLY_PAGE + 5..2 * APPLY_PAGE - 20]);
        assert_eq!(redo.offset, 25);
    }
}
