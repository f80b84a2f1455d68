//! A fault-injecting [`Storage`] for the reliability scenarios: it counts operations, fails
//! chosen ones (errors, short writes, torn writes), and builds crash images that keep only
//! what was made durable.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use walcrypt::storage::{FsStorage, Storage, StorageFile};

use super::Rng;

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
    /// `Storage::open` for reading only (a segment header read, a reader).
    OpenRead,
    /// `Storage::list` (a reader or follower listing the segments).
    List,
    /// `Storage::remove` (a purge unlinking a segment or a free file).
    Remove,
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
    /// The directory entries as the last `sync_dir` of their directory left them (files the
    /// storage found on disk count as synced): what [`FaultStorage::crash_image_with_names`]
    /// falls back to.
    synced_paths: HashMap<PathBuf, u64>,
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
        self.synced_paths.insert(path.to_path_buf(), ino);
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

    /// The contents of the file now named `path` as its last fdatasync left them (what a
    /// crash that drops every write since would leave), if the storage knows the file.
    pub fn synced_contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.state.lock().unwrap();
        let inode = state.paths.get(path)?;
        Some(state.inodes.get(inode)?.synced.clone())
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
            fs::write(&target, crash_contents(inode, rng, tear, &mut damaged)).unwrap();
        }
        damaged
    }

    /// [`FaultStorage::crash_image`] that also loses directory entries: each name of `dir`
    /// created, renamed or removed since the last `sync_dir` of `dir` either keeps its change
    /// or reverts to what that sync left (another file's contents, or no file at all), as a
    /// power failure may leave them. Returns how many unsynced operations and entries were
    /// dropped or torn.
    pub fn crash_image_with_names(
        &self,
        dir: &Path,
        out: &Path,
        rng: &mut Rng,
        tear: Tear,
    ) -> usize {
        let state = self.state.lock().unwrap();
        fs::create_dir_all(out).unwrap();
        let mut damaged = 0;
        let mut names: Vec<PathBuf> = state
            .paths
            .keys()
            .chain(state.synced_paths.keys())
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        for path in &names {
            let live = state.paths.get(path);
            let synced = state.synced_paths.get(path);
            let chosen = if live == synced || rng.chance(50) {
                live
            } else {
                damaged += 1;
                synced
            };
            let Some(inode) = chosen.and_then(|i| state.inodes.get(i)) else {
                continue;
            };
            let target = out.join(path.file_name().unwrap());
            fs::write(&target, crash_contents(inode, rng, tear, &mut damaged)).unwrap();
        }
        // Files the storage never saw (made by other means) are copied as they are.
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_file() && !names.contains(&path) {
                fs::copy(&path, out.join(entry.file_name())).unwrap();
            }
        }
        damaged
    }
}

/// The contents a crash may leave of `inode`: its synced bytes, and each operation since its
/// last sync dropped, kept, or (writes) torn.
fn crash_contents(inode: &Inode, rng: &mut Rng, tear: Tear, damaged: &mut usize) -> Vec<u8> {
    let mut image = inode.synced.clone();
    for op in &inode.pending {
        match op {
            Pending::SetLen(len) => {
                if rng.chance(50) {
                    image.resize(*len as usize, 0);
                } else {
                    *damaged += 1;
                }
            }
            Pending::Write { offset, data } => {
                match rng.below(if tear == Tear::Whole { 2 } else { 3 }) {
                    0 => apply_write(&mut image, *offset, data),
                    1 => *damaged += 1,
                    _ => {
                        *damaged += 1;
                        tear_write(&mut image, *offset, data, rng, tear);
                    }
                }
            }
        }
    }
    image
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
        // Zeros over bytes that read as zeros already (the trait's contract): nothing for a
        // crash image to tear.
        self.inner.fill_zeros(offset, len)
    }
}

impl Storage for FaultStorage {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let fault = self.state.lock().unwrap().tick(Op::List);
        if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) = fault {
            return Err(errno(e));
        }
        FsStorage.list(dir)
    }

    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        if !write {
            let fault = self.state.lock().unwrap().tick(Op::OpenRead);
            if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) = fault {
                return Err(errno(e));
            }
        }
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
        if let Some(Effect::Errno(e) | Effect::ShortWrite(e)) =
            self.state.lock().unwrap().tick(Op::Remove)
        {
            return Err(errno(e));
        }
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
        FsStorage.sync_dir(dir)?;
        let mut state = self.state.lock().unwrap();
        state.synced_paths.retain(|p, _| p.parent() != Some(dir));
        let entries: Vec<(PathBuf, u64)> = state
            .paths
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        state.synced_paths.extend(entries);
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(dir)
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}
