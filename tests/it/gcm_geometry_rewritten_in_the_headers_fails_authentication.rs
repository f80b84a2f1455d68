//! perrecord-gcm: the geometry in the segment headers (page and segment size) is protected by
//! a checksum only, and it decides which pages are segment header pages and where a segment
//! switch continues. Rewritten without the key, with files padded, split or removed to match,
//! it used to cut records out of the middle of the log: every record still read kept a valid
//! tag, so the Reader, a Follower and replay at open returned fewer records and no error (an
//! outside security probe found it). From format version 5 every tag's associated data
//! carries the geometry, so every record read under another one fails its tag.

use crate::support;

use std::path::Path;

use support::tamper::rewrite_segment_headers;
use support::{copy_dir, payload};
use walcrypt::inspect::{parse_segment_file_name, segment_file_name};
use walcrypt::{Config, Error, Follower, KeyRing, Lsn, Mode, Reader, SyncMode, Visibility, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;

fn config(keys: &KeyRing) -> Config {
    Config::new(Mode::PerRecordGcm)
        .keys(keys.clone())
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .buffer_size(8 * PAGE as usize)
        .prepare_segments(false)
        .sync(SyncMode::Durable)
}

/// Who read, the payloads it returned, and the error it stopped at.
type Read = (&'static str, Vec<Vec<u8>>, Option<Error>);

/// Every record the three readers return, or the first error each meets: the Reader, a
/// Follower, and replay at open (on a copy, with a configuration that leaves the geometry to
/// the log, as an embedder's default one does).
fn read_three_ways(dir: &Path, keys: &KeyRing) -> Vec<Read> {
    let mut out = Vec::new();
    let reader = Reader::open(dir, Some(keys.clone()))
        .unwrap()
        .require_mode(Mode::PerRecordGcm)
        .unwrap();
    let (mut got, mut error) = (Vec::new(), None);
    for r in reader.records_from(Lsn::default()) {
        match r {
            Ok(r) => got.push(r.payload),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    out.push(("reader", got, error));

    let mut follower = Follower::open(dir, Some(keys.clone()), Lsn::default())
        .unwrap()
        .visibility(Visibility::Written);
    let (mut got, mut error) = (Vec::new(), None);
    loop {
        match follower.poll() {
            Ok(Some(r)) => got.push(r.payload),
            Ok(None) => break,
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    out.push(("follower", got, error));

    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir, copy.path());
    let mut got = Vec::new();
    let default_geometry = Config::new(Mode::PerRecordGcm).keys(keys.clone());
    let error = match Wal::open_and_replay(copy.path(), default_geometry, Lsn::default(), |r| {
        got.push(r.payload);
        Ok(())
    }) {
        Ok(wal) => {
            wal.close().unwrap();
            None
        }
        Err(e) => Some(e),
    };
    out.push(("replay", got, error));
    out
}

/// What must hold for any rewrite: each reader returns the acknowledged records in order and
/// in full, or stops with an error, having returned only a prefix of them. Returns whether
/// every reader met an error.
fn no_silent_gap(what: &str, dir: &Path, keys: &KeyRing, acknowledged: &[Vec<u8>]) -> bool {
    let mut all_failed = true;
    for (who, got, error) in read_three_ways(dir, keys) {
        assert!(
            got.len() <= acknowledged.len() && got[..] == acknowledged[..got.len()],
            "{what}: {who} returned records out of order, altered, or with a gap"
        );
        match error {
            None => {
                assert_eq!(
                    got.len(),
                    acknowledged.len(),
                    "{what}: {who} returned {} of {} acknowledged records and no error",
                    got.len(),
                    acknowledged.len()
                );
                all_failed = false;
            }
            Some(e) => assert!(
                matches!(
                    e,
                    Error::AuthenticationFailed { .. }
                        | Error::Corrupt { .. }
                        | Error::Mismatch { .. }
                ),
                "{what}: {who} failed with {e:?}"
            ),
        }
    }
    all_failed
}

fn segment_files(dir: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let start = parse_segment_file_name(path.file_name()?.to_str()?)?;
            Some((u64::from(start), path))
        })
        .collect();
    out.sort();
    out
}

/// Three opens, each with a newly rotated key, so that each of the first segments ends with a
/// sealed switch; every record flushed. The attack doubles the segment size in the headers,
/// pads the segments it keeps to it and removes every other one: each switch then continues
/// two segments on, over a whole segment of acknowledged records.
#[test]
fn a_doubled_segment_size_does_not_skip_segments_after_switches() {
    let dir = tempfile::tempdir().unwrap();
    let mut keys = KeyRing::generate().unwrap();
    let mut acknowledged = Vec::new();
    for round in 0..3u64 {
        if round > 0 {
            keys.rotate().unwrap();
        }
        let wal = Wal::open(dir.path(), config(&keys)).unwrap();
        for i in 0..10 {
            let body = payload(round * 100 + i, 40);
            let lsn = wal.append(1, &body).unwrap();
            wal.flush(lsn).unwrap();
            acknowledged.push(body);
        }
        wal.close().unwrap();
    }
    let segments = segment_files(dir.path());
    assert!(segments.len() >= 3, "{segments:?}");
    // Untouched, every reader returns everything.
    assert!(!no_silent_gap(
        "untouched",
        dir.path(),
        &keys,
        &acknowledged
    ));

    for (start, path) in &segments {
        if (start / SEGMENT) % 2 == 1 {
            std::fs::remove_file(path).unwrap();
        }
    }
    rewrite_segment_headers(dir.path(), |h| h.geometry.segment_size = 2 * SEGMENT);
    for (_, path) in segment_files(dir.path()) {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.set_len(2 * SEGMENT).unwrap();
    }
    assert!(
        no_silent_gap("doubled segment size", dir.path(), &keys, &acknowledged),
        "a reader took the rewritten geometry without an error"
    );
}

/// One segment of records that each fill a page body; the attack halves the segment size in
/// the header and splits the file in two, the second half's first page becoming a header page:
/// the record on that page would disappear between two that read.
#[test]
fn a_halved_segment_size_does_not_turn_a_page_of_records_into_a_header() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), config(&keys).segment_size(16 * PAGE)).unwrap();
    // 48-byte page header, 32-byte record header, 16-byte tag: a 416-byte payload fills a
    // 512-byte page body exactly, so every page starts with a record.
    let mut acknowledged = Vec::new();
    for i in 0..12 {
        let body = payload(i, 416);
        let lsn = wal.append(1, &body).unwrap();
        wal.flush(lsn).unwrap();
        acknowledged.push(body);
    }
    wal.close().unwrap();
    for (start, path) in segment_files(dir.path()) {
        if start > 0 {
            std::fs::remove_file(path).unwrap();
        }
    }
    let first = dir.path().join(segment_file_name(Lsn(0)));
    let bytes = std::fs::read(&first).unwrap();
    let half = (8 * PAGE) as usize;
    let mut second = bytes[half..].to_vec();
    second[..PAGE as usize].copy_from_slice(&bytes[..PAGE as usize]);
    std::fs::write(dir.path().join(segment_file_name(Lsn(8 * PAGE))), &second).unwrap();
    std::fs::write(&first, &bytes[..half]).unwrap();
    let mut starts = [0u64, 8 * PAGE].into_iter();
    rewrite_segment_headers(dir.path(), |h| {
        h.geometry.segment_size = 8 * PAGE;
        h.start = Lsn(starts.next().unwrap());
    });
    assert!(
        no_silent_gap("halved segment size", dir.path(), &keys, &acknowledged),
        "a reader took the rewritten geometry without an error"
    );
}
