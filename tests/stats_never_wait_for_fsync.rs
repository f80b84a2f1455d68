//! `Wal::stats` reads atomic counters: it answers while another thread holds the write lock
//! inside a slow fdatasync.

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{Config, KeyRing, Mode, Wal};

/// Storage whose fdatasync, once armed, reports that it started and then waits to be released.
#[derive(Clone, Default)]
struct GatedStorage(Arc<Gate>);

#[derive(Default)]
struct Gate {
    armed: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

struct GatedFile(Box<dyn StorageFile>, Arc<Gate>);

impl StorageFile for GatedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        if let Some((started, release)) = self.1.armed.lock().unwrap().take() {
            started.send(()).unwrap();
            release.recv().unwrap();
        }
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn file_len(&self) -> std::io::Result<u64> {
        self.0.file_len()
    }
}

impl Storage for GatedStorage {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(GatedFile(
            FsStorage.open(path, write)?,
            self.0.clone(),
        )))
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(GatedFile(
            FsStorage.create_new(path)?,
            self.0.clone(),
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

#[test]
fn stats_answer_while_a_flush_is_inside_fdatasync() {
    let dir = tempfile::tempdir().unwrap();
    let storage = GatedStorage::default();
    let config = Config::new(Mode::PerRecord)
        .keys(KeyRing::generate().unwrap())
        .storage(Arc::new(storage.clone()));
    let wal = Wal::open(dir.path(), config).unwrap();
    let lsn = wal.append(1, &[5; 1000]).unwrap();

    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    *storage.0.armed.lock().unwrap() = Some((started_tx, release_rx));
    std::thread::scope(|s| {
        let flusher = s.spawn(|| wal.flush(lsn));
        started.recv().unwrap(); // the flusher holds the write lock, inside fdatasync
        let (answer_tx, answer) = mpsc::channel();
        let wal = &wal;
        s.spawn(move || answer_tx.send(wal.stats()).unwrap());
        // A generous deadline only to turn a hang into a failure; no timing is measured.
        let stats = answer
            .recv_timeout(Duration::from_secs(60))
            .expect("stats() waited for the fdatasync");
        assert_eq!(stats.appends, 1);
        assert_eq!(stats.payload_bytes, 1000);
        // The appender is not blocked either: the insert lock is free.
        wal.append(1, b"meanwhile").unwrap();
        release.send(()).unwrap();
        flusher.join().unwrap().unwrap();
    });
    let stats = wal.stats();
    assert_eq!(stats.appends, 2);
    assert!(stats.fsyncs >= 1);
    assert!(stats.write_lock_acquisitions >= 1);
    wal.close().unwrap();
}
