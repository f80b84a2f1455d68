//! A segment file missing from the middle of the log is damage: the reader and `Wal::open`
//! both report it, and the open never continues writing after the hole.

use crate::support;

use support::{payload, small_config};
use walcrypt::{CorruptionKind, Error, KeyRing, Mode, Reader, Wal};

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
