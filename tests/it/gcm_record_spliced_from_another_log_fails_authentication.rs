//! perrecord-gcm: a record copied from another log that uses the same key, into the same
//! position with the same length, keeps a valid checksum and a tag that was valid in its own
//! log, but fails authentication here: the tag binds the log id.

use crate::support;

use support::tamper::{single_page_records, write_at};
use support::{append_all, payload, small_config};
use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, Wal};

fn make_log(keys: &KeyRing, seed: u64) -> (tempfile::TempDir, Vec<Lsn>) {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, keys)).unwrap();
    let records: Vec<_> = (0..30).map(|i| (5u8, payload(seed + i, 80))).collect();
    let lsns = append_all(&wal, &records);
    wal.close().unwrap();
    (dir, lsns)
}

#[test]
fn record_spliced_from_another_log_with_the_same_key_fails_authentication() {
    let keys = KeyRing::generate().unwrap();
    let (victim, lsns) = make_log(&keys, 0);
    let (donor, donor_lsns) = make_log(&keys, 1000);
    assert_eq!(
        lsns, donor_lsns,
        "same geometry and lengths: same positions"
    );

    let donated = single_page_records(donor.path())
        .into_iter()
        .find(|r| r.lsn > u64::from(lsns[12]))
        .unwrap();
    // The donor record is genuine in its own log.
    let donor_reader = Reader::open(donor.path(), Some(keys.clone())).unwrap();
    let n = lsns
        .iter()
        .position(|l| u64::from(*l) == donated.lsn)
        .unwrap();
    let genuine = donor_reader.records_from(lsns[n]).next().unwrap().unwrap();
    assert_eq!(genuine.payload, payload(1000 + n as u64, 80));

    write_at(victim.path(), donated.lsn, &donated.bytes);
    let reader = Reader::open(victim.path(), Some(keys)).unwrap();
    let results: Vec<_> = reader.records_from(Lsn::default()).collect();
    assert_eq!(results.len(), n + 1);
    match &results[n] {
        Err(Error::AuthenticationFailed { at, .. }) => assert_eq!(at.lsn, lsns[n]),
        other => panic!("expected an authentication failure, got {other:?}"),
    }
}
