//! perrecord-gcm: a record's header overwritten with a resume-record header of the same total
//! size, its checksum recomputed (anyone can), would make a reader skip the record as a
//! control record and go on with the next: a record deleted from the middle without the key.
//! A resume record belongs to pagelevel logs only, so in a perrecord-gcm log it is never
//! authentic: the Reader, `Wal::open_and_replay` and a Follower all fail with
//! `AuthenticationFailed` at its position, and none of them returns a record after it.

use crate::support;

use support::tamper::{forged_control, single_page_records, write_at};
use support::{append_all, copy_dir, payload, small_config};
use walcrypt::inspect::RECORD_FLAG_RESUME;
use walcrypt::{Error, Follower, KeyRing, Lsn, Mode, Reader, Record, Visibility, Wal};

const RECORDS: u64 = 400;

/// A perrecord-gcm log of 400 records, one in the middle overwritten with a forged resume
/// record of its size; returns the log and the forged record's LSN and index.
fn log_with_a_forged_resume(keys: &KeyRing) -> (tempfile::TempDir, Lsn, usize) {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, keys)).unwrap();
    let records: Vec<_> = (0..RECORDS).map(|i| (1u8, payload(i, 64))).collect();
    let lsns = append_all(&wal, &records);
    wal.close().unwrap();
    let victim = single_page_records(dir.path())
        .into_iter()
        .find(|r| r.lsn > u64::from(lsns[200]))
        .unwrap();
    let forged = forged_control(
        victim.lsn,
        RECORD_FLAG_RESUME,
        &vec![0u8; victim.bytes.len() - 12],
    );
    assert_eq!(forged.len(), victim.bytes.len());
    write_at(dir.path(), victim.lsn, &forged);
    let index = lsns
        .iter()
        .position(|l| u64::from(*l) == victim.lsn)
        .unwrap();
    (dir, Lsn(victim.lsn), index)
}

fn assert_fails_at(result: walcrypt::Result<Vec<Record>>, at: Lsn, who: &str) {
    match result {
        Err(Error::AuthenticationFailed { at: found, .. }) => assert_eq!(found.lsn, at, "{who}"),
        Ok(records) => panic!(
            "{who}: read {} of {RECORDS} records with no error",
            records.len()
        ),
        Err(other) => panic!("{who}: expected an authentication failure, got {other}"),
    }
}

#[test]
fn reader_fails_authentication_at_a_forged_resume_record() {
    let keys = KeyRing::generate().unwrap();
    let (dir, at, index) = log_with_a_forged_resume(&keys);
    let reader = Reader::open(dir.path(), Some(keys)).unwrap();
    let mut read = Vec::new();
    let result = reader
        .records_from(Lsn::default())
        .try_for_each(|r| r.map(|r| read.push(r)));
    assert_fails_at(result.map(|()| read.clone()), at, "reader");
    assert_eq!(
        read.len(),
        index,
        "every record before the forged one, none after"
    );
}

#[test]
fn replay_at_open_fails_authentication_at_a_forged_resume_record() {
    let keys = KeyRing::generate().unwrap();
    let (dir, at, _) = log_with_a_forged_resume(&keys);
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let mut replayed = Vec::new();
    let result = Wal::open_and_replay(
        copy.path(),
        small_config(Mode::PerRecordGcm, &keys),
        Lsn::default(),
        |r| {
            replayed.push(r);
            Ok(())
        },
    );
    assert_fails_at(result.map(|_| replayed), at, "open_and_replay");
}

#[test]
fn follower_fails_authentication_at_a_forged_resume_record() {
    let keys = KeyRing::generate().unwrap();
    let (dir, at, index) = log_with_a_forged_resume(&keys);
    let mut follower = Follower::open(dir.path(), Some(keys), Lsn::default())
        .unwrap()
        .visibility(Visibility::Written);
    let mut read = Vec::new();
    let result = loop {
        match follower.poll() {
            Ok(Some(r)) => read.push(r),
            Ok(None) => break Ok(read.clone()),
            Err(e) => break Err(e),
        }
    };
    assert_fails_at(result, at, "follower");
    assert_eq!(read.len(), index);
}
