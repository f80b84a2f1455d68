//! The real file system with hooks: [`Hooked`] passes every call to [`FsStorage`] and tells a
//! [`Hooks`] about handles, reads, writes, fdatasyncs, renames and listings, for tests that watch or
//! hold back what the log does.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use walcrypt::storage::{FsStorage, Storage, StorageFile};

/// Where a hook holds one storage call until the test releases it.
#[derive(Default)]
pub struct Gate {
    /// (a call is held, released)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Gate {
    /// Called by the hook: says a call is held here, then waits for [`Gate::release`].
    pub fn hold(&self) {
        let mut state = self.state.lock().unwrap();
        state.0 = true;
        self.changed.notify_all();
        while !state.1 {
            state = self.changed.wait(state).unwrap();
        }
    }

    /// Waits until a call is held (fails the test after 10 s).
    pub fn wait_held(&self) {
        let mut state = self.state.lock().unwrap();
        while !state.0 {
            let (next, timeout) = self
                .changed
                .wait_timeout(state, Duration::from_secs(10))
                .unwrap();
            state = next;
            assert!(!timeout.timed_out(), "no storage call was held");
        }
    }

    /// Lets the held call (and any later one) go on.
    pub fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

/// What a test hears of. Every method does nothing unless overridden.
pub trait Hooks: Send + Sync + 'static {
    /// A handle of `path` was opened or created.
    fn opened(&self, _path: &Path) {}
    /// A handle of `path` was dropped.
    fn closed(&self, _path: &Path) {}
    /// A read of a handle of `path` returned `n` bytes.
    fn read(&self, _path: &Path, _n: usize) {}
    /// A read at `offset` of a handle of `path` returned `bytes`, which the hook may change
    /// (what a read racing another writer of the file would see) or act on.
    fn read_bytes(&self, _path: &Path, _offset: u64, _bytes: &mut [u8]) -> io::Result<()> {
        Ok(())
    }
    /// `buf` is about to be written at `offset` of `path`.
    fn write(&self, _path: &Path, _offset: u64, _buf: &[u8]) {}
    /// Whether the write [`Hooks::write`] heard of goes ahead: an error fails it, unwritten
    /// (what a failing disk returns).
    fn write_result(&self, _path: &Path, _offset: u64, _buf: &[u8]) -> io::Result<()> {
        Ok(())
    }
    /// `path` is about to be fdatasync'ed.
    fn syncing(&self, _path: &Path) {}
    /// `path` was fdatasync'ed.
    fn synced(&self, _path: &Path) {}
    /// `from` was renamed to `to`.
    fn renamed(&self, _from: &Path, _to: &Path) {}
    /// `dir` was listed: `names` is what the caller gets.
    fn listed(&self, _dir: &Path, _names: &[String]) {}
    /// `dir` was listed: the hook may leave names out of `names` (what a listing taken while
    /// files are added may return) before the caller gets them.
    fn filter_listing(&self, _dir: &Path, _names: &mut Vec<String>) {}
}

/// [`FsStorage`], with every handle, read, write, fdatasync and rename reported to `H`.
pub struct Hooked<H: Hooks>(pub Arc<H>);

struct HookedFile<H: Hooks> {
    inner: Box<dyn StorageFile>,
    hooks: Arc<H>,
    path: PathBuf,
}

impl<H: Hooks> Hooked<H> {
    fn file(&self, inner: Box<dyn StorageFile>, path: &Path) -> Box<dyn StorageFile> {
        self.0.opened(path);
        Box::new(HookedFile {
            inner,
            hooks: self.0.clone(),
            path: path.to_path_buf(),
        })
    }
}

impl<H: Hooks> Drop for HookedFile<H> {
    fn drop(&mut self) {
        self.hooks.closed(&self.path);
    }
}

impl<H: Hooks> StorageFile for HookedFile<H> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.inner.read_at(buf, offset)?;
        self.hooks.read(&self.path, n);
        self.hooks.read_bytes(&self.path, offset, &mut buf[..n])?;
        Ok(n)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.hooks.write(&self.path, offset, buf);
        self.hooks.write_result(&self.path, offset, buf)?;
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.hooks.syncing(&self.path);
        self.inner.sync_data()?;
        self.hooks.synced(&self.path);
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn file_len(&self) -> io::Result<u64> {
        self.inner.file_len()
    }
}

impl<H: Hooks> Storage for Hooked<H> {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = FsStorage.list(dir)?;
        self.0.filter_listing(dir, &mut names);
        self.0.listed(dir, &names);
        Ok(names)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        Ok(self.file(FsStorage.open(path, write)?, path))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(self.file(FsStorage.create_new(path)?, path))
    }
    fn create_private(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(self.file(FsStorage.create_private(path)?, path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        FsStorage.rename(from, to)?;
        self.0.renamed(from, to);
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        FsStorage.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        FsStorage.exists(path)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}
