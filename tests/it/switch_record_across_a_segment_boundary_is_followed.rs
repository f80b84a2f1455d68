//! A segment-switch record goes wherever the log ends, so when a key rotation comes with fewer
//! bytes left in the segment than the record's 12, the record straddles the segment boundary:
//! its last bytes open the next segment's first page (whose `rem_len` counts them). The writer
//! then leaves that segment unused too and continues in the one after it; the readers must
//! follow it there (`Geometry::after_switch`). They used to continue in the segment holding the
//! record's tail, read that tail as a record, and report the log as corrupt: it could not be
//! opened again.
//!
//! For every tail length in both encrypted CTR modes (1-11) and in perrecord-gcm (1-47: there
//! the switch record is sealed, 32 bytes of header and a 16-byte tag): records up to that
//! point, a rotation, more records, then a reopen and a plain read return every record.
//!
//! The segment holding only the tail says so itself with a second switch record right after
//! the tail. A purge up to that segment's start removes the segment before it and keeps that
//! one, which is then the oldest (as a crash in the middle of a purge up to the records after
//! it can leave it too: the removals are not ordered before the directory sync), and a reader
//! that starts there must still find its way to the records. It used to meet the unused rest
//! of the segment and report damage, and a repair would have cut the records after it.

use crate::support;

use support::payload;
use walcrypt::{Config, Key, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;
/// Stored size of a switch record: the plain record header, no payload; in perrecord-gcm a
/// sealed one, the header with key id and IV and a tag.
fn switch_len(mode: Mode) -> u64 {
    if mode == Mode::PerRecordGcm { 48 } else { 12 }
}

const MODES: [Mode; 3] = [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm];

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

/// Stored size of a record with no payload in `mode`.
fn header_len(mode: Mode) -> u64 {
    match mode {
        Mode::PerRecord => 32,
        Mode::PerRecordGcm => 48,
        _ => 12,
    }
}

/// Appends records until the log ends `left` bytes before the end of a segment.
fn append_to_leave(wal: &Wal, mode: Mode, left: u64, expected: &mut Vec<(Lsn, Vec<u8>)>) {
    let mut seed = expected.len() as u64;
    loop {
        let end = u64::from(wal.end_lsn());
        let room = SEGMENT - end % SEGMENT;
        if room == left && end % SEGMENT != 0 {
            return;
        }
        // In the segment's last page, one record can leave exactly `left`.
        let len = if room < PAGE && room >= left + header_len(mode) {
            room - left - header_len(mode)
        } else {
            150
        };
        let p = payload(seed, len as usize);
        let lsn = wal.append(1, &p).unwrap();
        wal.flush(lsn).unwrap();
        expected.push((lsn, p));
        seed += 1;
    }
}

/// Appends records until `left` bytes remain in a segment, then activates key 2 (added to
/// `keys`), whose switch record takes the rest and runs into the next segment. Returns the start
/// of the segment holding the tail.
fn rotate_leaving(
    wal: &Wal,
    mode: Mode,
    keys: &mut KeyRing,
    left: u64,
    expected: &mut Vec<(Lsn, Vec<u8>)>,
) -> u64 {
    append_to_leave(wal, mode, left, expected);
    let before = u64::from(wal.end_lsn());
    let key = Key::generate().unwrap();
    keys.add(2, key.clone()).unwrap();
    wal.activate_key(2, key).unwrap();
    before - before % SEGMENT + SEGMENT
}

/// Appends and durably flushes four records of 200 bytes, seeded from `seed`.
fn append_four(wal: &Wal, seed: u64, expected: &mut Vec<(Lsn, Vec<u8>)>) {
    for i in 0..4 {
        let p = payload(seed + i, 200);
        let lsn = wal.append(1, &p).unwrap();
        wal.flush(lsn).unwrap();
        expected.push((lsn, p));
    }
}

/// A plain read and a reopen of the log in `dir` both return exactly `expected`.
fn assert_reads_back(
    dir: &std::path::Path,
    mode: Mode,
    keys: &KeyRing,
    expected: &[(Lsn, Vec<u8>)],
    what: &str,
) {
    let read: Vec<(Lsn, Vec<u8>)> = Reader::open(dir, Some(keys.clone()))
        .unwrap()
        .records_from(Lsn::default())
        .map(|r| r.map(|r| (r.lsn, r.payload)))
        .collect::<walcrypt::Result<_>>()
        .unwrap_or_else(|e| panic!("{what}: read: {e}"));
    assert_eq!(read, expected, "{what}");
    let mut replayed = Vec::new();
    let wal = Wal::open_and_replay(dir, config(mode, keys), Lsn::default(), |r| {
        replayed.push((r.lsn, r.payload));
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    assert_eq!(replayed, expected, "{what}");
    wal.close().unwrap();
}

#[test]
fn every_record_reads_back_after_a_switch_record_with_its_tail_in_the_next_segment() {
    for mode in MODES {
        for left in 1..switch_len(mode) {
            let what = format!(
                "{mode}, switch record with {} bytes over",
                switch_len(mode) - left
            );
            let dir = tempfile::tempdir().unwrap();
            let mut keys = KeyRing::generate().unwrap();
            let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
            let mut expected = Vec::new();
            let tail_segment = rotate_leaving(&wal, mode, &mut keys, left, &mut expected);
            assert_eq!(
                wal.end_lsn(),
                Lsn(tail_segment + SEGMENT),
                "{what}: the log continues in the segment after the one holding the tail"
            );
            append_four(&wal, 1000, &mut expected);
            wal.close().unwrap();
            assert_reads_back(dir.path(), mode, &keys, &expected, &what);
        }
    }
}

#[test]
fn a_purge_that_leaves_the_tail_segment_oldest_keeps_every_later_record() {
    for mode in MODES {
        for left in 1..switch_len(mode) {
            let what = format!(
                "{mode}, {} bytes of the switch record over",
                switch_len(mode) - left
            );
            let dir = tempfile::tempdir().unwrap();
            let mut keys = KeyRing::generate().unwrap();
            let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
            let tail_segment = rotate_leaving(&wal, mode, &mut keys, left, &mut Vec::new());
            let mut expected = Vec::new();
            append_four(&wal, 2000, &mut expected);
            assert!(
                wal.purge_before(Lsn(tail_segment)).unwrap() > 0,
                "{what}: purged"
            );
            wal.close().unwrap();
            assert_eq!(
                oldest_segment(dir.path()),
                tail_segment,
                "{what}: the tail's segment is the oldest"
            );
            assert_reads_back(dir.path(), mode, &keys, &expected, &what);
        }
    }
}

/// Start of the oldest segment file in `dir` (names are the start LSN in 16 hex digits).
fn oldest_segment(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            u64::from_str_radix(name.strip_suffix(".wal")?, 16).ok()
        })
        .min()
        .unwrap()
}
