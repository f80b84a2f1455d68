//! A reader opened on a live log while a purge retires the oldest segment and a reuse rewrites
//! that file's header page: the handle the reader opened by the old name reads half of the new
//! header, which fails its checksum. The segment is no longer listed when the reader looks
//! again, so it is purged, not damaged: the reader opens on the segments that remain. A header
//! that fails its checksum in a segment still listed is damage, reported as before.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{Config, CorruptionKind, Error, Lsn, Mode, Reader, SyncMode, Wal};

const SEGMENT: u64 = 16 * 1024;

/// The real file system, but the first header read of `target` renames the file away (the
/// purge keeping it for reuse, when `purge`) and returns the header with a byte changed (the
/// reuse rewriting it under the reader's handle).
struct ReusedUnderReader {
    target: PathBuf,
    purge: bool,
    done: Arc<AtomicBool>,
}

struct TornHeader {
    inner: Box<dyn StorageFile>,
    path: PathBuf,
    purge: bool,
    done: Arc<AtomicBool>,
}

impl StorageFile for TornHeader {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.inner.read_at(buf, offset)?;
        if offset == 0 && n > 20 {
            if self.purge && !self.done.swap(true, Ordering::SeqCst) {
                std::fs::rename(&self.path, self.path.with_extension("wal.free"))?;
            }
            buf[20] ^= 0x40;
        }
        Ok(n)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn file_len(&self) -> io::Result<u64> {
        self.inner.file_len()
    }
}

impl Storage for ReusedUnderReader {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage.list(dir)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        let inner = FsStorage.open(path, write)?;
        if path != self.target || (self.purge && self.done.load(Ordering::SeqCst)) {
            return Ok(inner);
        }
        Ok(Box::new(TornHeader {
            inner,
            path: path.to_path_buf(),
            purge: self.purge,
            done: self.done.clone(),
        }))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        FsStorage.create_new(path)
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

/// A closed plaintext log of three segments or more; the path of its first segment's file.
fn log_of_segments(dir: &Path) -> PathBuf {
    let config = Config::new(Mode::Plaintext)
        .sync(SyncMode::Buffered)
        .page_size(512)
        .segment_size(SEGMENT);
    let wal = Wal::open(dir, config).unwrap();
    for i in 0..200u32 {
        wal.append(1, &[i as u8; 300]).unwrap();
    }
    wal.close().unwrap();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "segments: {names:?}");
    dir.join(&names[0])
}

#[test]
fn a_reader_opens_past_a_segment_reused_under_it() {
    let tmp = tempfile::tempdir().unwrap();
    let first = log_of_segments(tmp.path());
    let storage = ReusedUnderReader {
        target: first.clone(),
        purge: true,
        done: Arc::new(AtomicBool::new(false)),
    };
    let done = storage.done.clone();
    let reader = Reader::open_with_storage(tmp.path(), None, Arc::new(storage))
        .unwrap_or_else(|e| panic!("a segment purged under the reader is not damage: {e}"));
    assert!(
        done.load(Ordering::SeqCst),
        "the purge ran under the reader"
    );
    assert!(!first.exists());
    // The segments that remain read on as before.
    let read = reader
        .records_from(Lsn(SEGMENT))
        .take(10)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(read.len(), 10);
}

#[test]
fn a_header_that_fails_its_checksum_in_a_listed_segment_is_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let first = log_of_segments(tmp.path());
    let storage = ReusedUnderReader {
        target: first,
        purge: false,
        done: Arc::new(AtomicBool::new(false)),
    };
    match Reader::open_with_storage(tmp.path(), None, Arc::new(storage)) {
        Err(Error::Corrupt {
            kind: CorruptionKind::SegmentHeaderChecksum { .. },
            ..
        }) => {}
        Err(e) => panic!("another error than the header's checksum: {e}"),
        Ok(_) => panic!("a damaged header in a listed segment was read as a log"),
    }
}
