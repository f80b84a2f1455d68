//! The writer's directory lock, for the commands that change a log (`--repair`,
//! `--truncate-to`, `--purge-before`): taken before anything is read for the change, copied
//! into a backup or changed, and held until the change is made. A log open in another process
//! is refused first, with nothing copied; and no writer can open the log between the backup and
//! the change.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use walcrypt::storage::{FsStorage, Storage, StorageFile};

use crate::fail::Fail;

/// The held lock of one log directory. As a [`Storage`] it is the real file system, whose
/// directory lock for that log is this one: a `Wal` opened with it in this process takes the
/// lock over (and releases it when closed).
pub struct LogLock {
    dir: PathBuf,
    guard: Mutex<Option<Box<dyn Send + Sync>>>,
}

impl LogLock {
    /// Takes the lock of the log in `dir`; refuses a log open in another process.
    pub fn take(dir: &Path) -> Result<Arc<LogLock>, Fail> {
        let guard = FsStorage
            .lock_dir(dir)
            .map_err(|e| Fail::io("lock log directory", dir, &e))?
            .ok_or_else(|| {
                Fail::trouble(format!(
                    "{}: the log is open in another process (its LOCK file is held); close it \
                     first",
                    dir.display()
                ))
            })?;
        Ok(Arc::new(LogLock {
            dir: dir.to_path_buf(),
            guard: Mutex::new(Some(guard)),
        }))
    }
}

impl Storage for LogLock {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        FsStorage.open(path, write)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        FsStorage.create_new(path)
    }
    fn create_private(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        FsStorage.create_private(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        FsStorage.rename(from, to)
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
    /// This lock, once, for its own directory; anything else as the file system has it.
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        if dir == self.dir {
            let held = self
                .guard
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
            if let Some(guard) = held {
                return Ok(Some(guard));
            }
        }
        FsStorage.lock_dir(dir)
    }
    fn rename_no_replace(&self, from: &Path, to: &Path) -> io::Result<()> {
        FsStorage.rename_no_replace(from, to)
    }
    fn lock_file(&self, path: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_file(path)
    }
}
