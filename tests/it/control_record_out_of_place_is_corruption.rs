//! Control records (segment switch, resume) are accepted only where the format puts them and
//! with their exact lengths. A resume record in a log that is not pagelevel, or one whose
//! payload is not the 8-byte end it names, and a switch record with a payload, all with valid
//! checksums (as anyone can write them), are corruption naming segment, offset and LSN: the
//! reader never skips the records they stand on. Without the checks, a resume header of a
//! record's size deleted that record from a perrecord or plaintext log silently.

use crate::support;

use std::os::unix::fs::FileExt;
use std::path::Path;
use support::tamper::{forged_control, single_page_records, write_at};
use support::{append_all, payload, small_config};

use walcrypt::inspect::{
    PAGE_HEADER_LEN, PageHeader, RECORD_FLAG_RESUME, RECORD_FLAG_SWITCH, ctr_apply_keystream,
    segment_file_name,
};
use walcrypt::{CorruptionKind, Error, KeyRing, Lsn, Mode, Reader, Wal};

/// A log of 100 records in `mode`, the one after the 50th overwritten by `forge` (given its
/// LSN and stored length); the reader must stop there with a control-record corruption.
fn assert_corrupt_at_the_forgery(mode: Mode, forge: impl FnOnce(u64, usize) -> Vec<u8>) {
    let keys = KeyRing::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
    let records: Vec<_> = (0..100).map(|i| (1u8, payload(i, 64))).collect();
    let lsns = append_all(&wal, &records);
    wal.close().unwrap();
    let victim = single_page_records(dir.path())
        .into_iter()
        .find(|r| r.lsn > u64::from(lsns[50]))
        .unwrap();
    let forged = forge(victim.lsn, victim.bytes.len());
    write_at(dir.path(), victim.lsn, &forged);
    let reader = Reader::open(dir.path(), Some(keys)).unwrap();
    let results: Vec<_> = reader.records_from(Lsn::default()).collect();
    let index = lsns
        .iter()
        .position(|l| u64::from(*l) == victim.lsn)
        .unwrap();
    let read = results.iter().take_while(|r| r.is_ok()).count();
    match results.last() {
        Some(Err(Error::Corrupt {
            at,
            kind: CorruptionKind::BadControlRecord(_),
        })) => {
            assert_eq!(at.lsn, Lsn(victim.lsn), "{mode}");
            assert_eq!(read, index, "{mode}: every record before, none after");
        }
        Some(Err(other)) => panic!("{mode}: expected a control-record corruption, got {other}"),
        _ => panic!("{mode}: read {read} of 100 records with no error"),
    }
}

#[test]
fn a_resume_record_in_a_perrecord_or_plaintext_log_is_corruption() {
    for mode in [Mode::PerRecord, Mode::Plaintext] {
        assert_corrupt_at_the_forgery(mode, |lsn, len| {
            forged_control(lsn, RECORD_FLAG_RESUME, &vec![0u8; len - 12])
        });
    }
}

#[test]
fn a_resume_record_of_the_wrong_length_in_a_pagelevel_log_is_corruption() {
    let keys = KeyRing::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PageLevel, &keys)).unwrap();
    let records: Vec<_> = (0..100).map(|i| (1u8, payload(i, 64))).collect();
    let lsns = append_all(&wal, &records);
    wal.close().unwrap();
    // Inside an encrypted page body, with the key: what CTR's malleability allows anyone who
    // knows the plaintext.
    let victim = u64::from(lsns[60]);
    let forged = forged_control(victim, RECORD_FLAG_RESUME, &[0u8; 64]);
    rewrite_pagelevel_plaintext(dir.path(), &keys, victim, &forged);
    let reader = Reader::open(dir.path(), Some(keys)).unwrap();
    let results: Vec<_> = reader.records_from(Lsn::default()).collect();
    let read = results.iter().take_while(|r| r.is_ok()).count();
    match results.last() {
        Some(Err(Error::Corrupt {
            at,
            kind: CorruptionKind::BadControlRecord(what),
        })) => {
            assert_eq!(at.lsn, lsns[60]);
            assert!(what.contains("not 8 bytes"), "{what}");
            assert_eq!(read, 60);
        }
        Some(Err(other)) => panic!("expected a control-record corruption, got {other}"),
        _ => panic!("read {read} of 100 records with no error"),
    }
}

/// Overwrites plaintext bytes of a pagelevel page body at `lsn` (inside one page): decrypts
/// the body with the page's key and IV, writes `bytes`, encrypts it again.
fn rewrite_pagelevel_plaintext(dir: &Path, keys: &KeyRing, lsn: u64, bytes: &[u8]) {
    let reader = Reader::open(dir, None).unwrap();
    let geo = reader.geometry();
    let (page, segment) = (geo.page_start(Lsn(lsn)).0, geo.segment_start(Lsn(lsn)).0);
    let path = dir.join(segment_file_name(Lsn(segment)));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut image = vec![0u8; geo.page_size as usize];
    file.read_exact_at(&mut image, page - segment).unwrap();
    let header = PageHeader::decode(reader.log_id(), &image[..PAGE_HEADER_LEN]).unwrap();
    let key = keys
        .get(header.key_id)
        .unwrap()
        .for_log(reader.log_id(), header.key_id);
    ctr_apply_keystream(&key, &header.iv, &mut image[PAGE_HEADER_LEN..]);
    let at = (lsn - page) as usize;
    image[at..at + bytes.len()].copy_from_slice(bytes);
    ctr_apply_keystream(&key, &header.iv, &mut image[PAGE_HEADER_LEN..]);
    file.write_all_at(&image, page - segment).unwrap();
}

#[test]
fn a_switch_record_with_a_payload_is_corruption() {
    for mode in [Mode::PerRecord, Mode::Plaintext] {
        assert_corrupt_at_the_forgery(mode, |lsn, len| {
            forged_control(lsn, RECORD_FLAG_SWITCH, &vec![0u8; len - 12])
        });
    }
}
