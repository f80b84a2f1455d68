//! A compressed record whose length prefix is absurd or whose LZ4 stream is cut short, with its
//! CRC recomputed so only decompression can notice, is an error naming the record's position:
//! never a panic, never an allocation of the claimed size. (A stream altered without changing
//! its structure decompresses to altered bytes: in the unauthenticated modes only the CRC
//! stands between a writer of the files and the payload; see SECURITY.md.)

use crate::support;

use std::os::unix::fs::FileExt;

use support::small_config;
use walcrypt::inspect::{
    FORMAT_VERSION, REC_CRC_AT, REC_LEN_AT, RECORD_HEADER_PLAIN, record_crc, segment_file_name,
};
use walcrypt::{Compression, CorruptionKind, Error, KeyRing, Lsn, Mode, Reader, Wal};

/// A plaintext log whose 6th record is compressed and lies inside one page; returns the log,
/// the LSNs, and that record's stored bytes.
fn log() -> (tempfile::TempDir, Vec<Lsn>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(Mode::Plaintext, &KeyRing::empty())
        .compression(Compression::Lz4 { min_len: 64 });
    let wal = Wal::open(dir.path(), config).unwrap();
    let lsns: Vec<Lsn> = (0..12)
        .map(|i| wal.append(1, &b"abcdefgh".repeat(20 + i)).unwrap())
        .collect();
    wal.close().unwrap();
    let reader = Reader::open(dir.path(), None).unwrap();
    let raw = reader.raw_records_from(lsns[5]).next().unwrap().unwrap();
    let mut bytes = vec![0u8; RECORD_HEADER_PLAIN + raw.stored.len()];
    let start = u64::from(lsns[5]);
    assert_eq!(
        start / 512,
        (start + bytes.len() as u64 - 1) / 512,
        "inside one page"
    );
    file(&dir).read_exact_at(&mut bytes, start).unwrap();
    (dir, lsns, bytes)
}

fn file(dir: &tempfile::TempDir) -> std::fs::File {
    let path = dir.path().join(segment_file_name(Lsn(0)));
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

fn rewrite(dir: &tempfile::TempDir, lsn: Lsn, bytes: &mut [u8]) {
    let (header, stored) = bytes.split_at(RECORD_HEADER_PLAIN);
    let crc = record_crc(FORMAT_VERSION, lsn, header, stored);
    bytes[REC_CRC_AT..REC_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    file(dir).write_all_at(bytes, u64::from(lsn)).unwrap();
}

fn expect_bad_compressed(dir: &tempfile::TempDir, lsns: &[Lsn], what: &str) {
    let reader = Reader::open(dir.path(), None).unwrap();
    let results: Vec<_> = reader.records_from(Lsn::default()).collect();
    assert_eq!(
        results.len(),
        6,
        "{what}: five good records, then the error"
    );
    match &results[5] {
        Err(Error::Corrupt {
            at,
            kind: CorruptionKind::BadCompressedPayload(_),
        }) => {
            assert_eq!(at.lsn, lsns[5], "{what}");
            assert_eq!(at.offset, u64::from(lsns[5]), "{what}");
        }
        other => panic!("{what}: expected a damaged compressed payload, got {other:?}"),
    }
    let err = Wal::open_and_replay(
        dir.path(),
        small_config(Mode::Plaintext, &KeyRing::empty()),
        Lsn::default(),
        |_| Ok(()),
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Corrupt { at, kind: CorruptionKind::BadCompressedPayload(_) } if at.lsn == lsns[5]),
        "{what}: replay gave {err:?}"
    );
}

#[test]
fn absurd_length_prefix_is_an_error_with_position() {
    for claimed in [u32::MAX, (1 << 30) + 1, 1 << 20] {
        let (dir, lsns, mut bytes) = log();
        bytes[RECORD_HEADER_PLAIN..RECORD_HEADER_PLAIN + 4].copy_from_slice(&claimed.to_le_bytes());
        rewrite(&dir, lsns[5], &mut bytes);
        expect_bad_compressed(&dir, &lsns, &format!("claimed {claimed}"));
    }
}

#[test]
fn damaged_stream_is_an_error_with_position() {
    let (dir, lsns, mut bytes) = log();
    // Cut the stream short: the header's length loses 3 bytes, the CRC is recomputed.
    let at = REC_LEN_AT..REC_LEN_AT + 4;
    let len = u32::from_le_bytes(bytes[at.clone()].try_into().unwrap()) - 3;
    bytes[at].copy_from_slice(&len.to_le_bytes());
    bytes.truncate(bytes.len() - 3);
    rewrite(&dir, lsns[5], &mut bytes);
    expect_bad_compressed(&dir, &lsns, "damaged stream");
}
