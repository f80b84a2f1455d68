//! A log written at an older format version (a copy of each v2, v3 and v4 golden), opened by this
//! build, takes new records in a new segment of the current version: the old segments keep
//! their bytes (the tail segment only gains the switch record that leaves it, by the old
//! version's rules: checksummed without the LSN in version 2, unsealed in a version-3
//! perrecord-gcm log), every new record lies in a segment of the current version and carries
//! its checksum, and the mixed log reads back, replays after a reopen and is followed with
//! every old and new record.

use crate::golden_files;

use std::time::Duration;

use golden_files::Golden;
use walcrypt::inspect::{FORMAT_VERSION, OLDEST_READ_VERSION, segment_file_name};
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
fn an_older_version_log_continues_in_new_version_segments_and_reads_back_whole() {
    for old in OLDEST_READ_VERSION..FORMAT_VERSION {
        continues_and_reads_back_whole(old);
    }
}

fn continues_and_reads_back_whole(old: u32) {
    let goldens = golden_files::of_version(old);
    assert!(!goldens.is_empty(), "goldens of version {old}");
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

        // The old segments before the tail are untouched.
        for (file, _) in &g.segments {
            let start = u64::from_str_radix(file.trim_end_matches(".wal"), 16).unwrap();
            if start < tail_segment {
                let before = std::fs::read(g.log.join(file)).unwrap();
                let after = std::fs::read(dir.path().join(file)).unwrap();
                assert!(before == after, "{} {file}: bytes changed", g.name);
            }
        }

        // Each segment's version: the old one up to the tail segment, the current one after
        // it; old records carry the old version's checksums, new ones the current version's.
        let reader = Reader::open(dir.path(), Some(g.keys.clone())).unwrap();
        for seg in reader.segments() {
            let start = u64::from(seg.header.start);
            let want = if start <= tail_segment {
                old
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
                old
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

/// Rewrites a plaintext log as a version-2 writer would have left it: each record's checksum
/// without the LSN, each segment header at version 2 (its checksum resealed).
fn rewrite_as_version_2(dir: &std::path::Path) {
    use std::os::unix::fs::FileExt;
    use walcrypt::inspect::{
        KCV_ENTRY, RECORD_HEADER_PLAIN, SEG_NKEYS_AT, SEG_VERSION_AT, SEGMENT_HEADER_FIXED,
        record_crc_unbound,
    };
    let reader = Reader::open(dir, None).unwrap();
    let geo = reader.geometry();
    let write_stream = |lsn: u64, bytes: &[u8]| {
        let mut pos = lsn;
        for &b in bytes {
            pos = geo.skip_headers(Lsn(pos)).0;
            let segment = geo.segment_start(Lsn(pos)).0;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join(segment_file_name(Lsn(segment))))
                .unwrap();
            file.write_all_at(&[b], pos - segment).unwrap();
            pos += 1;
        }
    };
    for r in reader.raw_records_from(Lsn::default()) {
        let r = r.unwrap();
        let mut head = [0u8; RECORD_HEADER_PLAIN];
        r.header.encode(&mut head);
        let crc = record_crc_unbound(&head, &r.stored);
        write_stream(u64::from(r.lsn), &crc.to_le_bytes());
    }
    for seg in reader.segments() {
        let path = dir.join(segment_file_name(seg.header.start));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[SEG_VERSION_AT..SEG_VERSION_AT + 4].copy_from_slice(&2u32.to_le_bytes());
        let nkeys = u16::from_le_bytes([bytes[SEG_NKEYS_AT], bytes[SEG_NKEYS_AT + 1]]) as usize;
        let end = SEGMENT_HEADER_FIXED + nkeys * KCV_ENTRY;
        let crc = crc32c::crc32c(&bytes[..end]);
        bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, bytes).unwrap();
    }
}

/// A version-2 log ending 0 to 13 bytes before a segment boundary: where fewer than a switch
/// record's 12 bytes are left, the switch record that leaves the version-2 segment (checked by
/// the version-2 rule) straddles into the next segment, a version-3 one, which then opens with
/// a second switch record of its own (version-3 rule). Every record reads back after the
/// writer continues, and the log reopens.
#[test]
fn a_switch_record_leaving_a_version_2_segment_may_straddle_into_the_next() {
    let config = || {
        Config::new(walcrypt::Mode::Plaintext)
            .page_size(512)
            .segment_size(2048)
            .prepare_segments(false)
    };
    for left in 0..14u64 {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(dir.path(), config()).unwrap();
        let geo = wal.geometry();
        let target = 2 * 2048 - left;
        let mut want: Vec<(Lsn, Vec<u8>)> = Vec::new();
        loop {
            // Record-stream bytes from the end of the log to the target.
            let (mut pos, mut n) = (u64::from(wal.end_lsn()), 0);
            while pos < target {
                pos = geo.skip_headers(Lsn(pos)).0;
                let step = (geo.page_start(Lsn(pos)).0 + geo.page_size).min(target) - pos;
                n += step;
                pos += step;
            }
            if n == 0 {
                break;
            }
            let len = if n <= 500 + 12 { n - 12 } else { 300 };
            let payload = vec![want.len() as u8; len as usize];
            want.push((wal.append(1, &payload).unwrap(), payload));
        }
        assert_eq!(u64::from(wal.end_lsn()), target, "left {left}");
        wal.flush(wal.end_lsn()).unwrap();
        wal.close().unwrap();
        rewrite_as_version_2(dir.path());

        let wal = Wal::open(dir.path(), config()).unwrap();
        for i in 0..10u8 {
            let payload = vec![i; 200];
            want.push((wal.append(2, &payload).unwrap(), payload));
        }
        wal.flush(wal.end_lsn()).unwrap();
        wal.close().unwrap();
        let reader = Reader::open(dir.path(), None).unwrap();
        let versions: Vec<u32> = reader.segments().iter().map(|s| s.header.version).collect();
        assert_eq!(versions[..2], [2, 2], "left {left}");
        assert!(
            versions[2..].iter().all(|&v| v == FORMAT_VERSION),
            "left {left}"
        );
        let got: Vec<(Lsn, Vec<u8>)> = reader
            .records_from(Lsn::default())
            .map(|r| r.map(|r| (r.lsn, r.payload)))
            .collect::<walcrypt::Result<_>>()
            .unwrap_or_else(|e| panic!("left {left}: {e}"));
        assert!(got == want, "left {left}: every record");
        Wal::open(dir.path(), config()).unwrap().close().unwrap();
    }
}
