//! A log written at format version 2 (a copy of each v2 golden), opened by this build, takes
//! new records in a new segment of the current version: the version-2 segments keep their
//! bytes (the tail segment only gains the switch record that leaves it, checksummed by the
//! version-2 rule), every new record lies in a version-3 segment and carries a version-3
//! checksum, and the mixed log reads back, replays after a reopen and is followed with every
//! old and new record.

mod golden_files;

use std::time::Duration;

use golden_files::Golden;
use walcrypt::inspect::{FORMAT_VERSION, segment_file_name};
use walcrypt::{Config, Follower, Lsn, Reader, Visibility, Wal};

type Rec = (Lsn, u8, Vec<u8>);

fn read_all(golden: &Golden, dir: &std::path::Path) -> Vec<Rec> {
    let reader = Reader::open(dir, Some(golden.keys.clone())).unwrap();
    reader
        .records_from(Lsn::default())
        .map(|r| r.map(|r| (r.lsn, r.kind, r.payload)))
        .collect::<walcrypt::Result<_>>()
        .unwrap_or_else(|e| panic!("{}: read: {e}", golden.name))
}

/// Appends records of sizes that span pages and a segment; returns them.
fn append_some(wal: &Wal, golden: &Golden, tag: u8) -> Vec<Rec> {
    let sizes = [
        0,
        5,
        100,
        golden.page_size as usize,
        golden.segment_size as usize,
    ];
    let mut out = Vec::new();
    for (i, len) in sizes.into_iter().enumerate() {
        let payload: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8 ^ tag).collect();
        let lsn = wal.append(tag, &payload).unwrap();
        out.push((lsn, tag, payload));
    }
    wal.flush(wal.end_lsn()).unwrap();
    out
}

fn config(golden: &Golden) -> Config {
    Config::new(golden.mode).keys(golden.keys.clone())
}

#[test]
fn a_version_2_log_continues_in_version_3_segments_and_reads_back_whole() {
    let goldens: Vec<Golden> = golden_files::all()
        .into_iter()
        .filter(|g| g.format_version == 2)
        .collect();
    assert!(!goldens.is_empty(), "no version-2 goldens");
    for g in &goldens {
        let dir = tempfile::tempdir().unwrap();
        golden_files::copy_log(g, dir.path());
        let end = u64::from(g.end_lsn);
        let tail_segment = end - end % g.segment_size;

        // First open: writing continues in the next segment.
        let wal = Wal::open(dir.path(), config(g)).unwrap();
        assert!(
            u64::from(wal.end_lsn()) >= end.next_multiple_of(g.segment_size),
            "{}: continues at {}",
            g.name,
            wal.end_lsn()
        );
        let first = append_some(&wal, g, 0x5A);
        wal.close().unwrap();

        // The version-2 segments before the tail are untouched.
        for (file, _) in &g.segments {
            let start = u64::from_str_radix(file.trim_end_matches(".wal"), 16).unwrap();
            if start < tail_segment {
                let before = std::fs::read(g.log.join(file)).unwrap();
                let after = std::fs::read(dir.path().join(file)).unwrap();
                assert!(before == after, "{} {file}: bytes changed", g.name);
            }
        }

        // Each segment's version: 2 up to the tail segment, 3 after it; old records carry
        // version-2 checksums, new ones version-3 checksums.
        let reader = Reader::open(dir.path(), Some(g.keys.clone())).unwrap();
        for seg in reader.segments() {
            let start = u64::from(seg.header.start);
            let want = if start <= tail_segment {
                2
            } else {
                FORMAT_VERSION
            };
            assert_eq!(
                seg.header.version,
                want,
                "{} {}",
                g.name,
                segment_file_name(seg.header.start)
            );
        }
        let raw: Vec<_> = reader
            .raw_records_from(Lsn::default())
            .collect::<walcrypt::Result<_>>()
            .unwrap();
        assert_eq!(raw.len(), g.records.len() + first.len(), "{}", g.name);
        for (i, r) in raw.iter().enumerate() {
            let want = if i < g.records.len() {
                2
            } else {
                FORMAT_VERSION
            };
            assert_eq!(r.format_version, want, "{}: record at {}", g.name, r.lsn);
        }

        let mut want: Vec<Rec> = g.records.clone();
        want.extend(first.iter().cloned());
        assert!(
            read_all(g, dir.path()) == want,
            "{}: after the first open",
            g.name
        );

        // A second open replays the mixed log from its oldest record, then writes on.
        let mut replayed = Vec::new();
        let wal = Wal::open_and_replay(dir.path(), config(g), Lsn::default(), |r| {
            replayed.push((r.lsn, r.kind, r.payload));
            Ok(())
        })
        .unwrap();
        assert!(replayed == want, "{}: replay after reopen", g.name);
        let second = append_some(&wal, g, 0xA5);
        wal.close().unwrap();
        want.extend(second);
        assert!(
            read_all(g, dir.path()) == want,
            "{}: after the second open",
            g.name
        );

        // A follower reads across the change of version.
        let mut follower = Follower::open(dir.path(), Some(g.keys.clone()), Lsn::default())
            .unwrap()
            .visibility(Visibility::Written);
        let mut followed = Vec::new();
        while let Some(r) = follower.next_timeout(Duration::from_millis(20)).unwrap() {
            followed.push((r.lsn, r.kind, r.payload));
        }
        assert!(followed == want, "{}: follower", g.name);
    }
}
