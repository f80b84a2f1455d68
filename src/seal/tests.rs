use super::*;
use crate::config::Mode;
use crate::crypto::Keys;
use crate::format::FORMAT_VERSION;
use crate::keys::{Key, KeyRing};

/// The geometry the tests' records are sealed and opened under.
const GEO: format::Geometry = format::Geometry {
    page_size: 4096,
    segment_size: 1 << 20,
};

fn keys() -> Keys {
    let mut ring = KeyRing::empty();
    ring.add(1, Key::from_bytes([7; 32])).unwrap();
    Keys::new(&ring, 0x1234).unwrap()
}

/// An IV as `IvSource` makes them: the block counter (last 4 bytes) zero.
fn iv(n: u8) -> [u8; IV_LEN] {
    let mut iv = [0u8; IV_LEN];
    iv[..12].fill(n);
    iv
}

fn payloads() -> Vec<Vec<u8>> {
    let text = b"tuple 0042 name=alice balance=100;".repeat(40);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..777)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    vec![
        Vec::new(),
        b"x".to_vec(),
        b"hello, world".to_vec(),
        text,
        noise,
    ]
}

/// Seals with the LSN known, as the writer will: compress, size, seal into the buffer.
fn seal_at(seal: &Seal, key: &SealKey<'_>, kind: u8, flags: u8, payload: &[u8], at: At) -> Vec<u8> {
    seal.compressed(flags, payload, |flags, stored| {
        let mut out = vec![0u8; seal.stored_len(at.version, stored.len(), flags)];
        seal.seal_record_at(key, (kind, flags), stored, at, &mut out)
            .unwrap();
        out
    })
}

/// Opens a sealed record as the reader does, as if read at `lsn`: its header agrees with the
/// mode, its checksum matches at `lsn`, and opening gives the payload. An error at the first
/// step that fails.
fn open_at(
    seal: &Seal,
    keys: &Keys,
    record: &[u8],
    lsn: Lsn,
) -> std::result::Result<Vec<u8>, String> {
    let hlen = format::header_len_for_flags(record[format::REC_FLAGS_AT]);
    let mut header = RecordHeader::decode(&record[..hlen]).map_err(|e| format!("{e:?}"))?;
    seal.check_header(&header, FORMAT_VERSION, false)
        .map_err(|e| format!("{e:?}"))?;
    let (head, stored) = record.split_at(hlen);
    if format::record_crc(FORMAT_VERSION, lsn, head, stored) != header.crc {
        return Err("checksum".into());
    }
    let mut stored = stored.to_vec();
    let found = Found {
        log_id: 0x1234,
        geo: GEO,
        version: FORMAT_VERSION,
        at: Position {
            segment: crate::Lsn(0),
            offset: lsn.0,
            lsn,
        },
    };
    open_record(Some(keys), found, &mut header, &mut stored).map_err(|e| e.to_string())?;
    Ok(stored)
}

#[test]
fn a_record_sealed_at_its_lsn_opens_there_and_nowhere_else() {
    let keys = keys();
    for mode in Mode::ALL {
        for compression in [Compression::Off, Compression::Lz4 { min_len: 1 }] {
            let seal = Seal::new(mode, 0x1234, GEO).compressing(compression);
            for (i, payload) in payloads().iter().enumerate() {
                let lsn = Lsn(0x1_0000_0000 + 4096 * i as u64 + 48);
                let key = SealKey {
                    keys: &keys,
                    key_id: 1,
                    iv: Some(iv(i as u8)),
                };
                let at = At {
                    lsn,
                    version: FORMAT_VERSION,
                };
                let record = seal_at(&seal, &key, 5, 0, payload, at);
                let what = format!("{mode:?} {compression:?} payload {i}");
                assert_eq!(
                    open_at(&seal, &keys, &record, lsn).as_ref(),
                    Ok(payload),
                    "{what}"
                );
                // The checksum covers the LSN, in every mode.
                assert!(open_at(&seal, &keys, &record, lsn + 8).is_err(), "{what}");
                if mode.is_per_record() && compression == Compression::Off && payload.len() >= 8 {
                    let stored = &record[RECORD_HEADER_ENCRYPTED..][..8];
                    assert_ne!(stored, &payload[..8], "{what}: payload stored in the clear");
                }
            }
        }
    }
    // An authenticated record whose checksum an attacker fixed up at another LSN still fails:
    // its tag covers the LSN.
    let seal = Seal::new(Mode::PerRecordGcm, 0x1234, GEO);
    let key = SealKey {
        keys: &keys,
        key_id: 1,
        iv: Some(iv(9)),
    };
    let at = At {
        lsn: Lsn(4096 + 48),
        version: FORMAT_VERSION,
    };
    let mut record = seal_at(&seal, &key, 5, 0, b"balance=100", at);
    let moved = at.lsn + 4096;
    let hlen = format::header_len_for_flags(record[format::REC_FLAGS_AT]);
    let crc = {
        let (head, stored) = record.split_at(hlen);
        format::record_crc(FORMAT_VERSION, moved, head, stored)
    };
    record[..4].copy_from_slice(&crc.to_le_bytes());
    let error = open_at(&seal, &keys, &record, moved).unwrap_err();
    assert!(error.contains("authentic"), "{error}");
}

