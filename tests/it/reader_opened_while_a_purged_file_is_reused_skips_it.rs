//! A reader opened on a live log while a purge retires the oldest segment and a reuse rewrites
//! that file's header page: the handle the reader opened by the old name reads half of the new
//! header, which fails its checksum. The segment is no longer listed when the reader looks
//! again, so it is purged, not damaged: the reader opens on the segments that remain. A header
//! that fails its checksum in a segment still listed is damage, reported as before.

use crate::support::hooked::{Hooked, Hooks};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use walcrypt::{Config, CorruptionKind, Error, Lsn, Mode, Reader, SyncMode, Wal};

const SEGMENT: u64 = 16 * 1024;

/// A header read of `target` comes back with a byte changed (the reuse rewriting the header
/// page under the reader's handle); with `purge`, the first one also renames the file away
/// (the purge keeping it for reuse), so the directory no longer lists it.
struct ReusedUnderReader {
    target: PathBuf,
    purge: bool,
    purged: AtomicBool,
}

impl Hooks for ReusedUnderReader {
    fn read_bytes(&self, path: &Path, offset: u64, bytes: &mut [u8]) -> io::Result<()> {
        if path != self.target || offset != 0 || bytes.len() <= 20 {
            return Ok(());
        }
        if self.purge && !self.purged.swap(true, Ordering::SeqCst) {
            std::fs::rename(path, path.with_extension("wal.free"))?;
        }
        bytes[20] ^= 0x40;
        Ok(())
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

fn open_reader(dir: &Path, target: PathBuf, purge: bool) -> (Result<Reader, Error>, bool) {
    let hooks = Arc::new(ReusedUnderReader {
        target,
        purge,
        purged: AtomicBool::new(false),
    });
    let reader = Reader::open_with_storage(dir, None, Arc::new(Hooked(hooks.clone())));
    (reader, hooks.purged.load(Ordering::SeqCst))
}

#[test]
fn a_reader_opens_past_a_segment_reused_under_it() {
    let tmp = tempfile::tempdir().unwrap();
    let first = log_of_segments(tmp.path());
    let (reader, purged) = open_reader(tmp.path(), first.clone(), true);
    let reader =
        reader.unwrap_or_else(|e| panic!("a segment purged under the reader is not damage: {e}"));
    assert!(purged && !first.exists(), "the purge ran under the reader");
    // The segments that remain read on as before, from the first record of what is left (a
    // record runs into the oldest segment's first page: its start is no record boundary).
    let read = reader
        .records_from(Lsn::default())
        .take(10)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(read.len(), 10);
}

#[test]
fn a_header_that_fails_its_checksum_in_a_listed_segment_is_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let first = log_of_segments(tmp.path());
    match open_reader(tmp.path(), first, false).0 {
        Err(Error::Corrupt {
            kind: CorruptionKind::SegmentHeaderChecksum { .. },
            ..
        }) => {}
        Err(e) => panic!("another error than the header's checksum: {e}"),
        Ok(_) => panic!("a damaged header in a listed segment was read as a log"),
    }
}
