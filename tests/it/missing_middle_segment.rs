//! A segment file missing from the middle of the log is damage: the reader and `Wal::open`
//! both report it, and the open never continues writing after the hole.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use support::{payload, small_config};
use walcrypt::storage::{FsStorage, Storage, StorageFile};
use walcrypt::{CorruptionKind, Error, KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn a_missing_middle_segment_is_corruption_for_reader_and_writer() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        let records: Vec<_> = (0..200).map(|i| (1u8, payload(i, 100))).collect();
        support::append_all(&wal, &records);
        wal.close().unwrap();
        let segments = support::segment_files(dir.path());
        assert!(segments.len() > 5, "{mode}: {} segments", segments.len());
        std::fs::remove_file(&segments[3]).unwrap();

        for result in [
            Reader::open(dir.path(), Some(keys.clone())).map(|_| ()),
            Wal::open(dir.path(), config.clone()).map(|_| ()),
        ] {
            match result {
                Err(Error::Corrupt {
                    kind: CorruptionKind::MissingSegment,
                    at,
                }) => {
                    assert!(segments[3].ends_with(walcrypt::inspect::segment_file_name(at.segment)))
                }
                other => panic!("{mode}: expected a missing segment, got {other:?}"),
            }
        }
    }
}

/// The real file system, but every listing leaves out one file: what a listing taken while a
/// writer makes segments can return (a directory listing does not promise the entries added
/// while it runs, and a later one may be there).
struct ListingMisses(String);

impl Storage for ListingMisses {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        let mut names = FsStorage.list(dir)?;
        names.retain(|n| *n != self.0);
        Ok(names)
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
        FsStorage.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn lock_dir(&self, dir: &Path) -> std::io::Result<Option<Box<dyn Send + Sync>>> {
        FsStorage.lock_dir(dir)
    }
}

/// A segment that is there but left out of the directory listing (a listing taken while the
/// writer made it and the next one) is read by its name: a reader of a live log never reports
/// such a gap as damage. Reported as `MissingSegment` by readers and followers of logs written
/// by 32 threads into small segments before.
#[test]
fn a_segment_a_listing_missed_is_read_by_name() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        let records: Vec<_> = (0..200).map(|i| (1u8, payload(i, 100))).collect();
        support::append_all(&wal, &records);
        wal.close().unwrap();
        let segments = support::segment_files(dir.path());
        assert!(segments.len() > 5, "{mode}: {} segments", segments.len());
        let missed = segments[3]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let storage = Arc::new(ListingMisses(missed.clone()));
        assert!(
            !storage.list(dir.path()).unwrap().contains(&missed),
            "{mode}: the listing still names {missed}"
        );

        let reader = Reader::open_with_storage(dir.path(), Some(keys.clone()), storage.clone())
            .unwrap_or_else(|e| panic!("{mode}: a segment the listing missed: {e}"));
        let read: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| {
                let r = r.unwrap_or_else(|e| panic!("{mode}: read: {e}"));
                (r.kind, r.payload)
            })
            .collect();
        assert_eq!(read, records, "{mode}: every record, in order");
        assert!(
            reader.segments().iter().any(|s| s.path.ends_with(&missed)),
            "{mode}: the missed segment is among the reader's segments"
        );
    }
}
