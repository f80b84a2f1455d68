//! The golden logs in tests/golden/, written by earlier builds (every mode, torn tails, rotated
//! keys, several segments, records spanning pages and segments), read with this build: every
//! record byte for byte, every segment header as recorded, and a reopened log continues where
//! the golden's last complete record ends. A build that stops reading a golden must say so in
//! docs/FORMAT.md ("Version changes") and remove it; regenerate the current version's goldens
//! with `cargo run --example write_golden_logs`.

use crate::golden_files;

use std::collections::BTreeSet;

use golden_files::Golden;
use walcrypt::inspect::{FORMAT_VERSION, SEGMENT_MAGIC, segment_file_name};
use walcrypt::{Config, Lsn, Mode, Reader, Wal};

/// Offset of the format version (u32 LE) in a segment header (docs/FORMAT.md).
const VERSION_OFFSET: usize = 8;

fn read(golden: &Golden) -> Vec<walcrypt::Record> {
    let reader = Reader::open(&golden.log, Some(golden.keys.clone()))
        .unwrap_or_else(|e| panic!("{}: open: {e}", golden.name));
    reader
        .records_from(Lsn::default())
        .collect::<walcrypt::Result<_>>()
        .unwrap_or_else(|e| panic!("{}: read: {e}", golden.name))
}

#[test]
fn every_golden_log_reads_back_byte_for_byte() {
    let goldens = golden_files::all();
    assert!(!goldens.is_empty(), "no golden logs in tests/golden");
    for g in &goldens {
        assert!(
            g.format_version <= FORMAT_VERSION,
            "{}: written by format version {}, newer than this build's {FORMAT_VERSION}",
            g.name,
            g.format_version
        );
        let got: Vec<_> = read(g)
            .into_iter()
            .map(|r| (r.lsn, r.kind, r.payload))
            .collect();
        assert_eq!(got.len(), g.records.len(), "{}: record count", g.name);
        for (i, (got, want)) in got.iter().zip(&g.records).enumerate() {
            assert_eq!(got.0, want.0, "{}: record {i}: lsn", g.name);
            assert_eq!(got.1, want.1, "{}: record {i} at {}: kind", g.name, want.0);
            assert!(
                got.2 == want.2,
                "{}: record {i} at {}: payload",
                g.name,
                want.0
            );
        }
        let last_end = read(g).last().map(|r| r.end_lsn);
        assert_eq!(
            last_end,
            Some(g.end_lsn),
            "{}: end of the last record",
            g.name
        );
    }
}

