//! A stale but intact record past the end of the log — the exact bytes of a record as written
//! at its own LSN, found at the same offset of a later segment, inside a page whose header is
//! valid, where a reused segment file would still hold them — is never read as a record. The
//! record checksum binds the LSN (format version 3), so at its new position the copy fails
//! it: the reader, `Wal::open` and a follower all stop at the true end, and the writer's next
//! record goes there.
//!
//! Under the version-2 rule the checksum does not depend on the position, so the same copy
//! would pass. Both are shown: the rule itself, and a version-2 golden log in which this build's
//! reader does return a copy planted at its end.

use crate::golden_files;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use walcrypt::inspect::{
    FORMAT_VERSION, Geometry, RecordHeader, header_len_for_flags, record_crc, segment_file_name,
};
use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Reader, Visibility, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 2048;
/// The segment the log ends in, where the stale copy is planted.
const TAIL_SEGMENT: u64 = 3;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .prepare_segments(false)
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

/// Reads `len` bytes at log position `lsn` (which lie in one segment file).
fn read_at(dir: &Path, segment_size: u64, lsn: u64, len: usize) -> Vec<u8> {
    let segment = lsn - lsn % segment_size;
    let file = std::fs::File::open(dir.join(segment_file_name(Lsn(segment)))).unwrap();
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, lsn - segment).unwrap();
    bytes
}

/// Writes `bytes` at log position `lsn` (which lie in one segment file).
fn write_at(dir: &Path, segment_size: u64, lsn: u64, bytes: &[u8]) {
    let segment = lsn - lsn % segment_size;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(segment_file_name(Lsn(segment))))
        .unwrap();
    file.write_all_at(bytes, lsn - segment).unwrap();
}

/// The log as written: every record appended, in order, and where the stale copy goes.
struct Log {
    appended: Vec<(Lsn, Vec<u8>)>,
    /// The record whose bytes are copied, and its length with the header.
    original: Lsn,
    len: usize,
    /// The end of the log: the same offset as `original`, in the tail segment.
    end: u64,
}

/// Writes a log of `mode` whose records in segment 0 are small, then fillers sized so that the
/// log ends exactly at the offset of one of those records in segment `TAIL_SEGMENT`.
fn write_log(dir: &Path, mode: Mode, keys: &KeyRing) -> Log {
    let wal = Wal::open(dir, config(mode, keys)).unwrap();
    let geo = wal.geometry();
    let mut appended = Vec::new();
    let append = |appended: &mut Vec<_>, payload: Vec<u8>| {
        let lsn = wal.append(9, &payload).unwrap();
        appended.push((lsn, payload));
    };
    for i in 0..6u8 {
        append(&mut appended, vec![i; 40]);
    }
    let original = appended[3].0;
    let hlen = if mode.is_per_record() { 32 } else { 12 };
    let tag = if mode.is_authenticated() { 16 } else { 0 };
    let len = hlen + 40 + tag;
    let offset = u64::from(original) % SEGMENT;
    assert!(
        offset % PAGE + len as u64 <= PAGE,
        "the original lies inside one page"
    );
    let end = TAIL_SEGMENT * SEGMENT + offset;
    // Fillers up to `end`: large ones while far from it, then one that ends exactly there.
    let overhead = (hlen + tag) as u64;
    loop {
        let left = stream_len(geo, u64::from(wal.end_lsn()), end);
        if left <= 600 + overhead {
            append(&mut appended, vec![0xEE; (left - overhead) as usize]);
            break;
        }
        append(&mut appended, vec![0xAA; 300]);
    }
    assert_eq!(
        u64::from(wal.end_lsn()),
        end,
        "the log ends at the chosen offset"
    );
    wal.flush(wal.end_lsn()).unwrap();
    wal.close().unwrap();
    Log {
        appended,
        original,
        len,
        end,
    }
}

/// Copies the original record's bytes to the end of the log (same offset, tail segment).
fn plant_stale_copy(dir: &Path, log: &Log) -> Vec<u8> {
    let stale = read_at(dir, SEGMENT, u64::from(log.original), log.len);
    assert!(
        read_at(dir, SEGMENT, log.end, log.len)
            .iter()
            .all(|&b| b == 0),
        "nothing was written after the end of the log"
    );
    write_at(dir, SEGMENT, log.end, &stale);
    assert_eq!(read_at(dir, SEGMENT, log.end, log.len), stale);
    stale
}

/// The stale copy's checksum: right for its own LSN under the current rule, wrong at the end;
/// under the version-2 rule the position would make no difference.
fn check_the_rules(stale: &[u8], original: u64, end: u64) {
    let header = RecordHeader::decode(stale).unwrap();
    let (head, stored) = stale.split_at(header_len_for_flags(header.flags));
    assert_eq!(
        header.crc,
        record_crc(FORMAT_VERSION, Lsn(original), head, stored)
    );
    assert_ne!(
        header.crc,
        record_crc(FORMAT_VERSION, Lsn(end), head, stored)
    );
    assert_eq!(
        record_crc(2, Lsn(original), head, stored),
        record_crc(2, Lsn(end), head, stored),
        "under the version-2 rule a copy checks at any position"
    );
}

