//! A partly filled page is rewritten when more records join it. If power fails during that
//! rewrite and the device tears it at a 512-byte sector boundary:
//!
//! * plaintext and perrecord rewrite the earlier bytes identically, so records flushed before
//!   survive any mix of old and new sectors;
//! * pagelevel re-encrypts the whole page under a fresh IV, so old and new sectors do not
//!   decrypt together. With the new header sector (sectors written in order) the header's
//!   durable hint proves the damaged record was durable: reported as corruption. With the old
//!   header over new sectors (a device that reorders sectors) nothing in the page proves it,
//!   and the record is lost at the end of the log: the documented limit of pagelevel mode on
//!   devices without page-sized atomic writes. In no case is a wrong payload returned.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use walcrypt::{Config, Error, KeyRing, Lsn, Mode, SyncMode, Wal};

const PAGE: u64 = 1024;
const SECTOR: usize = 512;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(16 * 1024)
}

fn page1(dir: &Path) -> Vec<u8> {
    let mut page = vec![0u8; PAGE as usize];
    let file = std::fs::File::open(dir.join("0000000000000000.wal")).unwrap();
    file.read_exact_at(&mut page, PAGE).unwrap();
    page
}

/// Builds a log whose page 1 holds record A (flushed, crossing the first sector boundary),
/// then rewrites page 1 by flushing record B. Returns (page 1 before, page 1 after).
fn two_versions(dir: &Path, mode: Mode, keys: &KeyRing) -> (Vec<u8>, Vec<u8>) {
    let wal = Wal::open(dir, config(mode, keys)).unwrap();
    let a = wal.append(1, &[0xA5; 600]).unwrap();
    wal.flush(a).unwrap();
    let before = page1(dir);
    let b = wal.append(2, &[0x5B; 20]).unwrap();
    wal.flush(b).unwrap();
    let after = page1(dir);
    wal.close().unwrap();
    (before, after)
}

/// Writes a torn page 1 (`first` sector from one version, the rest from the other) into a
/// copy of the log with only record A durable, then opens it.
fn open_torn(mode: Mode, header_from_new: bool) -> (walcrypt::Result<Vec<Vec<u8>>>, bool) {
    let keys = KeyRing::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = two_versions(dir.path(), mode, &keys);
    let (first, rest) = if header_from_new {
        (&new, &old)
    } else {
        (&old, &new)
    };
    let mut torn = rest.clone();
    torn[..SECTOR].copy_from_slice(&first[..SECTOR]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("0000000000000000.wal"))
        .unwrap();
    file.write_all_at(&torn, PAGE).unwrap();
    drop(file);
    // Record B was never acknowledged in this story: the crash hit its flush.
    let reader_result = common::read_all(dir.path(), &keys);
    let mut replayed = Vec::new();
    let opened = Wal::open_and_replay(dir.path(), config(mode, &keys), Lsn::default(), |r| {
        replayed.push(r.payload);
        Ok(())
    });
    let open_ok = opened.is_ok();
    match (&reader_result, &opened) {
        (Ok(records), Ok(_)) => {
            let read: Vec<Vec<u8>> = records.iter().map(|r| r.payload.clone()).collect();
            assert_eq!(read, replayed, "{mode}: reader and recovery disagree");
        }
        (Err(_), Err(_)) => {}
        (r, o) => panic!("{mode}: reader {r:?} but open {:?}", o.as_ref().err()),
    }
    for p in &replayed {
        assert!(
            p == &vec![0xA5; 600] || p == &vec![0x5B; 20],
            "{mode}: wrong payload returned"
        );
    }
    (
        reader_result.map(|v| v.into_iter().map(|r| r.payload).collect()),
        open_ok,
    )
}

#[test]
fn plaintext_and_perrecord_keep_flushed_records_through_any_torn_rewrite() {
    for mode in [Mode::Plaintext, Mode::PerRecord] {
        for header_from_new in [true, false] {
            let (records, _) = open_torn(mode, header_from_new);
            let records = records.unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert!(
                !records.is_empty() && records[0] == vec![0xA5; 600],
                "{mode} (new header: {header_from_new}): flushed record A lost"
            );
        }
    }
}

#[test]
fn pagelevel_torn_rewrite_with_the_new_header_is_reported_as_corruption() {
    let (records, open_ok) = open_torn(Mode::PageLevel, true);
    match records {
        Err(Error::Corrupt { at, .. }) => {
            assert_eq!(at.lsn, Lsn(PAGE + 48), "the damaged record is named");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert!(
        !open_ok,
        "Wal::open must refuse, not truncate, the flushed record"
    );
}

#[test]
fn pagelevel_torn_rewrite_with_the_old_header_loses_the_record_without_garbage() {
    // The known limit: the old header's durable hint predates record A, so nothing proves A
    // was durable and the log ends before it. No wrong payload is returned.
    let (records, open_ok) = open_torn(Mode::PageLevel, false);
    let records = records.unwrap();
    assert!(records.is_empty(), "{} records", records.len());
    assert!(open_ok);
}
