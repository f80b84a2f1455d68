//! A SyncMode::Buffered writer never fdatasyncs on flush, yet it must not keep the handle of
//! every segment written since the last sync (with small segments that ran out of file
//! descriptors). Handles of finished segments are closed as the writer moves on — counted here
//! through the Storage the Wal was given, so tests running beside it do not disturb the count —
//! and no fdatasync a segment needs is skipped: when the log is closed, every segment file
//! written to has been fdatasync'ed after its last write (through a reopened handle where the
//! writer had closed its own).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

#[derive(Default)]
struct Watch {
    open: AtomicI64,
    most_open: AtomicI64,
    /// Per file: whether it was written to since its last fdatasync.
    unsynced: Mutex<HashMap<PathBuf, bool>>,
    /// Files renamed (a segment made under a temporary name): old name to new.
    renamed: Mutex<HashMap<PathBuf, PathBuf>>,
}

impl Watch {
    /// The name the file a handle was opened under has now.
    fn name(&self, opened_as: &Path) -> PathBuf {
        let renamed = self.renamed.lock().unwrap();
        renamed
            .get(opened_as)
            .cloned()
            .unwrap_or_else(|| opened_as.to_path_buf())
    }

    fn mark(&self, opened_as: &Path, dirty: bool) {
        let name = self.name(opened_as);
        self.unsynced.lock().unwrap().insert(name, dirty);
    }
}

struct Watched(Arc<Watch>);
struct WatchedFile(Box<dyn StorageFile>, Arc<Watch>, PathBuf);

impl WatchedFile {
    fn boxed(file: Box<dyn StorageFile>, watch: &Arc<Watch>, path: &Path) -> Box<dyn StorageFile> {
        let now = watch.open.fetch_add(1, Ordering::SeqCst) + 1;
        watch.most_open.fetch_max(now, Ordering::SeqCst);
        Box::new(WatchedFile(file, watch.clone(), path.to_path_buf()))
    }
}

impl Drop for WatchedFile {
    fn drop(&mut self) {
        self.1.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl StorageFile for WatchedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.1.mark(&self.2, true);
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()?;
        self.1.mark(&self.2, false);
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn file_len(&self) -> std::io::Result<u64> {
        self.0.file_len()
    }
}

impl Storage for Watched {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(WatchedFile::boxed(
            FsStorage.open(path, write)?,
            &self.0,
            path,
        ))
    }
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn StorageFile>> {
        Ok(WatchedFile::boxed(
            FsStorage.create_new(path)?,
            &self.0,
            path,
        ))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)?;
        self.0
            .renamed
            .lock()
            .unwrap()
            .insert(from.to_path_buf(), to.to_path_buf());
        let mut unsynced = self.0.unsynced.lock().unwrap();
        if let Some(state) = unsynced.remove(from) {
            unsynced.insert(to.to_path_buf(), state);
        }
        Ok(())
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
fn buffered_writer_holds_a_bounded_number_of_handles_and_syncs_every_segment() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let watch = Arc::new(Watch::default());
        let config = Config::new(mode)
            .keys(keys.clone())
            .sync(SyncMode::Buffered)
            .page_size(512)
            .segment_size(1024)
            .storage(Arc::new(Watched(watch.clone())));
        let wal = Wal::open(tmp.path(), config).unwrap();
        let records = 600u64;
        for id in 0..records {
            let lsn = wal.append(1, &id.to_le_bytes().repeat(12)).unwrap();
            wal.flush(lsn).unwrap();
        }
        let files = std::fs::read_dir(tmp.path()).unwrap().count();
        assert!(
            files > 100,
            "{mode}: the log rolled over many segments ({files} files)"
        );
        let most = watch.most_open.load(Ordering::SeqCst);
        assert!(
            most <= 4,
            "{mode}: the writer held up to {most} handles at once"
        );
        wal.close().unwrap();
        assert_eq!(
            watch.open.load(Ordering::SeqCst),
            0,
            "{mode}: handles left open"
        );
        let unsynced: Vec<PathBuf> = watch
            .unsynced
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, dirty)| **dirty)
            .map(|(p, _)| p.clone())
            .collect();
        assert!(
            unsynced.is_empty(),
            "{mode}: never fdatasync'ed after the last write: {unsynced:?}"
        );
        let reader = Reader::open(tmp.path(), Some(keys)).unwrap();
        let n = reader
            .records_from(Lsn::default())
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
            .len();
        assert_eq!(n as u64, records, "{mode}: every record is back");
    }
}