#[test]
fn a_record_under_a_key_without_an_iv_is_refused() {
    let keys = keys();
    let key = SealKey {
        keys: &keys,
        key_id: 1,
        iv: None,
    };
    let at = At {
        lsn: Lsn(4096 + 48),
        version: FORMAT_VERSION,
    };
    for mode in [Mode::PerRecord, Mode::PerRecordGcm] {
        let seal = Seal::new(mode, 1, GEO);
        let mut out = vec![0u8; seal.stored_len(FORMAT_VERSION, 3, 0)];
        assert!(
            seal.seal_record_at(&key, (1, 0), b"abc", at, &mut out)
                .is_err()
        );
    }
}

#[test]
fn a_sealed_switch_with_the_lsn_known_is_a_tag_over_nothing() {
    let keys = keys();
    let key = SealKey {
        keys: &keys,
        key_id: 1,
        iv: Some(iv(3)),
    };
    for mode in Mode::ALL {
        let seal = Seal::new(mode, 0x1234, GEO);
        for version in [
            AUTHENTICATED_CONTROL_VERSION - 1,
            AUTHENTICATED_CONTROL_VERSION,
        ] {
            let at = At {
                lsn: Lsn(8192 + 48),
                version,
            };
            let record = seal_at(&seal, &key, 0, RECORD_FLAG_SWITCH, &[], at);
            let hlen = format::header_len_for_flags(record[format::REC_FLAGS_AT]);
            let header = RecordHeader::decode(&record[..hlen]).unwrap();
            let sealed = mode == Mode::PerRecordGcm && version >= AUTHENTICATED_CONTROL_VERSION;
            let flags = if sealed {
                format::SEALED_SWITCH_FLAGS
            } else {
                RECORD_FLAG_SWITCH
            };
            assert_eq!(header.flags, flags, "{mode:?} v{version}");
            assert_eq!(record.len(), hlen + if sealed { TAG_LEN } else { 0 });
            assert!(seal.check_header(&header, version, false).is_ok());
        }
    }
}

#[test]
fn a_wrong_buffer_length_is_an_error() {
    let keys = keys();
    let key = SealKey {
        keys: &keys,
        key_id: 1,
        iv: Some(iv(3)),
    };
    let seal = Seal::new(Mode::PerRecordGcm, 1, GEO);
    let at = At {
        lsn: Lsn(4096 + 48),
        version: FORMAT_VERSION,
    };
    let mut out = vec![0u8; seal.stored_len(FORMAT_VERSION, 3, 0) + 1];
    assert!(
        seal.seal_record_at(&key, (1, 0), b"abc", at, &mut out)
            .is_err()
    );
}

#[test]
fn headers_of_another_mode_disagree() {
    let keys = keys();
    let key = SealKey {
        keys: &keys,
        key_id: 1,
        iv: Some(iv(3)),
    };
    for written in Mode::ALL {
        let at = At {
            lsn: Lsn(4096 + 48),
            version: FORMAT_VERSION,
        };
        let record = seal_at(&Seal::new(written, 1, GEO), &key, 1, 0, b"abc", at);
        let hlen = format::header_len_for_flags(record[format::REC_FLAGS_AT]);
        let header = RecordHeader::decode(&record[..hlen]).unwrap();
        for read in Mode::ALL {
            let agrees = Seal::new(read, 1, GEO)
                .check_header(&header, FORMAT_VERSION, false)
                .is_ok();
            let same_records = RecordSeal::for_record(read, FORMAT_VERSION, 0)
                == RecordSeal::for_record(written, FORMAT_VERSION, 0);
            assert_eq!(agrees, same_records, "{written:?} read as {read:?}");
        }
    }
}
