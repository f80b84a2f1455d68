//! A reused segment file is not wiped in the encrypted modes: its pages keep their earlier
//! life's bytes until the writer covers them. Inside the pages the writer has written, the log
//! must still be followed by zeros, not by old bytes: there, old bytes are not rejected by
//! their address (the page header is the new one), only by the record checksum, and a
//! plaintext payload is the embedder's bytes, which may hold anything, a record valid at a
//! later LSN included.
//!
//! Here the old life of the file holds, inside a record's payload, a plaintext record whose
//! checksum is right for the LSN at which the new life of the file ends. The reader, a reopen
//! and a follower all stop at the true end and never return that record, also after a torn
//! write: a plaintext log wipes a file it reuses.

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
        now[3 * PAGE as usize..].iter().all(|&b| b == 0)
            && old[3 * PAGE as usize..] != now[3 * PAGE as usize..],
        "a plaintext log's reused file is wiped: the pages not written yet hold zeros, not the old bytes"
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

/// A page of two sectors whose first image in a reused file is torn by a power cut: its first
/// sector lands, its second keeps what the file held before the write. In plaintext that was
/// the earlier life's bytes, an embedder's payload that may hold a record whose checksum is
/// right at the position the new life's log ends at (the file a purge keeps, and the segment
/// it becomes, are predictable); recovery read that record as the log's own. Found by an
/// outside probe. A plaintext log wipes a file it reuses; the other modes' old bytes are
/// ciphertext or a library-made header, rejected at the new position.
#[test]
fn a_torn_first_write_into_a_reused_plaintext_file_never_reads_old_bytes() {
    use crate::support::faults::FaultStorage;
    const PAGE: u64 = 1024;
    const SEGMENT: u64 = 8 * PAGE;
    /// The file offset of the planted record: page 1's second sector.
    const AT: u64 = PAGE + 512;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let storage = FaultStorage::new();
    let config = Config::new(Mode::Plaintext)
        .sync(SyncMode::Buffered)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .prepare_segments(false)
        .recycle_segments(1)
        .storage(storage.arc());
    let wal = Wal::open(&dir, config.clone()).unwrap();
    let header = RECORD_HEADER_PLAIN as u64;
    // The old life: segment 0's page 1 holds, at `AT`, a record valid at `NEW + AT`.
    let first = u64::from(wal.end_lsn());
    assert!(first + header < AT, "the log starts in page 1");
    let mut payload = vec![0u8; (AT - first - header) as usize];
    payload.extend(record_valid_at(2 * SEGMENT + AT, b"never appended here"));
    wal.append(1, &payload).unwrap();
    while u64::from(wal.end_lsn()) < SEGMENT + PAGE {
        wal.append(2, &[0xAA; 300]).unwrap();
    }
    wal.sync().unwrap();
    assert_eq!(wal.purge_before(Lsn(SEGMENT)).unwrap(), 1);
    // The new life: everything durable up to the end of segment 1, then, without a sync, into
    // segment 2 (segment 0's file) until a record ends exactly at `AT`.
    while u64::from(wal.end_lsn()) < 2 * SEGMENT - 400 {
        wal.append(2, &[0xBB; 150]).unwrap();
    }
    wal.sync().unwrap();
    let target = 2 * SEGMENT + AT;
    loop {
        let end = u64::from(wal.end_lsn());
        assert!(end <= target, "passed the target: {end}");
        if end == target {
            break;
        }
        let page_end = (end / PAGE + 1) * PAGE;
        let len = match target <= page_end && target - end >= header {
            true => target - end - header,
            false => (page_end - end).saturating_sub(header).clamp(1, 300),
        };
        wal.append(3, &vec![0xCC; len as usize]).unwrap();
    }
    wal.flush(wal.end_lsn()).unwrap();
    let name = segment_file_name(Lsn(2 * SEGMENT));
    assert!(
        !dir.join(format!("{}.free", segment_file_name(Lsn(0))))
            .exists(),
        "the free file was reused"
    );
    // The crash image: segment 2 as its last fdatasync left it, with the first sector of page
    // 1 from its (torn) first write; the other files as they are.
    let image = tmp.path().join("image");
    std::fs::create_dir_all(&image).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), image.join(entry.file_name())).unwrap();
    }
    let live = std::fs::read(dir.join(&name)).unwrap();
    let mut torn = storage.synced_contents(&dir.join(&name)).unwrap();
    torn.resize(SEGMENT as usize, 0);
    torn[PAGE as usize..AT as usize].copy_from_slice(&live[PAGE as usize..AT as usize]);
    std::fs::write(image.join(&name), &torn).unwrap();
    drop(wal);
    let read: Vec<(Lsn, u8)> = Reader::open(&image, None::<KeyRing>)
        .unwrap()
        .records_from(Lsn(SEGMENT))
        .map(|r| r.map(|r| (r.lsn, r.kind)).unwrap())
        .collect();
    assert!(
        read.iter().all(|&(_, kind)| kind != PLANTED_KIND),
        "the reader returned the earlier life's record"
    );
    assert_eq!(
        read.last().map(|r| r.1),
        Some(3),
        "the log ends with the torn page's records"
    );
    let config = config.storage(std::sync::Arc::new(walcrypt::storage::FsStorage));
    let mut planted = 0;
    let wal = Wal::open_and_replay(&image, config, Lsn(SEGMENT), |r| {
        planted += usize::from(r.kind == PLANTED_KIND);
        Ok(())
    })
    .unwrap();
    assert_eq!(planted, 0, "recovery replayed the earlier life's record");
    assert_eq!(
        u64::from(wal.end_lsn()),
        target,
        "recovery ends at the torn write"
    );
}
