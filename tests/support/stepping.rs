//! [`Stepping`]: the fault storage with a callback before every operation that changes what a
//! power cut would leave (a write, fdatasync, length change, creation, rename, removal or
//! directory sync), for tests that take a crash image at each step.

use std::io;
use std::path::Path;
use std::sync::Arc;

use walcrypt::storage::{Storage, StorageFile};

use super::faults::FaultStorage;

/// Told of each step before it happens, with a short description of it.
pub trait Step: Send + Sync + 'static {
    fn before(&self, step: &str);
}

/// The fault storage `.0`, calling `.1` before every step.
pub struct Stepping<S: Step>(pub FaultStorage, pub Arc<S>);

struct SteppingFile<S: Step> {
    inner: Box<dyn StorageFile>,
    step: Arc<S>,
    name: String,
}

pub fn name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl<S: Step> StorageFile for SteppingFile<S> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.step
            .before(&format!("write {offset}+{} of {}", buf.len(), self.name));
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.step.before(&format!("fdatasync of {}", self.name));
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.step.before(&format!("set_len {len} of {}", self.name));
        self.inner.set_len(len)
    }
    fn file_len(&self) -> io::Result<u64> {
        self.inner.file_len()
    }
    fn fill_zeros(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.fill_zeros(offset, len)
    }
}

impl<S: Step> Stepping<S> {
    fn file(&self, inner: Box<dyn StorageFile>, path: &Path) -> Box<dyn StorageFile> {
        Box::new(SteppingFile {
            inner,
            step: self.1.clone(),
            name: name(path),
        })
    }
}

impl<S: Step> Storage for Stepping<S> {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.0.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.0.open(path, write)?;
        Ok(self.file(inner, path))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.1.before(&format!("create {}", name(path)));
        let inner = self.0.create_new(path)?;
        Ok(self.file(inner, path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.1
            .before(&format!("rename {} to {}", name(from), name(to)));
        self.0.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.1.before(&format!("remove {}", name(path)));
        self.0.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.1.before("directory sync");
        self.0.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.0.create_dir_all(dir)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        self.0.lock_dir(dir)
    }
}
