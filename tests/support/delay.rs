//! A [`Storage`] that delays and reorders writes (random sleeps and thread yields before each
//! one) in front of another storage, and a gate that stops every change to the files while a
//! test takes a crash image.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use walcrypt::storage::{Storage, StorageFile};

use super::Rng;

/// Wraps `inner`. Every write first waits a random while (none, a yield, or a sleep of up to
/// 300 µs), so writes issued in one order land in another; then it passes the gate. Every
/// other change (sync, length, create, rename, remove) passes the gate too. With
/// [`DelayStorage::slow_syncs`], an fdatasync waits such a while too before it takes effect.
#[derive(Clone)]
pub struct DelayStorage {
    inner: Arc<dyn Storage>,
    gate: Arc<RwLock<()>>,
    rng: Arc<Mutex<Rng>>,
    slow_syncs: bool,
}

impl DelayStorage {
    pub fn new(inner: Arc<dyn Storage>, seed: u64) -> DelayStorage {
        DelayStorage {
            inner,
            gate: Arc::new(RwLock::new(())),
            rng: Arc::new(Mutex::new(Rng::new(seed))),
            slow_syncs: false,
        }
    }

    /// Delays every fdatasync as a write is delayed, before it takes effect: an fdatasync then
    /// lasts long enough for other threads to act while it runs.
    pub fn slow_syncs(mut self) -> DelayStorage {
        self.slow_syncs = true;
        self
    }

    pub fn arc(&self) -> Arc<dyn Storage> {
        Arc::new(self.clone())
    }

    /// Runs `f` while no change reaches the files: every write either landed before or waits
    /// until `f` returns.
    pub fn frozen<T>(&self, f: impl FnOnce() -> T) -> T {
        let _closed = self.gate.write().unwrap();
        f()
    }

    fn delay(&self) {
        let pick = self.rng.lock().unwrap().below(6);
        match pick {
            0 | 1 => {}
            2 | 3 => std::thread::yield_now(),
            n => {
                let us = self
                    .rng
                    .lock()
                    .unwrap()
                    .range(1, if n == 4 { 50 } else { 300 });
                std::thread::sleep(Duration::from_micros(us));
            }
        }
    }
}

struct DelayFile {
    inner: Box<dyn StorageFile>,
    storage: DelayStorage,
}

impl StorageFile for DelayFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.storage.delay();
        let _open = self.storage.gate.read().unwrap();
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.storage.slow_syncs {
            self.storage.delay();
        }
        let _open = self.storage.gate.read().unwrap();
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let _open = self.storage.gate.read().unwrap();
        self.inner.set_len(len)
    }
    fn file_len(&self) -> io::Result<u64> {
        self.inner.file_len()
    }
    fn fill_zeros(&self, offset: u64, len: u64) -> io::Result<()> {
        let _open = self.storage.gate.read().unwrap();
        self.inner.fill_zeros(offset, len)
    }
}

impl Storage for DelayStorage {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.inner.open(path, write)?;
        Ok(Box::new(DelayFile {
            inner,
            storage: self.clone(),
        }))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let _open = self.gate.read().unwrap();
        let inner = self.inner.create_new(path)?;
        Ok(Box::new(DelayFile {
            inner,
            storage: self.clone(),
        }))
    }
    fn create_private(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let _open = self.gate.read().unwrap();
        let inner = self.inner.create_private(path)?;
        Ok(Box::new(DelayFile {
            inner,
            storage: self.clone(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let _open = self.gate.read().unwrap();
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let _open = self.gate.read().unwrap();
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let _open = self.gate.read().unwrap();
        self.inner.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        self.inner.lock_dir(dir)
    }
}
