//! perrecord-gcm: whoever can write the files can flip ciphertext bits and recompute the
//! CRC32C, but the record then fails authentication, with its position and no payload: in the
//! reader, in the raw reader and in replay. Flipping a header field the tag covers (kind) or
//! a tag bit fails the same way. In perrecord (CTR) the same edit yields a chosen plaintext
//! change, which is what the authenticated mode exists to stop.

use crate::support;

use support::tamper::{fix_crc, single_page_records, write_at};
use support::{append_all, payload, small_config};
use walcrypt::inspect::{REC_KIND_AT, RECORD_HEADER_ENCRYPTED};
use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, Wal};

fn log_with_records(mode: Mode, keys: &KeyRing) -> (tempfile::TempDir, Vec<Lsn>) {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(mode, keys)).unwrap();
    let records: Vec<_> = (0..40).map(|i| (7u8, payload(i, 50))).collect();
    let lsns = append_all(&wal, &records);
    wal.close().unwrap();
    (dir, lsns)
}

/// Applies `edit` to the stored bytes of the first single-page record from the 10th on,
/// recomputes its CRC, and returns its index among all records.
fn tamper(dir: &std::path::Path, lsns: &[Lsn], edit: impl Fn(&mut Vec<u8>)) -> usize {
    let target = single_page_records(dir)
        .into_iter()
        .find(|r| r.lsn >= u64::from(lsns[10]))
        .unwrap();
    let mut bytes = target.bytes.clone();
    edit(&mut bytes);
    fix_crc(&mut bytes, target.lsn);
    write_at(dir, target.lsn, &bytes);
    lsns.iter()
        .position(|l| u64::from(*l) == target.lsn)
        .unwrap()
}

fn assert_fails_at(dir: &std::path::Path, keys: &KeyRing, lsns: &[Lsn], n: usize, what: &str) {
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    let results: Vec<_> = reader.records_from(Lsn::default()).collect();
    assert_eq!(
        results.len(),
        n + 1,
        "{what}: {n} good records, then one error"
    );
    for (r, lsn) in results[..n].iter().zip(lsns) {
        assert_eq!(r.as_ref().unwrap().lsn, *lsn, "{what}");
    }
    match &results[n] {
        Err(Error::AuthenticationFailed { at, key_id }) => {
            assert_eq!(at.lsn, lsns[n], "{what}");
            assert_eq!(*key_id, 1, "{what}");
            let seg = u64::from(at.segment);
            assert_eq!(seg + at.offset, u64::from(lsns[n]), "{what}");
        }
        other => panic!("{what}: expected an authentication failure, got {other:?}"),
    }
    // The raw reader never hands out the payload of a record that failed its tag either.
    let raw: Vec<_> = reader.raw_records_from(lsns[n]).collect();
    assert!(
        matches!(raw[..], [Err(Error::AuthenticationFailed { .. })]),
        "{what}: {raw:?}"
    );
    // Replay stops with the same error.
    let config = small_config(Mode::PerRecordGcm, keys);
    let err = Wal::open_and_replay(dir, config, Lsn::default(), |_| Ok(())).unwrap_err();
    assert!(
        matches!(err, Error::AuthenticationFailed { at, .. } if at.lsn == lsns[n]),
        "{what}: {err:?}"
    );
}

#[test]
fn flipped_ciphertext_bit_with_recomputed_crc_fails_authentication() {
    let keys = KeyRing::generate().unwrap();
    let (dir, lsns) = log_with_records(Mode::PerRecordGcm, &keys);
    let n = tamper(dir.path(), &lsns, |b| {
        b[RECORD_HEADER_ENCRYPTED + 5] ^= 0x04
    });
    assert_fails_at(dir.path(), &keys, &lsns, n, "ciphertext bit");
}

#[test]
fn flipped_tag_bit_or_kind_with_recomputed_crc_fails_authentication() {
    let keys = KeyRing::generate().unwrap();
    let (dir, lsns) = log_with_records(Mode::PerRecordGcm, &keys);
    let n = tamper(dir.path(), &lsns, |b| *b.last_mut().unwrap() ^= 0x80);
    assert_fails_at(dir.path(), &keys, &lsns, n, "tag bit");

    let (dir, lsns) = log_with_records(Mode::PerRecordGcm, &keys);
    let n = tamper(dir.path(), &lsns, |b| b[REC_KIND_AT] = 9);
    assert_fails_at(dir.path(), &keys, &lsns, n, "kind byte");
}

#[test]
fn the_same_edit_in_a_ctr_log_changes_the_plaintext_unnoticed() {
    let keys = KeyRing::generate().unwrap();
    let (dir, lsns) = log_with_records(Mode::PerRecord, &keys);
    let n = tamper(dir.path(), &lsns, |b| {
        b[RECORD_HEADER_ENCRYPTED + 5] ^= 0x04
    });
    let reader = Reader::open(dir.path(), Some(keys)).unwrap();
    let rec = reader
        .records_from(lsns[n])
        .next()
        .unwrap()
        .expect("CTR with CRC32C accepts the edit");
    let mut expected = payload(n as u64, 50);
    expected[5] ^= 0x04;
    assert_eq!(
        rec.payload, expected,
        "the flipped bit lands in the plaintext"
    );
}
