//! perrecord-gcm: two records of equal length swapped in the files, their checksums recomputed
//! for their new positions (the CRC binds the LSN, but anyone can recompute a CRC), both fail
//! authentication, since the tag binds each to its LSN with a key. In perrecord (CTR) the same
//! swap goes unnoticed.

use crate::support;

use support::tamper::{fix_crc, single_page_records, write_at};
use support::{append_all, payload, small_config};
use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, Wal};

/// Writes 40 records of one length and swaps two that each lie inside one page, with their
/// checksums recomputed; returns the log, the LSNs and the indexes swapped.
fn swapped(mode: Mode, keys: &KeyRing) -> (tempfile::TempDir, Vec<Lsn>, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(mode, keys)).unwrap();
    let records: Vec<_> = (0..40).map(|i| (3u8, payload(i, 64))).collect();
    let lsns = append_all(&wal, &records);
    wal.close().unwrap();
    let singles = single_page_records(dir.path());
    let a = singles.iter().find(|r| r.lsn > u64::from(lsns[5])).unwrap();
    let b = singles
        .iter()
        .rev()
        .find(|r| r.lsn < u64::from(lsns[35]))
        .unwrap();
    assert_eq!(a.bytes.len(), b.bytes.len());
    let (mut a_moved, mut b_moved) = (a.bytes.clone(), b.bytes.clone());
    fix_crc(&mut a_moved, b.lsn);
    fix_crc(&mut b_moved, a.lsn);
    write_at(dir.path(), a.lsn, &b_moved);
    write_at(dir.path(), b.lsn, &a_moved);
    let index = |lsn: u64| lsns.iter().position(|l| u64::from(*l) == lsn).unwrap();
    let (i, j) = (index(a.lsn), index(b.lsn));
    (dir, lsns, i, j)
}

fn first_result(reader: &Reader, lsn: Lsn) -> walcrypt::Result<walcrypt::Record> {
    reader.records_from(lsn).next().unwrap()
}

#[test]
fn swapped_records_of_equal_length_fail_authentication() {
    let keys = KeyRing::generate().unwrap();
    let (dir, lsns, i, j) = swapped(Mode::PerRecordGcm, &keys);
    let reader = Reader::open(dir.path(), Some(keys)).unwrap();
    let all: Vec<_> = reader.records_from(Lsn::default()).collect();
    assert_eq!(
        all.len(),
        i + 1,
        "reading stops at the first swapped record"
    );
    for lsn in [lsns[i], lsns[j]] {
        match first_result(&reader, lsn) {
            Err(Error::AuthenticationFailed { at, .. }) => assert_eq!(at.lsn, lsn),
            other => panic!("record at {lsn}: expected an authentication failure, got {other:?}"),
        }
    }
    // The records around them are untouched and still read.
    assert_eq!(
        first_result(&reader, lsns[i + 1]).unwrap().payload,
        payload(i as u64 + 1, 64)
    );
}

#[test]
fn in_a_ctr_log_the_swap_goes_unnoticed() {
    let keys = KeyRing::generate().unwrap();
    let (dir, lsns, i, j) = swapped(Mode::PerRecord, &keys);
    let reader = Reader::open(dir.path(), Some(keys)).unwrap();
    assert_eq!(
        first_result(&reader, lsns[i]).unwrap().payload,
        payload(j as u64, 64)
    );
    assert_eq!(
        first_result(&reader, lsns[j]).unwrap().payload,
        payload(i as u64, 64)
    );
}
