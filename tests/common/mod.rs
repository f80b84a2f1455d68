//! Shared helpers for the reliability tests: a seeded RNG, deterministic payloads, and a
//! fault-injecting [`Storage`] that can fail chosen operations and build crash images that keep
//! only what was made durable.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, Record, SyncMode};

// ---------------------------------------------------------------------------------------------
// Seeds and randomness

/// xorshift64*: tiny, seeded, reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
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

/// A test configuration with small pages and segments so tests roll segments often.
pub fn small_config(mode: Mode, keys: &KeyRing, sync: SyncMode) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(4096)
        .segment_size(64 * 1024)
        .buffer_size(32 * 1024)
        .prepare_segments(false)
}

/// Every record of the log in `dir`, or the first error.
pub fn read_all(dir: &Path, keys: &KeyRing) -> walcrypt::Result<Vec<Record>> {
    let reader = Reader::open(dir, Some(keys.clone()))?;
    reader.records_from(Lsn::default()).collect()
}

/// Copies the regular files of `from` into a fresh `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fault-injecting storage

/// Operations the fault storage counts and can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `StorageFile::write_all_at`.
    Write,
    /// `StorageFile::sync_data`.
    Sync,
    /// `StorageFile::set_len`.
    SetLen,
    /// `Storage::create_new`.
    Create,
    /// `Storage::rename`.
    Rename,
    /// `Storage::sync_dir`.
    SyncDir,
    /// `StorageFile::fill_zeros` (allocating a new segment's blocks).
    FillZeros,
}

/// What an injected fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Fail with this errno, doing nothing.
    Errno(i32),
    /// (Writes only) write the first half of the buffer, then fail with this errno.
    ShortWrite(i32),
}

#[derive(Debug, Clone, Copy)]
struct Fault {
    op: Op,
    /// 1-based count of `op` (since the storage was made) at which the fault fires.
    nth: u64,
    /// Also fail every later `op`.
    sticky: bool,
    effect: Effect,
}

/// How a crash image treats one unsynced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tear {
    /// Writes are never torn, only dropped or kept whole (a device with atomic page writes).
    Whole,
    /// Torn writes keep a prefix of their 512-byte sectors (in-order write-back).
    Prefix,
    /// Torn writes keep any subset of their sectors (a device that reorders sectors).
    AnySectors,
    /// Torn writes keep any subset of their 4 KiB file-system blocks, each whole (a device
    /// with 4 KiB atomic writes, which may tear an 8 KiB page between its blocks either way).
    Blocks4K,
}

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    synced: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Default)]
struct State {
    counts: HashMap<Op, u64>,
    faults: Vec<Fault>,
    injected: u64,
    paths: HashMap<PathBuf, u64>,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
}

impl State {
    /// Counts `op` and returns the fault to apply, if any.
    fn tick(&mut self, op: Op) -> Option<Effect> {
        let n = {
            let c = self.counts.entry(op).or_insert(0);
            *c += 1;
            *c
        };
        let hit = self
            .faults
            .iter()
            .find(|f| f.op == op && (n == f.nth || (f.sticky && n > f.nth)))
            .map(|f| f.effect);
        if hit.is_some() {
            self.injected += 1;
        }
        hit
    }

    fn inode_for(&mut self, path: &Path) -> u64 {
        if let Some(&ino) = self.paths.get(path) {
            return ino;
        }
        // A file made before this storage saw it: what is on disk counts as durable.
        let synced = fs::read(path).unwrap_or_default();
        let ino = self.new_inode(synced);
        self.paths.insert(path.to_path_buf(), ino);
        ino
    }

    fn new_inode(&mut self, synced: Vec<u8>) -> u64 {
        self.next_inode += 1;
        self.inodes.insert(
            self.next_inode,
            Inode {
                synced,
                pending: Vec::new(),
            },
        );
        self.next_inode
    }
}

/// Wraps [`FsStorage`]: every operation reaches the real files, and the storage remembers,
/// per file, the contents last made durable and the writes since, so that
/// [`FaultStorage::crash_image`] can build the directory a power failure might leave.
#[derive(Clone, Default)]
pub struct FaultStorage {
    state: Arc<Mutex<State>>,
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

impl FaultStorage {
    pub fn new() -> FaultStorage {
        FaultStorage::default()
    }

    pub fn arc(&self) -> Arc<dyn Storage> {
        Arc::new(self.clone())
    }

    /// Fails the `nth` `op` (1-based, counted since the storage was made).
    pub fn fail_nth(&self, op: Op, nth: u64, effect: Effect) {
        self.push(op, nth, false, effect)
    }

    /// Fails the `nth` `op` and every one after it.
    pub fn fail_from(&self, op: Op, nth: u64, effect: Effect) {
        self.push(op, nth, true, effect)
    }

    fn push(&self, op: Op, nth: u64, sticky: bool, effect: Effect) {
        self.state.lock().unwrap().faults.push(Fault {
            op,
            nth,
            sticky,
            effect,
        });
    }

    /// Removes every planned fault.
    pub fn heal(&self) {
        self.state.lock().unwrap().faults.clear();
    }

    /// How many `op` calls were made so far.
    pub fn count(&self, op: Op) -> u64 {
        *self.state.lock().unwrap().counts.get(&op).unwrap_or(&0)
    }

    /// How many faults fired so far.
    pub fn injected(&self) -> u64 {
        self.state.lock().unwrap().injected
    }

