//! A reader reads the segment headers once, when it is opened. A copy of each version-2 golden
//! log has the next segment prepared ahead (a version-2 header over zeros); a reader opens it,
//! then a writer of this build opens the log, removes the prepared segment and makes it anew
//! at the current version, whose records carry checksums over their LSN (reached by a switch
//! record, or in pagelevel possibly by a resume record at its start). The reader, still
//! holding the version-2 header, ends cleanly where the log went on in that segment: it
//! returns every record of the golden and reports no damage, as on any live log.

use crate::golden_files;

use walcrypt::inspect::FORMAT_VERSION;
use walcrypt::{Config, Lsn, Reader, Wal};

#[test]
fn reader_ends_cleanly_before_a_segment_a_reopen_remade() {
    let goldens = golden_files::of_version(2);
    for g in &goldens {
        let name = &g.name;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let prepared = golden_files::copy_log_with_prepared_segment(g, dir);
        let reader = Reader::open(dir, Some(g.keys.clone())).unwrap();
        assert_eq!(reader.segments().last().unwrap().header.version, 2);

        let config = Config::new(g.mode)
            .keys(g.keys.clone())
            .prepare_segments(false);
        let wal = Wal::open(dir, config).unwrap();
        for i in 0..20u8 {
            let lsn = wal.append(3, &[i; 150]).unwrap();
            wal.flush(lsn).unwrap();
        }
        wal.close().unwrap();
        let now = Reader::open(dir, Some(g.keys.clone())).unwrap();
        let remade = now.segments().iter().find(|s| s.header.start == prepared);
        assert_eq!(
            remade.map(|s| s.header.version),
            Some(FORMAT_VERSION),
            "{name}: the segment is made anew"
        );
        assert_eq!(
            now.records_from(Lsn::default()).count(),
            g.records.len() + 20,
            "{name}: a reader opened now reads every record"
        );

        let got: Vec<(Lsn, u8, Vec<u8>)> = reader
            .records_from(Lsn::default())
            .map(|r| r.map(|r| (r.lsn, r.kind, r.payload)))
            .collect::<walcrypt::Result<_>>()
            .unwrap_or_else(|e| panic!("{name}: the reader opened before: {e}"));
        assert!(got == g.records, "{name}: every record of the golden");
    }
}
