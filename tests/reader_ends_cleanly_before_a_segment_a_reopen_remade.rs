//! A reader reads the segment headers once, when it is opened. A log written at format
//! version 2 has the next segment prepared ahead (a version-2 header over zeros); a reader
//! opens it, then a writer of this build opens the log, removes the prepared segment and makes
//! it anew at the current version, whose records carry checksums over their LSN. The reader,
//! still holding the version-2 header, ends cleanly where that segment begins: it returns every
//! record before it and reports no damage, as on any live log.

mod support;

use support::older_format::rewrite_as_version_2;
use support::{payload, small_config};
use walcrypt::inspect::FORMAT_VERSION;
use walcrypt::{KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn reader_ends_cleanly_before_a_segment_a_reopen_remade() {
    for mode in [Mode::Plaintext, Mode::PerRecord] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let keys = KeyRing::generate().unwrap();
        let config = || small_config(mode, &keys).prepare_segments(false);

        let wal = Wal::open(dir, config()).unwrap();
        let mut before = Vec::new();
        for i in 0..5 {
            let lsn = wal.append(1, &payload(i, 100)).unwrap();
            wal.flush(lsn).unwrap();
            before.push((lsn, payload(i, 100)));
        }
        assert!(wal.prepare_next_segment().unwrap());
        wal.close().unwrap();
        rewrite_as_version_2(dir, &keys);

        let reader = Reader::open(dir, Some(keys.clone())).unwrap();
        let listed: Vec<u32> = reader.segments().iter().map(|s| s.header.version).collect();
        assert_eq!(listed, [2, 2], "{mode:?}: the prepared segment is listed");

        let wal = Wal::open(dir, config()).unwrap();
        for i in 5..40 {
            let lsn = wal.append(2, &payload(i, 100)).unwrap();
            wal.flush(lsn).unwrap();
        }
        wal.close().unwrap();
        let now = Reader::open(dir, Some(keys.clone())).unwrap();
        let versions: Vec<u32> = now.segments().iter().map(|s| s.header.version).collect();
        assert_eq!(versions[..2], [2, FORMAT_VERSION], "{mode:?}: made anew");
        assert_eq!(now.records_from(Lsn::default()).count(), 40, "{mode:?}");

        let got: Vec<(Lsn, Vec<u8>)> = reader
            .records_from(Lsn::default())
            .map(|r| r.map(|r| (r.lsn, r.payload)))
            .collect::<walcrypt::Result<_>>()
            .unwrap_or_else(|e| panic!("{mode:?}: the reader opened before: {e}"));
        assert!(got == before, "{mode:?}: every record before the segment");
    }
}
