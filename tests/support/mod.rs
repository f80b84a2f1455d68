//! Helpers shared by the scenario tests in this directory: a seeded RNG and deterministic
//! payloads, small configurations, reading a log back, a storage that records what the log
//! does ([`RecordingStorage`]), one that injects faults and builds crash images ([`faults`]),
//! one that delays and reorders writes ([`delay`]),
//! tampering with stored records ([`tamper`]) and with key store files ([`store_bytes`]).
#![allow(dead_code)]

use std::fs;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub mod delay;
pub mod faults;
pub mod hooked;
pub mod large;
pub mod stepping;
pub mod store_bytes;
pub mod tamper;

use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, Record, SyncMode, Wal};

/// Held by each test of the own-process binary (`tests/proc/`) for its whole run, so that no two
/// run at once there: they count threads, fork or spawn children. A test that panicked while
/// holding it does not stop the others.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Seeds and randomness

/// xorshift64*: tiny, seeded, reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64's finaliser: a bijection, so distinct seeds give distinct states (an
        // `| 1` here once made seeds 2k and 2k+1 give the same stream); xorshift needs a
        // state that is not zero.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x9E37_79B9_7F4A_7C15 } else { z })
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// The seed from `var` (decimal or 0x hex) or a fresh one from the clock.
pub fn seed_from_env(var: &str) -> u64 {
    if let Ok(s) = std::env::var(var) {
        let s = s.trim();
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        return parsed.unwrap_or_else(|_| panic!("{var}={s} is not a number"));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    nanos ^ (std::process::id() as u64) << 32
}

/// A number from env `var`, or `default`.
pub fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// Deterministic records

/// The kind and payload of record `id`: 8 bytes of id, then bytes derived from it. Sizes mix
/// small records, page-sized ones and a few that span several 4 KiB pages.
pub fn payload_for(id: u64) -> (u8, Vec<u8>) {
    let mut rng = Rng::new(id.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let len = match rng.below(100) {
        0..=59 => rng.range(0, 200),
        60..=89 => rng.range(200, 2000),
        90..=97 => rng.range(2000, 9000),
        _ => rng.range(9000, 20_000),
    } as usize;
    let mut payload = vec![0u8; 8 + len];
    payload[..8].copy_from_slice(&id.to_le_bytes());
    rng.fill(&mut payload[8..]);
    ((id % 251) as u8, payload)
}

/// The id a payload claims, if the payload is exactly what `payload_for` makes for that id.
pub fn check_payload(kind: u8, payload: &[u8]) -> Result<u64, String> {
    if payload.len() < 8 {
        return Err(format!("payload of {} bytes has no id", payload.len()));
    }
    let id = u64::from_le_bytes(payload[..8].try_into().unwrap());
    let (k, expected) = payload_for(id);
    if k != kind || expected != payload {
        return Err(format!(
            "record claiming id {id} is altered (kind {kind} vs {k}, {} vs {} bytes)",
            payload.len(),
            expected.len()
        ));
    }
    Ok(id)
}

/// 4 KiB pages and 64 KiB segments, none prepared ahead (so the storage sees every operation
/// in the appending order): the reliability scenarios roll segments often, with records that
/// span pages.
pub fn config_4k_pages(mode: Mode, keys: &KeyRing, sync: SyncMode) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(4096)
        .segment_size(64 * 1024)
        .buffer_size(32 * 1024)
        .prepare_segments(false)
}

/// Every record of the log in `dir`, or the first error.
pub fn try_read_records(dir: &Path, keys: &KeyRing) -> walcrypt::Result<Vec<Record>> {
    let reader = Reader::open(dir, Some(keys.clone()))?;
    reader.records_from(Lsn::default()).collect()
}

/// 512-byte pages and 4 KiB segments, durable flushes: tests cross many page and segment
/// boundaries quickly.
pub fn small_config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .page_size(512)
        .segment_size(8 * 512)
        .buffer_size(8 * 512)
        .sync(SyncMode::Durable)
}

/// The crash scenarios' log: pages of `page` bytes, 8-page segments, a 4-page write buffer and
/// no segment prepared ahead, so a few hundred records span many pages, segments and
/// write-outs, and segments are made where the test appends.
pub fn crash_config(mode: Mode, keys: &KeyRing, sync: SyncMode, page: u64) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(page)
        .segment_size(8 * page)
        .buffer_size(4 * page as usize)
        .prepare_segments(false)
}

/// A Durable log of [`small_config`] that keeps up to four purged segment files for reuse
/// (preparation off, so reuse happens where the test appends), and every payload appended to
/// it by LSN: 150-byte payloads, one seed each.
pub struct RecyclingLog {
    pub wal: Wal,
    pub written: std::collections::HashMap<Lsn, Vec<u8>>,
    next_seed: u64,
}

