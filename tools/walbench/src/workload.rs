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

    /// The bytes one thread's records are cut from (each record takes a prefix): random bytes,
    /// except for fpw, whose page images compress like real heap pages ([`page_image`]).
    pub fn data(self, seed: u64) -> Vec<u8> {
        match self {
            Workload::Fpw => page_image(self.max_record(), seed),
            _ => payload(seed, self.max_record()),
        }
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

/// Payload bytes that look like data (not zeros), different per thread. Arguments in the
/// order of the library tests' `payload(seed, len)`.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
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

/// A page image shaped like a PostgreSQL heap page at about 90% fill: a 24-byte page header,
/// 4-byte line pointers, a zeroed hole, and tuples packed from the end. Each tuple has a
/// 23-byte header with increasing transaction ids, an int4 key counting up, an int8 amount
/// drawn from a small range, a name from a 16-word dictionary plus a number, an int8
/// timestamp advancing by small random steps, and 16 random bytes (a hash or UUID column),
/// so the page has repeating structure and some entropy, as real pages do. LZ4 shrinks
/// these to roughly half; see docs/BENCHMARKS.md.
pub fn page_image(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
    ];
    let mut x = seed | 1;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut page = vec![0u8; len];
    let fill_to = len / 10;
    let mut upper = len;
    let mut lower = 24;
    let xid = (rand() % 1_000_000) as u32;
    let mut ts = 700_000_000_000_000u64 + rand() % 1_000_000;
    let mut n = 0u32;
    loop {
        let mut tuple = Vec::with_capacity(96);
        tuple.extend_from_slice(&(xid + n / 4).to_le_bytes()); // xmin
        tuple.extend_from_slice(&0u32.to_le_bytes()); // xmax
        tuple.extend_from_slice(&0u32.to_le_bytes()); // cid
        tuple.extend_from_slice(&[0, 0, 0, 7, 0, n as u8 + 1]); // ctid
        tuple.extend_from_slice(&[5, 0, 2, 9, 24]); // natts, infomask, hoff
        tuple.push(0); // padding to 24
        tuple.extend_from_slice(&(seed as u32).wrapping_add(n).to_le_bytes());
        tuple.extend_from_slice(&[0; 4]);
        tuple.extend_from_slice(&(rand() % 100_000).to_le_bytes());
        let word = WORDS[(rand() % 16) as usize];
        let name = format!("{word}-{}", rand() % 1000);
        tuple.push((name.len() as u8) << 1 | 1);
        tuple.extend_from_slice(name.as_bytes());
        while tuple.len() % 8 != 0 {
            tuple.push(0);
        }
        ts += rand() % 5_000_000;
        tuple.extend_from_slice(&ts.to_le_bytes());
        tuple.extend_from_slice(&rand().to_le_bytes());
        tuple.extend_from_slice(&rand().to_le_bytes());
        if upper < tuple.len() + fill_to || upper - tuple.len() < lower + 4 + fill_to {
            break;
        }
        upper -= tuple.len();
        page[upper..upper + tuple.len()].copy_from_slice(&tuple);
        let lp = (upper as u32) | 1 << 15 | (tuple.len() as u32) << 17;
        page[lower..lower + 4].copy_from_slice(&lp.to_le_bytes());
        lower += 4;
        n += 1;
    }
    page[..8].copy_from_slice(&rand().to_le_bytes()); // page LSN
    page[12..14].copy_from_slice(&(lower as u16).to_le_bytes());
    page[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
    page[16..18].copy_from_slice(&(len as u16).to_le_bytes());
    page[18..20].copy_from_slice(&0x2004u16.to_le_bytes());
    page
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
        let a = payload(1, APPLY_PAGE - 10);
        redo.apply(&a);
        assert_eq!(&redo.page()[..APPLY_PAGE - 10], &a[..]);
        // Wraps at the page end.
        let b = payload(2, 30);
        redo.apply(&b);
        assert_eq!(&redo.page()[APPLY_PAGE - 10..], &b[..10]);
        assert_eq!(&redo.page()[..20], &b[10..]);
        // Larger than the page: page-sized chunks, the last chunk wins where they overlap.
        let c = payload(3, 2 * APPLY_PAGE + 5);
        redo.apply(&c);
        let last = &c[2 * APPLY_PAGE..];
        assert_eq!(&redo.page()[20..25], last);
        assert_eq!(&redo.page()[25..], &c[APPLY_PAGE + 5..2 * APPLY_PAGE - 20]);
        assert_eq!(redo.offset, 25);
    }

    #[test]
    fn page_images_compress_like_real_pages_and_random_data_does_not() {
        use walcrypt::{Compression, Config, Mode, SyncMode, Wal};
        let ratio = |data: &[u8]| {
            let dir = tempfile::tempdir().unwrap();
            let config = Config::new(Mode::Plaintext)
                .sync(SyncMode::Buffered)
                .compression(Compression::Lz4 { min_len: 1024 });
            let wal = Wal::open(dir.path(), config).unwrap();
            wal.append(1, data).unwrap();
            let st = wal.stats();
            st.record_bytes as f64 / st.payload_bytes as f64
        };
        let page = Workload::Fpw.data(7);
        assert_eq!(page.len(), Workload::Fpw.max_record());
        let zeros = page.iter().filter(|b| **b == 0).count() as f64 / page.len() as f64;
        assert!(
            zeros < 0.5,
            "mostly tuples, not a hole: {zeros:.2} zero bytes"
        );
        let r = ratio(&page);
        assert!((0.3..0.8).contains(&r), "page image compresses to {r:.2}");
        assert!(
            ratio(&payload(7, 8192)) > 1.0,
            "random bytes stay uncompressed"
        );
    }
}
