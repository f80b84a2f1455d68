//! perrecord-gcm: a record's header overwritten with a segment-switch header, its checksum
//! recomputed, would send a reader to the next segment and skip the rest of this one: records
//! cut out of the middle without the key. From format version 4 a perrecord-gcm log seals its
//! switch records (a tag over no payload, bound to the LSN), so an unsealed switch, or a
//! sealed-looking one with a made-up tag, fails with `AuthenticationFailed` at its position,
//! for the Reader, a Follower and replay at open alike. A switch the writer sealed (at a reopen
//! with a new key) is followed.

use crate::support;

use support::tamper::{forged_control, single_page_records, write_at};
use support::{append_all, copy_dir, payload, small_config};
use walcrypt::inspect::{
    FORMAT_VERSION, RECORD_FLAG_SWITCH, RECORD_HEADER_ENCRYPTED, RecordHeader, SEALED_SWITCH_FLAGS,
    TAG_LEN, record_crc,
};
use walcrypt::{Error, Follower, KeyRing, Lsn, Mode, Reader, Visibility, Wal};

const RECORDS: u64 = 400;

/// A perrecord-gcm log of 400 records, reopened with a new key (a sealed switch) after the 100th;
/// `forge` rewrites the record found after the 200th (its LSN and stored bytes). Returns the
/// log and the forged record's LSN and index.
fn log_with_a_forged_switch(
    keys: &mut KeyRing,
    forge: impl FnOnce(u64, &[u8]) -> Vec<u8>,
) -> (tempfile::TempDir, Lsn, usize) {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, keys)).unwrap();
    let records: Vec<_> = (0..RECORDS).map(|i| (1u8, payload(i, 64))).collect();
    let mut lsns = append_all(&wal, &records[..100]);
    wal.close().unwrap();
    // Reopened with a new active key: the writer ends the segment with a sealed switch.
    keys.rotate().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, keys)).unwrap();
    lsns.extend(append_all(&wal, &records[100..]));
    wal.close().unwrap();
    let victim = single_page_records(dir.path())
        .into_iter()
        .find(|r| r.lsn > u64::from(lsns[200]))
        .unwrap();
    let forged = forge(victim.lsn, &victim.bytes);
    write_at(dir.path(), victim.lsn, &forged);
    let index = lsns
        .iter()
        .position(|l| u64::from(*l) == victim.lsn)
        .unwrap();
    (dir, Lsn(victim.lsn), index)
}

/// Reads with a Reader, a Follower and `Wal::open_and_replay` (on a copy); each must stop with
/// an authentication failure at `at` after exactly `index` records.
fn assert_both_fail_at(dir: &std::path::Path, keys: &KeyRing, at: Lsn, index: usize) {
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    let mut read = 0;
    let mut error = None;
    for r in reader.records_from(Lsn::default()) {
        match r {
            Ok(_) => read += 1,
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    check("reader", read, error, at, index);
    let mut follower = Follower::open(dir, Some(keys.clone()), Lsn::default())
        .unwrap()
        .visibility(Visibility::Written);
    let mut read = 0;
    let error = loop {
        match follower.poll() {
            Ok(Some(_)) => read += 1,
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    check("follower", read, error, at, index);
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir, copy.path());
    let mut read = 0;
    let error = Wal::open_and_replay(
        copy.path(),
        small_config(Mode::PerRecordGcm, keys),
        Lsn::default(),
        |_| {
            read += 1;
            Ok(())
        },
    )
    .err();
    check("open_and_replay", read, error, at, index);
}

fn check(who: &str, read: usize, error: Option<Error>, at: Lsn, index: usize) {
    match error {
        Some(Error::AuthenticationFailed { at: found, .. }) => assert_eq!(found.lsn, at, "{who}"),
        None => panic!("{who}: read {read} of {RECORDS} records with no error"),
        Some(other) => panic!("{who}: expected an authentication failure, got {other}"),
    }
    assert_eq!(
        read, index,
        "{who}: every record before the forged one, none after"
    );
}

#[test]
fn an_unsealed_switch_record_fails_authentication() {
    let mut keys = KeyRing::generate().unwrap();
    let (dir, at, index) = log_with_a_forged_switch(&mut keys, |lsn, _| {
        forged_control(lsn, RECORD_FLAG_SWITCH, &[])
    });
    assert_both_fail_at(dir.path(), &keys, at, index);
}

#[test]
fn a_switch_record_with_a_made_up_tag_fails_authentication() {
    let mut keys = KeyRing::generate().unwrap();
    let (dir, at, index) = log_with_a_forged_switch(&mut keys, |lsn, original| {
        // The record's own key id and IV, the flags and length of a sealed switch, and
        // 16 bytes of its ciphertext for a tag.
        let mut header = RecordHeader::decode(&original[..RECORD_HEADER_ENCRYPTED]).unwrap();
        header.flags = SEALED_SWITCH_FLAGS;
        header.len = TAG_LEN as u32;
        let mut forged = vec![0u8; RECORD_HEADER_ENCRYPTED];
        header.encode(&mut forged);
        let tag = &original[RECORD_HEADER_ENCRYPTED..RECORD_HEADER_ENCRYPTED + TAG_LEN];
        let crc = record_crc(FORMAT_VERSION, Lsn(lsn), &forged, tag);
        forged[..4].copy_from_slice(&crc.to_le_bytes());
        forged.extend_from_slice(tag);
        forged
    });
    assert_both_fail_at(dir.path(), &keys, at, index);
}