impl RecyclingLog {
    pub fn open(dir: &Path, mode: Mode, keys: &KeyRing) -> RecyclingLog {
        let config = small_config(mode, keys)
            .prepare_segments(false)
            .recycle_segments(4);
        RecyclingLog {
            wal: Wal::open(dir, config).expect("open log"),
            written: std::collections::HashMap::new(),
            next_seed: 0,
        }
    }

    /// Appends and flushes records until the log ends at or past `to`.
    pub fn append_to(&mut self, to: u64) {
        while u64::from(self.wal.end_lsn()) < to {
            let p = payload(self.next_seed, 150);
            let lsn = self.wal.append(1, &p).expect("append");
            self.wal.flush(lsn).expect("flush");
            self.written.insert(lsn, p);
            self.next_seed += 1;
        }
    }
}

/// A payload of `len` bytes drawn from [`Rng`] seeded with `seed`, so a misplaced or altered
/// payload never matches.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    Rng::new(seed).fill(&mut p);
    p
}

/// Every record of the log in `dir`, as (lsn, kind, payload); panics on any read error.
pub fn read_all(dir: &Path, keys: Option<KeyRing>) -> Vec<(Lsn, u8, Vec<u8>)> {
    let reader = Reader::open(dir, keys).expect("open reader");
    reader
        .records_from(Lsn::default())
        .map(|r| {
            let r = r.expect("read record");
            (r.lsn, r.kind, r.payload)
        })
        .collect()
}

/// Appends `(kind, payload)` records, flushing each, and returns their LSNs.
pub fn append_all(wal: &Wal, records: &[(u8, Vec<u8>)]) -> Vec<Lsn> {
    records
        .iter()
        .map(|(kind, p)| {
            let lsn = wal.append(*kind, p).expect("append");
            wal.flush(lsn).expect("flush");
            lsn
        })
        .collect()
}

/// Makes a FIFO at `path` (with the system's `mkfifo`).
pub fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Runs `work` on a thread of its own and returns what it returns, failing the test if it
/// has not returned within 20 s (`what` says what blocked): a call that blocks then fails the
/// test instead of hanging it.
pub fn within_20s<T: Send + 'static>(what: &str, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(work());
    });
    result
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: still blocked after 20 s"))
}

/// Copies the regular files of `from` into `to`, creating `to` if needed.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create copy directory");
    for entry in fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        if entry.file_type().expect("file type").is_file() {
            fs::copy(entry.path(), to.join(entry.file_name())).expect("copy file");
        }
    }
}

/// Paths of the segment files in `dir`, oldest first.
pub fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    files.sort();
    files
}

/// What a [`RecordingStorage`] saw: the bytes of every write, how many bytes were read, and
/// which files were fdatasync'ed.
#[derive(Default)]
pub struct Recorder {
    pub writes: Mutex<Vec<(u64, Vec<u8>)>>,
    pub bytes_read: AtomicU64,
    pub synced: Mutex<Vec<std::path::PathBuf>>,
}

impl hooked::Hooks for Recorder {
    fn read(&self, _path: &Path, n: usize) {
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
    }
    fn write(&self, _path: &Path, offset: u64, buf: &[u8]) {
        self.writes.lock().unwrap().push((offset, buf.to_vec()));
    }
    fn syncing(&self, path: &Path) {
        self.synced.lock().unwrap().push(path.to_path_buf());
    }
}

/// The real file system, watched by a [`Recorder`]: `RecordingStorage(recorder)`.
#[allow(unused_imports)] // not every test uses it
pub use hooked::Hooked as RecordingStorage;

/// The problem of a sealed-file error; panics on any other error.
pub fn sealed_problem(err: walcrypt::Error) -> walcrypt::SealedFileProblem {
    match err {
        walcrypt::Error::SealedFile { problem, .. } => problem,
        other => panic!("not a sealed-file error: {other}"),
    }
}

/// The key ids in the key store file at `path`, read by a fresh handle.
pub fn key_ids_on_disk(
    path: &Path,
    provider: &std::sync::Arc<dyn walcrypt::KeyProvider>,
) -> Vec<u32> {
    let store = walcrypt::KeyStore::open(path, provider.clone()).unwrap();
    store.keys().iter().map(|k| k.id).collect()
}

/// A Buffered log of 1 KiB pages and 16 KiB segments (a small buffer, so that records reach
/// the files soon) keyed by the key store `store`.
pub fn store_config(mode: Mode, store: &std::sync::Arc<walcrypt::KeyStore>) -> Config {
    Config::new(mode)
        .sync(SyncMode::Buffered)
        .page_size(1024)
        .segment_size(16 * 1024)
        .buffer_size(8 * 1024)
        .key_store(store.clone())
}
