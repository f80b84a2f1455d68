//! A SyncMode::Buffered writer never fdatasyncs on flush, yet it must not keep the handle of
//! every segment written since the last sync (with small segments that ran out of file
//! descriptors). Handles of finished segments are closed as the writer moves on — counted here
//! through the Storage the Wal was given, so tests running beside it do not disturb the count —
//! and no fdatasync a segment needs is skipped: when the log is closed, every segment file
//! written to has been fdatasync'ed after its last write (through a reopened handle where the
//! writer had closed its own).

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use support::hooked::{Hooked, Hooks};

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

impl Hooks for Watch {
    fn opened(&self, _path: &Path) {
        let now = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_open.fetch_max(now, Ordering::SeqCst);
    }
    fn closed(&self, _path: &Path) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
    fn write(&self, path: &Path, _offset: u64, _buf: &[u8]) {
        self.mark(path, true);
    }
    fn synced(&self, path: &Path) {
        self.mark(path, false);
    }
    fn renamed(&self, from: &Path, to: &Path) {
        self.renamed
            .lock()
            .unwrap()
            .insert(from.to_path_buf(), to.to_path_buf());
        let mut unsynced = self.unsynced.lock().unwrap();
        if let Some(state) = unsynced.remove(from) {
            unsynced.insert(to.to_path_buf(), state);
        }
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
            .storage(Arc::new(Hooked(watch.clone())));
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
