//! perrecord-gcm: shortening a record so that its tag loses bytes (length field lowered, CRC
//! recomputed) fails authentication; clearing the authenticated flag to present the record as
//! an unauthenticated one is refused as a bad header. Neither returns a payload.

use crate::support;

use support::tamper::{fix_crc, set_stored_len, single_page_records, stored_len, write_at};
use support::{append_all, payload, small_config};
use walcrypt::inspect::{
    REC_FLAGS_AT, RECORD_FLAG_AUTHENTICATED, RECORD_HEADER_ENCRYPTED, TAG_LEN,
};
use walcrypt::{CorruptionKind, Error, KeyRing, Lsn, Mode, Reader, Wal};

fn log(keys: &KeyRing) -> (tempfile::TempDir, Vec<Lsn>) {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, keys)).unwrap();
    let records: Vec<_> = (0..30).map(|i| (2u8, payload(i, 70))).collect();
    let lsns = append_all(&wal, &records);
    wal.close().unwrap();
    (dir, lsns)
}

/// Rewrites the first single-page record after the 8th with `edit` applied to its stored
/// bytes (then truncated to the length the edited header claims) and its CRC recomputed.
fn rewrite(dir: &std::path::Path, lsns: &[Lsn], edit: impl Fn(&mut Vec<u8>)) -> usize {
    let target = single_page_records(dir)
        .into_iter()
        .find(|r| r.lsn > u64::from(lsns[8]))
        .unwrap();
    let mut bytes = target.bytes.clone();
    edit(&mut bytes);
    let len = stored_len(&bytes) as usize;
    bytes.truncate(RECORD_HEADER_ENCRYPTED + len);
    fix_crc(&mut bytes, target.lsn);
    write_at(dir, target.lsn, &bytes);
    lsns.iter()
        .position(|l| u64::from(*l) == target.lsn)
        .unwrap()
}

fn error_at(dir: &std::path::Path, keys: &KeyRing, lsn: Lsn) -> Error {
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    match reader.records_from(lsn).next().unwrap() {
        Ok(rec) => panic!("a payload came back: {rec:?}"),
        Err(e) => e,
    }
}

#[test]
fn truncated_tag_fails_authentication() {
    let keys = KeyRing::generate().unwrap();
    for cut in [1u32, 8, TAG_LEN as u32] {
        let (dir, lsns) = log(&keys);
        let n = rewrite(dir.path(), &lsns, |b| {
            let len = stored_len(b);
            set_stored_len(b, len - cut);
        });
        match error_at(dir.path(), &keys, lsns[n]) {
            Error::AuthenticationFailed { at, key_id: 1 } => assert_eq!(at.lsn, lsns[n]),
            other => panic!("tag cut by {cut}: expected an authentication failure, got {other}"),
        }
    }
}

#[test]
fn stripped_authentication_flag_is_refused() {
    let keys = KeyRing::generate().unwrap();
    let (dir, lsns) = log(&keys);
    let n = rewrite(dir.path(), &lsns, |b| {
        b[REC_FLAGS_AT] &= !RECORD_FLAG_AUTHENTICATED;
        let len = stored_len(b);
        set_stored_len(b, len - TAG_LEN as u32);
    });
    match error_at(dir.path(), &keys, lsns[n]) {
        Error::Corrupt {
            at,
            kind: CorruptionKind::BadRecordHeader(_),
        } => assert_eq!(at.lsn, lsns[n]),
        other => panic!("expected a bad record header, got {other}"),
    }
}
