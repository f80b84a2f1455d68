//! Wal::open creates a missing log directory (and missing parents) and fsyncs the directory
//! holding each new entry before it returns, so a power cut cannot make a new log vanish on a
//! file system that does not persist a new directory with its children. Observed through the
//! Storage the Wal was given.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{Config, KeyRing, Mode, Wal};

#[derive(Default)]
struct Events(Mutex<Vec<String>>);

struct Watched(Arc<Events>);

impl Watched {
    fn note(&self, event: String) {
        self.0.0.lock().unwrap().push(event);
    }
}

impl Storage for Watched {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> std::io::Result<Box<dyn StorageFile>> {
        FsStorage.open(path, write)
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        FsStorage.create_new(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.note(format!("sync {}", dir.display()));
        FsStorage.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.note(format!("create {}", dir.display()));
        FsStorage.create_dir_all(dir)
    }
    fn lock_dir(&self, dir: &Path) -> std::io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}

#[test]
fn creating_a_log_directory_fsyncs_the_parent_of_every_new_directory() {
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("a").join("b").join("log");
    let events = Arc::new(Events::default());
    let config = Config::new(Mode::PerRecord)
        .keys(keys)
        .storage(Arc::new(Watched(events.clone())));
    let wal = Wal::open(&dir, config).unwrap();
    let events = events.0.lock().unwrap().clone();
    let created = events
        .iter()
        .position(|e| e.starts_with("create "))
        .expect("the directory was created");
    for parent in [
        tmp.path().to_path_buf(),
        tmp.path().join("a"),
        tmp.path().join("a").join("b"),
    ] {
        let sync = format!("sync {}", parent.display());
        let at = events.iter().position(|e| *e == sync);
        assert!(
            at.is_some_and(|at| at > created),
            "{} not fsynced after the directory was made: {events:?}",
            parent.display()
        );
    }
    wal.close().unwrap();
}
