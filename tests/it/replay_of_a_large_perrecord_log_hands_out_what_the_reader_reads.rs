//! A perrecord log large enough for recovery to read ahead on a second thread, with records of
//! every size the read-ahead treats differently (short ones inside a page, ones spanning pages,
//! ones longer than its window and longer than it makes anything for) and one record whose
//! ciphertext was altered and its CRC recomputed (CRC32C is no MAC): the replay hands out
//! exactly the payloads the reader decrypts, in order, with and without compression. In
//! perrecord-gcm, whose records the read-ahead also opens (tag checked there), the altered
//! record fails authentication at its LSN in both, after exactly the same records.

use crate::support;

use support::large::{config, payload};
use support::tamper::{fix_crc, single_page_records, write_at};
use walcrypt::inspect::{REC_FLAGS_AT, RECORD_FLAG_COMPRESSED, RECORD_HEADER_ENCRYPTED};
use walcrypt::{Compression, Error, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

/// Record `i`'s payload: mostly the 40 B to 3 KiB of `payload`, every 97th of 300 KiB (longer
/// than the read-ahead window) and every 389th of 700 KiB (longer than anything the
/// read-ahead makes ahead).
fn mixed_payload(i: usize) -> Vec<u8> {
    let len = match i {
        _ if i % 389 == 200 => 700 << 10,
        _ if i % 97 == 50 => 300 << 10,
        _ => return payload(i),
    };
    (0..len).map(|j| (i * 7 + j / 3) as u8).collect()
}

fn replay_matches_reader(mode: Mode, compression: Compression) {
    let what = format!("{mode} {compression:?}");
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let cfg = || config(mode, &keys, SyncMode::Buffered).compression(compression);
    let wal = Wal::open(dir.path(), cfg()).unwrap();
    let mut lsns = Vec::new();
    let mut written = 0;
    while written < 6 << 20 {
        let p = mixed_payload(lsns.len());
        written += p.len();
        lsns.push(wal.append(1, &p).unwrap());
    }
    wal.close().unwrap();

    // A ciphertext byte of a record stored uncompressed at about three quarters of the log
    // flipped, its CRC recomputed: in perrecord it still reads, with the same plaintext bit
    // flipped; in perrecord-gcm it fails its tag.
    let records: Vec<_> = single_page_records(dir.path())
        .into_iter()
        .filter(|r| r.bytes[REC_FLAGS_AT] & RECORD_FLAG_COMPRESSED == 0)
        .collect();
    let mut victim = records[records.len() * 3 / 4].clone();
    victim.bytes[RECORD_HEADER_ENCRYPTED + 3] ^= 0x01;
    fix_crc(&mut victim.bytes, victim.lsn);
    write_at(dir.path(), victim.lsn, &victim.bytes);
    let tampered = lsns
        .iter()
        .position(|l| u64::from(*l) == victim.lsn)
        .unwrap();

    let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
    let results: Vec<_> = reader.records_from(Lsn::default()).collect();
    drop(reader);
    let authenticated = mode == Mode::PerRecordGcm;
    let read: Vec<_> = if authenticated {
        assert_eq!(
            results.len(),
            tampered + 1,
            "{what}: the reader stops there"
        );
        match &results[tampered] {
            Err(Error::AuthenticationFailed { at, .. }) => {
                assert_eq!(u64::from(at.lsn), victim.lsn, "{what}")
            }
            other => panic!("{what}: expected an authentication failure, got {other:?}"),
        }
        results[..tampered]
            .iter()
            .map(|r| r.as_ref().unwrap().clone())
            .collect()
    } else {
        let read: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(read.len(), lsns.len(), "{what}");
        let mut altered = mixed_payload(tampered);
        altered[3] ^= 0x01;
        assert_eq!(
            read[tampered].payload, altered,
            "{what}: the reader decrypts the altered ciphertext"
        );
        read
    };

    let mut n = 0;
    let replayed = Wal::open_and_replay(dir.path(), cfg(), Lsn::default(), |r| {
        let want = &read[n];
        assert_eq!(
            (r.lsn, r.end_lsn, r.kind),
            (want.lsn, want.end_lsn, want.kind),
            "{what}"
        );
        assert!(
            r.payload == want.payload,
            "{what}: record {n} at {:?} differs from the reader's",
            r.lsn
        );
        n += 1;
        Ok(())
    });
    assert_eq!(
        n,
        read.len(),
        "{what}: every record the reader read replayed"
    );
    match replayed {
        Ok(wal) if !authenticated => wal.close().unwrap(),
        Err(Error::AuthenticationFailed { at, .. }) if authenticated => {
            assert_eq!(u64::from(at.lsn), victim.lsn, "{what}")
        }
        other => panic!("{what}: replay ended with {:?}", other.map(|_| ())),
    }
}

#[test]
fn replay_hands_out_the_readers_payloads() {
    replay_matches_reader(Mode::PerRecord, Compression::Off);
}

#[test]
fn replay_hands_out_the_readers_payloads_when_compressed() {
    replay_matches_reader(Mode::PerRecord, Compression::Lz4 { min_len: 64 });
}

#[test]
fn authenticated_replay_hands_out_the_readers_payloads_and_fails_where_it_fails() {
    replay_matches_reader(Mode::PerRecordGcm, Compression::Off);
    replay_matches_reader(Mode::PerRecordGcm, Compression::Lz4 { min_len: 64 });
}
