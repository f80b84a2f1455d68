//! Helpers shared by the scenario tests in this directory.
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub mod tamper;

use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

/// A small geometry so that tests cross many page and segment boundaries quickly.
pub fn small_config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .page_size(512)
        .segment_size(8 * 512)
        .buffer_size(8 * 512)
        .sync(SyncMode::Durable)
}

/// A payload whose bytes depend on `seed`, so a misplaced or altered payload never matches.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
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

/// Copies every file of `from` into the (existing) directory `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy file");
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

/// The real file system, watched.
pub struct RecordingStorage(pub Arc<Recorder>);
struct RecordingFile(Box<dyn StorageFile>, Arc<Recorder>, std::path::PathBuf);

impl StorageFile for RecordingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let n = self.0.read_at(buf, offset)?;
        self.1.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.1.writes.lock().unwrap().push((offset, buf.to_vec()));
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.1.synced.lock().unwrap().push(self.2.clone());
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn file_len(&self) -> std::io::Result<u64> {
        self.0.file_len()
    }
}

impl Storage for RecordingStorage {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(RecordingFile(
            FsStorage.open(path, write)?,
            self.0.clone(),
            path.to_path_buf(),
        )))
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(RecordingFile(
            FsStorage.create_new(path)?,
            self.0.clone(),
            path.to_path_buf(),
        )))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn lock_dir(&self, dir: &Path) -> std::io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}
