//! A reused segment file is not wiped: its pages keep their earlier life's bytes until the
//! writer covers them. Inside the pages the writer has written, the log must still be followed
//! by zeros, not by those old bytes: there, old bytes are not rejected by their address (the
//! page header is the new one), only by the record checksum, and a plaintext payload is the
//! embedder's bytes, which may hold anything, a record valid at a later LSN included.
//!
//! Here the old life of the file holds, inside a record's payload, a plaintext record whose
//! checksum is right for the LSN at which the new life of the file ends. The writer writes the
//! first image of each page of a reused file to the page's end, so the reader, a reopen and a
//! follower all stop at the true end and never return that record.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use walcrypt::inspect::{
    FORMAT_VERSION, Geometry, RECORD_HEADER_PLAIN, RecordHeader, record_crc, segment_file_name,
};
use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Reader, SyncMode, Visibility, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;
/// The segment the purged segment 0's file becomes.
const NEW: u64 = 2 * SEGMENT;
/// Payload length of the first record, and where in it the planted record starts.
const FIRST_LEN: usize = 400;
const PLANTED_AT: usize = 100;
const PLANTED_KIND: u8 = 77;

fn config() -> Config {
    Config::new(Mode::Plaintext)
        .sync(SyncMode::Buffered)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .prepare_segments(false)
        .recycle_segments(1)
}

/// Record-stream bytes from `from` to `to` (a position inside a page body), headers skipped.
fn stream_len(geo: Geometry, from: u64, to: u64) -> u64 {
    let (mut pos, mut n) = (from, 0);
    while pos < to {
        pos = geo.skip_headers(Lsn(pos)).0;
        let step = (geo.page_start(Lsn(pos)).0 + geo.page_size).min(to) - pos;
        n += step;
        pos += step;
    }
    n
}

/// A plaintext record (header and payload) whose checksum is right at `lsn`.
fn record_valid_at(lsn: u64, payload: &[u8]) -> Vec<u8> {
    let mut header = RecordHeader {
        crc: 0,
        len: payload.len() as u32,
        kind: PLANTED_KIND,
        flags: 0,
        encryption: None,
    };
    let mut bytes = vec![0u8; RECORD_HEADER_PLAIN];
    header.encode(&mut bytes);
    header.crc = record_crc(FORMAT_VERSION, Lsn(lsn), &bytes, payload);
    header.encode(&mut bytes);
    bytes.extend_from_slice(payload);
    bytes
}

fn read_segment(dir: &Path, start: u64) -> Vec<u8> {
    std::fs::read(dir.join(segment_file_name(Lsn(start)))).unwrap()
}

fn check_records(dir: &Path, written: &BTreeMap<Lsn, Vec<u8>>, what: &str) {
    let read: Vec<(Lsn, u8, Vec<u8>)> = Reader::open(dir, None::<KeyRing>)
        .unwrap()
        .records_from(Lsn::default())
        .map(|r| {
            let r = r.unwrap_or_else(|e| panic!("{what}: {e}"));
            (r.lsn, r.kind, r.payload)
        })
        .collect();
    for (lsn, kind, payload) in &read {
        assert_ne!(
            *kind, PLANTED_KIND,
            "{what}: the planted record was read at {lsn}"
        );
        assert_eq!(written.get(lsn), Some(payload), "{what}: record at {lsn}");
    }
    assert_eq!(
        read.last().map(|r| r.0),
        written.keys().next_back().copied(),
        "{what}: the last record"
    );
}

#[test]
fn old_bytes_of_a_reused_file_past_the_end_are_never_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let wal = Wal::open(dir, config()).unwrap();
    let geo = wal.geometry();
    let mut written = BTreeMap::new();

    // The first record of segment 0, in its page 1, carries a record valid at the position
    // `end` will have in segment `NEW`.
    let first = geo.skip_headers(Lsn(0)).0;
    let offset = first + RECORD_HEADER_PLAIN as u64 + PLANTED_AT as u64;
    let end = NEW + offset;
    let planted = record_valid_at(end, b"never appended at this position");
    let mut payload = vec![0x5A; FIRST_LEN];
    payload[PLANTED_AT..PLANTED_AT + planted.len()].copy_from_slice(&planted);
    let lsn = wal.append(1, &payload).unwrap();
    assert_eq!(u64::from(lsn), first);
    assert!(first + (RECORD_HEADER_PLAIN + FIRST_LEN) as u64 <= 2 * PAGE);
    written.insert(lsn, payload);
    let append = |written: &mut BTreeMap<Lsn, Vec<u8>>, payload: Vec<u8>| {
        let lsn = wal.append(2, &payload).unwrap();
        wal.flush(wal.end_lsn()).unwrap();
        written.insert(lsn, payload);
    };
    while u64::from(wal.end_lsn()) < SEGMENT + PAGE {
        append(&mut written, vec![0xAA; 300]);
    }
    // Segment 0 is purged and kept for reuse, its old bytes in it.
    assert_eq!(wal.purge_before(Lsn(SEGMENT)).unwrap(), 1);
    written.retain(|lsn, _| u64::from(*lsn) >= SEGMENT);
    let free = dir.join(format!("{}.free", segment_file_name(Lsn(0))));
    let old = std::fs::read(&free).unwrap();
    assert_eq!(
        &old[offset as usize..offset as usize + planted.len()],
        planted.as_slice()
    );

    // The log goes on into segment `NEW`, made from that file, and ends exactly at `end`.
    let overhead = RECORD_HEADER_PLAIN as u64;
    loop {
        let left = stream_len(geo, u64::from(wal.end_lsn()), end);
        if left <= 600 + overhead {
            append(&mut written, vec![0xEE; (left - overhead) as usize]);
            break;
        }
        append(&mut written, vec![0xAA; 300]);
    }
    assert_eq!(
        u64::from(wal.end_lsn()),
        end,
        "the log ends at the chosen offset"
    );
    assert!(!free.exists(), "the free file was reused");
    let now = read_segment(dir, NEW);
    assert!(
        now[3 * PAGE as usize..] == old[3 * PAGE as usize..],
        "the pages not written yet keep the file's old bytes (no wipe)"
    );
    // A follower started now stops at the end.
    let mut follower = Follower::open(dir, None::<KeyRing>, Lsn::default())
        .unwrap()
        .visibility(Visibility::Written);
    let mut followed = Vec::new();
    while let Some(r) = follower.next_timeout(Duration::from_millis(200)).unwrap() {
        followed.push((r.lsn, r.kind));
    }
    assert!(
        followed.iter().all(|(_, kind)| *kind != PLANTED_KIND),
        "the follower read the planted record"
    );
    assert_eq!(
        followed.last().map(|r| r.0),
        written.keys().next_back().copied()
    );
    assert_eq!(follower.position(), Lsn(end), "the follower's end");

    check_records(dir, &written, "live");
    assert!(
        now[offset as usize..2 * PAGE as usize]
            .iter()
            .all(|&b| b == 0),
        "the page the log ends in holds zeros after the end"
    );
    wal.close().unwrap();
    check_records(dir, &written, "closed");

    // A reopen finds the same end and writes its next record there.
    let wal = Wal::open(dir, config()).unwrap();
    assert_eq!(u64::from(wal.end_lsn()), end, "reopened");
    let lsn = wal.append(3, b"after the reopen").unwrap();
    assert_eq!(u64::from(lsn), end);
    written.insert(lsn, b"after the reopen".to_vec());
    wal.close().unwrap();
    check_records(dir, &written, "reopened");
}