    /// Writes into `out` (a new directory) the files of `dir` as a power failure now might
    /// leave them: synced contents survive; each write or length change since the last sync
    /// of its file is dropped, kept, or (writes) torn at 512-byte sector boundaries.
    /// Returns how many unsynced operations were dropped or torn.
    pub fn crash_image(&self, dir: &Path, out: &Path, rng: &mut Rng, tear: Tear) -> usize {
        let state = self.state.lock().unwrap();
        fs::create_dir_all(out).unwrap();
        let mut damaged = 0;
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if !entry.file_type().unwrap().is_file() {
                continue;
            }
            let path = entry.path();
            let target = out.join(entry.file_name());
            let Some(inode) = state.paths.get(&path).and_then(|i| state.inodes.get(i)) else {
                fs::copy(&path, &target).unwrap();
                continue;
            };
            let mut image = inode.synced.clone();
            for op in &inode.pending {
                match op {
                    Pending::SetLen(len) => {
                        if rng.chance(50) {
                            image.resize(*len as usize, 0);
                        } else {
                            damaged += 1;
                        }
                    }
                    Pending::Write { offset, data } => {
                        match rng.below(if tear == Tear::Whole { 2 } else { 3 }) {
                            0 => apply_write(&mut image, *offset, data),
                            1 => damaged += 1,
                            _ => {
                                damaged += 1;
                                tear_write(&mut image, *offset, data, rng, tear);
                            }
                        }
                    }
                }
            }
            fs::write(&target, &image).unwrap();
        }
        damaged
    }
}

fn apply_write(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset as usize..end].copy_from_slice(data);
}

/// Applies some of the 512-byte sectors (or 4 KiB blocks, by absolute file offset) that `data`
/// covers.
fn tear_write(image: &mut Vec<u8>, offset: u64, data: &[u8], rng: &mut Rng, tear: Tear) {
    let unit: u64 = if tear == Tear::Blocks4K { 4096 } else { 512 };
    let end = offset + data.len() as u64;
    let mut pieces = Vec::new();
    let mut at = offset;
    while at < end {
        let next = ((at / unit) + 1) * unit;
        let stop = next.min(end);
        pieces.push((at, stop));
        at = stop;
    }
    let keep_prefix = rng.below(pieces.len() as u64 + 1) as usize;
    for (i, (from, to)) in pieces.into_iter().enumerate() {
        let keep = match tear {
            Tear::Whole => true,
            Tear::Prefix => i < keep_prefix,
            Tear::AnySectors | Tear::Blocks4K => rng.chance(50),
        };
        if keep {
            let slice = &data[(from - offset) as usize..(to - offset) as usize];
            apply_write(image, from, slice);
        }
    }
}

struct FaultFile {
    inner: Box<dyn StorageFile>,
    inode: u64,
    state: Arc<Mutex<State>>,
}

impl StorageFile for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.state.lock().unwrap();
        let (data, fail) = match state.tick(Op::Write) {
            None => (buf, None),
            Some(Effect::Errno(e)) => return Err(errno(e)),
            Some(Effect::ShortWrite(e)) => (&buf[..buf.len() / 2], Some(e)),
        };
        self.inner.write_all_at(data, offset)?;
        if let Some(inode) = state.inodes.get_mut(&self.inode) {
            inode.pending.push(Pending::Write {
                offset,
                data: data.to_vec(),
            });
        }
        match fail {
            Some(e) => Err(errno(e)),
            None => Ok(()),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.state.lock().unwrap();
        if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) = state.tick(Op::Sync) {
            // Like Linux after a failed fsync: the dirty pages may be gone; the durable image
            // keeps only what an earlier sync made durable.
            return Err(errno(e));
        }
        self.inner.sync_data()?;
        if let Some(inode) = state.inodes.get_mut(&self.inode) {
            let pending = std::mem::take(&mut inode.pending);
            for op in pending {
                match op {
                    Pending::Write { offset, data } => {
                        apply_write(&mut inode.synced, offset, &data)
                    }
                    Pending::SetLen(len) => inode.synced.resize(len as usize, 0),
                }
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state.lock().unwrap();
        if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) = state.tick(Op::SetLen) {
            return Err(errno(e));
        }
        self.inner.set_len(len)?;
        if let Some(inode) = state.inodes.get_mut(&self.inode) {
            inode.pending.push(Pending::SetLen(len));
        }
        Ok(())
    }

    fn file_len(&self) -> io::Result<u64> {
        self.inner.file_len()
    }

    fn fill_zeros(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut state = self.state.lock().unwrap();
        if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) = state.tick(Op::FillZeros) {
            return Err(errno(e));
        }
        // Zeros over bytes that read as zeros already: nothing for a crash image to tear.
        self.inner.fill_zeros(offset, len)
    }
}

impl Storage for FaultStorage {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage.list(dir)
    }

    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        let inner = FsStorage.open(path, write)?;
        let inode = self.state.lock().unwrap().inode_for(path);
        Ok(Box::new(FaultFile {
            inner,
            inode,
            state: self.state.clone(),
        }))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.state.lock().unwrap();
        if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) = state.tick(Op::Create) {
            return Err(errno(e));
        }
        let inner = FsStorage.create_new(path)?;
        let inode = state.new_inode(Vec::new());
        state.paths.insert(path.to_path_buf(), inode);
        Ok(Box::new(FaultFile {
            inner,
            inode,
            state: self.state.clone(),
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state.lock().unwrap();
        if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) = state.tick(Op::Rename) {
            return Err(errno(e));
        }
        FsStorage.rename(from, to)?;
        let inode = state.inode_for(from);
        state.paths.remove(from);
        state.paths.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        FsStorage.remove(path)?;
        self.state.lock().unwrap().paths.remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) =
            self.state.lock().unwrap().tick(Op::SyncDir)
        {
            return Err(errno(e));
        }
        FsStorage.sync_dir(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(dir)
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}