#[test]
fn every_golden_segment_header_is_as_recorded() {
    for g in &golden_files::all() {
        let reader = Reader::open(&g.log, Some(g.keys.clone())).unwrap();
        assert_eq!(reader.mode(), g.mode, "{}", g.name);
        assert_eq!(reader.geometry().page_size, g.page_size, "{}", g.name);
        assert_eq!(reader.geometry().segment_size, g.segment_size, "{}", g.name);
        assert_eq!(reader.log_id(), g.log_id, "{}", g.name);
        let segments: Vec<(String, Vec<u32>)> = reader
            .segments()
            .iter()
            .map(|s| {
                let ids = s.header.key_checks.iter().map(|(id, _)| *id).collect();
                (segment_file_name(s.header.start), ids)
            })
            .collect();
        assert_eq!(
            segments, g.segments,
            "{}: segments and their key ids",
            g.name
        );
        for (file, _) in &g.segments {
            let bytes = std::fs::read(g.log.join(file)).unwrap();
            assert_eq!(bytes[..8], SEGMENT_MAGIC, "{} {file}", g.name);
            let version = u32::from_le_bytes(
                bytes[VERSION_OFFSET..VERSION_OFFSET + 4]
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(
                version, g.format_version,
                "{} {file}: version field",
                g.name
            );
        }
        // Record headers are plaintext outside pagelevel mode: a reader without the key sees
        // every record's position and kind.
        if g.mode != Mode::PageLevel {
            let reader = Reader::open(&g.log, None).unwrap();
            let headers: Vec<(Lsn, u8)> = reader
                .raw_records_from(Lsn::default())
                .map(|r| r.map(|r| (r.lsn, r.header.kind)))
                .collect::<walcrypt::Result<_>>()
                .unwrap_or_else(|e| panic!("{}: headers without the key: {e}", g.name));
            let want: Vec<(Lsn, u8)> = g.records.iter().map(|r| (r.0, r.1)).collect();
            assert_eq!(headers, want, "{}: headers without the key", g.name);
        }
    }
}

#[test]
fn every_golden_log_reopens_and_continues_at_its_end() {
    for g in &golden_files::all() {
        let dir = tempfile::tempdir().unwrap();
        golden_files::copy_log(g, dir.path());
        let config = Config::new(g.mode).keys(g.keys.clone());
        let wal = Wal::open(dir.path(), config.clone())
            .unwrap_or_else(|e| panic!("{}: reopen: {e}", g.name));
        if g.format_version < FORMAT_VERSION {
            // A log of an older version continues in a new segment of the current version
            // (tests/it/older_format_log_continues_in_a_new_segment.rs).
            let end = u64::from(g.end_lsn);
            let next_segment = end.next_multiple_of(g.segment_size);
            assert!(
                u64::from(wal.end_lsn()) >= next_segment,
                "{}: where writing continues: {}",
                g.name,
                wal.end_lsn()
            );
        } else if g.mode == Mode::PageLevel {
            // A reopened pagelevel log continues on the next page, after a resume record.
            assert!(
                wal.end_lsn() > g.end_lsn,
                "{}: where writing continues",
                g.name
            );
        } else {
            assert_eq!(
                wal.end_lsn(),
                g.end_lsn,
                "{}: where writing continues",
                g.name
            );
        }
        let lsn = wal.append(7, b"written by this build").unwrap();
        wal.flush(lsn).unwrap();
        wal.close().unwrap();

        let reader = Reader::open(dir.path(), Some(g.keys.clone())).unwrap();
        let mut got: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| r.map(|r| (r.lsn, r.kind, r.payload)))
            .collect::<walcrypt::Result<_>>()
            .unwrap_or_else(|e| panic!("{}: read after reopen: {e}", g.name));
        assert_eq!(
            got.pop(),
            Some((lsn, 7, b"written by this build".to_vec())),
            "{}",
            g.name
        );
        assert!(got == g.records, "{}: old records after reopen", g.name);
    }
}

/// The current version's goldens keep covering what they are there for, so a regeneration
/// that loses a case fails here.
#[test]
fn current_goldens_cover_modes_torn_tails_rotation_and_spanning_records() {
    let goldens: Vec<Golden> = golden_files::all()
        .into_iter()
        .filter(|g| g.format_version == FORMAT_VERSION)
        .collect();
    let modes: BTreeSet<String> = goldens.iter().map(|g| g.mode.to_string()).collect();
    let all: BTreeSet<String> = Mode::ALL.iter().map(|m| m.to_string()).collect();
    assert_eq!(modes, all, "every mode has a golden");

    for mode in Mode::ALL {
        let of_mode = || goldens.iter().filter(move |g| g.mode == mode);
        // A torn tail: the last segment file ends inside a page, short of its full size.
        assert!(
            of_mode().any(|g| {
                let (last, _) = g.segments.last().unwrap();
                let len = std::fs::metadata(g.log.join(last)).unwrap().len();
                len < g.segment_size && len % g.page_size != 0
            }),
            "{mode}: a golden with a torn tail"
        );
        assert!(
            of_mode().any(|g| g.segments.len() >= 3),
            "{mode}: a golden with several segments"
        );
        let spans = |unit: fn(&Golden) -> u64| {
            of_mode().any(|g| {
                read(g).iter().any(|r| {
                    let (start, end) = (u64::from(r.lsn), u64::from(r.end_lsn));
                    start / unit(g) != (end - 1) / unit(g)
                })
            })
        };
        assert!(spans(|g| g.page_size), "{mode}: a record spanning pages");
        assert!(
            spans(|g| g.segment_size),
            "{mode}: a record spanning segments"
        );
        assert!(
            of_mode().any(|g| g.records.iter().any(|r| r.2.is_empty())),
            "{mode}: an empty record"
        );
        if mode.is_encrypted() {
            assert!(
                of_mode().any(|g| {
                    let ids: BTreeSet<_> = g.segments.iter().flat_map(|(_, ids)| ids).collect();
                    ids.len() >= 2
                }),
                "{mode}: a golden with rotated keys"
            );
        }
    }
}
