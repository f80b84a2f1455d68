//! On a current-thread runtime (one thread for every task), a read below the cache and a
//! truncation that reads the new last entry back both wait on the disk without holding that
//! thread: the storage holds their first read until the test's own task, on the same runtime,
//! lets it go. Were the read done on the runtime's thread, the test's task could not run; the
//! gate then gives up after a while and the test fails saying so.

use crate::support;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use openraft::RaftLogReader;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use support::{assert_entry, config, entry, log_id};
use tokio::sync::mpsc as async_mpsc;
use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::kv::TypeConfig;
use walcrypt_openraft::{StoreOptions, WalLogStore};

type Store = WalLogStore<TypeConfig>;

const ENTRIES: u64 = 50;

/// Only a read that holds the test's runtime thread waits this long at the gate.
const GIVE_UP_AFTER: Duration = Duration::from_secs(10);

/// Holds the first file read after it is armed until released (or until `GIVE_UP_AFTER`,
/// which it records).
struct ReadGate {
    armed: AtomicBool,
    arrived: async_mpsc::UnboundedSender<()>,
    release: Mutex<mpsc::Receiver<()>>,
    gave_up: AtomicBool,
}

impl ReadGate {
    fn pass(&self) {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return;
        }
        let _ = self.arrived.send(());
        let released = self.release.lock().unwrap().recv_timeout(GIVE_UP_AFTER);
        if released.is_err() {
            self.gave_up.store(true, Ordering::SeqCst);
        }
    }
}

struct GatedStorage(Arc<ReadGate>);

struct GatedFile {
    file: Box<dyn StorageFile>,
    gate: Arc<ReadGate>,
}

impl StorageFile for GatedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.gate.pass();
        self.file.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn file_len(&self) -> io::Result<u64> {
        self.file.file_len()
    }
}

impl Storage for GatedStorage {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        let file = FsStorage.open(path, write)?;
        let gate = self.0.clone();
        Ok(Box::new(GatedFile { file, gate }))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = FsStorage.create_new(path)?;
        let gate = self.0.clone();
        Ok(Box::new(GatedFile { file, gate }))
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
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}

/// Runs `work` (which reads from the log) as a task beside this one, and lets its first file
/// read go only from here. Returns what `work` returned.
async fn beside_the_gate<T: Send + 'static>(
    gate: &ReadGate,
    arrived: &mut async_mpsc::UnboundedReceiver<()>,
    let_go: &mpsc::Sender<()>,
    what: &str,
    work: impl Future<Output = T> + Send + 'static,
) -> T {
    gate.armed.store(true, Ordering::SeqCst);
    let task = tokio::spawn(work);
    // Not reached at all would be a mistake of this test (no file read): fail, don't hang.
    tokio::time::timeout(2 * GIVE_UP_AFTER, arrived.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: no file read reached the gate"));
    let_go.send(()).unwrap();
    let result = task.await.unwrap();
    assert!(
        !gate.gave_up.load(Ordering::SeqCst),
        "{what} held the runtime's only thread while it waited for the disk"
    );
    result
}

async fn scenario(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    {
        let mut store = Store::open(dir.path(), config(mode, &keys)).unwrap();
        store
            .blocking_append((0..ENTRIES).map(|i| entry(1, i)))
            .await
            .unwrap();
    }
    let (arrived_tx, mut arrived) = async_mpsc::unbounded_channel();
    let (let_go, release) = mpsc::channel();
    let gate = Arc::new(ReadGate {
        armed: AtomicBool::new(false),
        arrived: arrived_tx,
        release: Mutex::new(release),
        gave_up: AtomicBool::new(false),
    });
    let cfg = config(mode, &keys).storage(Arc::new(GatedStorage(gate.clone())));
    let options = StoreOptions::default().cache_entries(1);
    // Reopened: the entries are on disk only, the cache holds the last one.
    let store = Store::open_with(dir.path(), cfg, options).unwrap();

    // The cache holds entry 49 alone: truncating from 10 reads entry 9 back from the log.
    let mut truncator = store.clone();
    beside_the_gate(
        &gate,
        &mut arrived,
        &let_go,
        "a truncation reading back",
        async move { truncator.truncate(log_id(1, 10)).await.unwrap() },
    )
    .await;
    let mut store = store;
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 9)), "{mode}");

    // Behind the follower the truncation left: a new one reads from the files.
    let mut reader = store.clone();
    let got = beside_the_gate(
        &gate,
        &mut arrived,
        &let_go,
        "a read below the cache",
        async move { reader.try_get_log_entries(3..7).await.unwrap() },
    )
    .await;
    assert_eq!(got.len(), 4, "{mode}");
    for (i, e) in (3..).zip(&got) {
        assert_entry(e, 1, i);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn reads_from_the_log_wait_for_the_disk_off_the_runtime_thread_in_every_mode() {
    for mode in Mode::ALL {
        scenario(mode).await;
    }
}
