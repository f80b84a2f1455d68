//! A segment file missing from the middle of the log is damage: the reader and `Wal::open`
//! both report it, and the open never continues writing after the hole.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use support::hooked::{Hooked, Hooks};
use support::{payload, small_config};
use walcrypt::storage::Storage;
use walcrypt::{CorruptionKind, Error, KeyRing, Lsn, Mode, Reader, Wal};

/// A closed log in more than five segments: its directory, keys, records and segment files.
type SeveralSegments = (tempfile::TempDir, KeyRing, Vec<(u8, Vec<u8>)>, Vec<PathBuf>);

/// A closed log of `mode` in more than five segments.
fn log_of_several_segments(mode: Mode) -> SeveralSegments {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
    let records: Vec<_> = (0..200).map(|i| (1u8, payload(i, 100))).collect();
    support::append_all(&wal, &records);
    wal.close().unwrap();
    let segments = support::segment_files(dir.path());
    assert!(segments.len() > 5, "{mode}: {} segments", segments.len());
    (dir, keys, records, segments)
}

#[test]
fn a_missing_middle_segment_is_corruption_for_reader_and_writer() {
    for mode in Mode::ALL {
        let (dir, keys, _, segments) = log_of_several_segments(mode);
        let config = small_config(mode, &keys);
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

/// Every listing leaves out one file: what a listing taken while a writer makes segments can
/// return (a directory listing does not promise the entries added while it runs, and a later
/// one may be there).
struct ListingMisses(String);

impl Hooks for ListingMisses {
    fn filter_listing(&self, _dir: &Path, names: &mut Vec<String>) {
        names.retain(|n| *n != self.0);
    }
}

/// A segment that is there but left out of the directory listing (a listing taken while the
/// writer made it and the next one) is read by its name: a reader of a live log never reports
/// such a gap as damage. Reported as `MissingSegment` by readers and followers of logs written
/// by 32 threads into small segments before.
#[test]
fn a_segment_a_listing_missed_is_read_by_name() {
    for mode in Mode::ALL {
        let (dir, keys, records, segments) = log_of_several_segments(mode);
        let missed = segments[3]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let storage = Arc::new(Hooked(Arc::new(ListingMisses(missed.clone()))));
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