#[test]
fn a_stale_copy_at_the_end_of_the_log_is_never_read() {
    for mode in [Mode::Plaintext, Mode::PerRecord, Mode::PerRecordGcm] {
        let keys = KeyRing::generate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log = write_log(dir.path(), mode, &keys);
        let stale = plant_stale_copy(dir.path(), &log);
        check_the_rules(&stale, u64::from(log.original), log.end);
        let want = log.appended.clone();

        // The reader stops at the true end.
        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let mut records = reader.records_from(Lsn::default());
        let got: Vec<_> = records
            .by_ref()
            .map(|r| r.map(|r| (r.lsn, r.payload)))
            .collect::<walcrypt::Result<_>>()
            .unwrap_or_else(|e| panic!("{mode}: read: {e}"));
        assert!(got == want, "{mode}: the reader returns what was appended");
        assert_eq!(
            records.end_lsn(),
            Some(Lsn(log.end)),
            "{mode}: reader's end"
        );

        // So does a follower that reads everything the files hold.
        let mut follower = Follower::open(dir.path(), Some(keys.clone()), Lsn::default())
            .unwrap()
            .visibility(Visibility::Written);
        let mut followed = Vec::new();
        while let Some(r) = follower.next_timeout(Duration::from_millis(50)).unwrap() {
            followed.push((r.lsn, r.payload));
        }
        assert!(
            followed == want,
            "{mode}: the follower yields what was appended"
        );
        assert_eq!(follower.position(), Lsn(log.end), "{mode}: follower's end");

        // Wal::open finds the same end and writes the next record there.
        let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
        assert_eq!(u64::from(wal.end_lsn()), log.end, "{mode}: the open's end");
        let next = wal.append(1, b"after the stale copy").unwrap();
        wal.flush(next).unwrap();
        wal.close().unwrap();
        assert_eq!(u64::from(next), log.end);
        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let mut got: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| r.map(|r| (r.lsn, r.payload)))
            .collect::<walcrypt::Result<_>>()
            .unwrap();
        assert_eq!(got.pop(), Some((next, b"after the stale copy".to_vec())));
        assert!(got == want, "{mode}: every record after the reopen");
    }
}

/// In a version-2 segment the same planting succeeds: this build's reader returns a copy of
/// an earlier record at the end of a version-2 golden log as if it had been written there.
#[test]
fn in_a_version_2_log_the_stale_copy_would_be_read() {
    let goldens = golden_files::all();
    for name in ["v2-plaintext", "v2-perrecord-rotated-keys"] {
        let golden = goldens.iter().find(|g| g.name == name).unwrap();
        let dir = tempfile::tempdir().unwrap();
        golden_files::copy_log(golden, dir.path());
        let reader = Reader::open(dir.path(), Some(golden.keys.clone())).unwrap();
        let geo = reader.geometry();
        let end = u64::from(golden.end_lsn);
        let room = geo.page_start(Lsn(end)).0 + geo.page_size - end;
        // An earlier record in one page, under a key the tail segment lists, that fits there.
        let tail = reader.segments().last().unwrap().header.clone();
        assert_eq!(tail.version, 2, "{name}");
        let raw = reader
            .raw_records_from(Lsn::default())
            .map(|r| r.unwrap())
            .find(|r| {
                let (lsn, len) = (u64::from(r.lsn), (u64::from(r.end_lsn) - u64::from(r.lsn)));
                let key_listed = r.header.encryption.is_none_or(|(id, _)| tail.lists_key(id));
                !r.stored.is_empty()
                    && lsn % geo.page_size + len <= geo.page_size
                    && len <= room
                    && key_listed
            })
            .unwrap_or_else(|| panic!("{name}: a record to copy"));
        assert_eq!(raw.format_version, 2);
        let len = (u64::from(raw.end_lsn) - u64::from(raw.lsn)) as usize;
        let stale = read_at(dir.path(), geo.segment_size, u64::from(raw.lsn), len);
        let header = RecordHeader::decode(&stale).unwrap();
        let (head, stored) = stale.split_at(header.len_bytes());
        assert_eq!(header.crc, record_crc(2, Lsn(end), head, stored), "{name}");
        write_at(dir.path(), geo.segment_size, end, &stale);

        let reader = Reader::open(dir.path(), Some(golden.keys.clone())).unwrap();
        let got: Vec<_> = reader
            .records_from(Lsn::default())
            .collect::<walcrypt::Result<_>>()
            .unwrap();
        assert_eq!(
            got.len(),
            golden.records.len() + 1,
            "{name}: one record more"
        );
        let extra = got.last().unwrap();
        assert_eq!(extra.lsn, Lsn(end), "{name}");
        let copied = golden.records.iter().find(|r| r.0 == raw.lsn).unwrap();
        assert_eq!(
            extra.payload, copied.2,
            "{name}: the copy reads as a record"
        );
    }
}
