use super::*;
use crate::config::Mode;
use crate::crypto::{IvSource, Keys};
use crate::format::{FORMAT_VERSION, RECORD_FLAG_RESUME};
use crate::keys::{Key, KeyRing};

fn keys() -> Keys {
    let mut ring = KeyRing::empty();
    ring.add(1, Key::from_bytes([7; 32])).unwrap();
    Keys::new(&ring, 0x1234)
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

#[test]
fn sealing_with_the_lsn_known_gives_the_late_bound_bytes() {
    let keys = keys();
    for mode in Mode::ALL {
        for compression in [Compression::Off, Compression::Lz4 { min_len: 1 }] {
            let seal = Seal::new(mode, 0x1234).compressing(compression);
            for (i, payload) in payloads().iter().enumerate() {
                for flags in [0, RECORD_FLAG_RESUME] {
                    let lsn = 0x1_0000_0000 + 4096 * i as u64 + 48;
                    let at = At {
                        lsn,
                        version: FORMAT_VERSION,
                    };
                    let late_ivs = IvSource::with_prefix(99);
                    let late_key = SealKey {
                        keys: &keys,
                        key_id: 1,
                        ivs: &late_ivs,
                    };
                    let mut late = Vec::new();
                    seal.seal_record(&late_key, 5, flags, payload, &mut late)
                        .unwrap()
                        .finish(lsn, FORMAT_VERSION, &mut late);
                    let known_ivs = IvSource::with_prefix(99);
                    let known_key = SealKey {
                        keys: &keys,
                        key_id: 1,
                        ivs: &known_ivs,
                    };
                    let known = seal_at(&seal, &known_key, 5, flags, payload, at);
                    assert_eq!(
                        known, late,
                        "{mode:?} {compression:?} payload {i} flags {flags}"
                    );
                    if flags == 0 {
                        // And the reader opens it to the payload.
                        let hlen = format::header_len_for_flags(known[format::REC_FLAGS_AT]);
                        let mut header = RecordHeader::decode(&known[..hlen]).unwrap();
                        assert!(seal.check_header(&header, FORMAT_VERSION, false).is_ok());
                        let (head, stored) = known.split_at(hlen);
                        assert_eq!(
                            format::record_crc(FORMAT_VERSION, lsn, head, stored),
                            header.crc
                        );
                        let mut stored = stored.to_vec();
                        let found = Found {
                            log_id: 0x1234,
                            version: FORMAT_VERSION,
                            at: Position {
                                segment: crate::Lsn(0),
                                offset: lsn,
                                lsn: crate::Lsn(lsn),
                            },
                        };
                        open_record(Some(&keys), found, &mut header, &mut stored).unwrap();
                        assert_eq!(&stored, payload);
                    }
                }
            }
        }
    }
}

#[test]
fn a_sealed_switch_with_the_lsn_known_is_a_tag_over_nothing() {
    let keys = keys();
    let ivs = IvSource::with_prefix(3);
    let key = SealKey {
        keys: &keys,
        key_id: 1,
        ivs: &ivs,
    };
    for mode in Mode::ALL {
        let seal = Seal::new(mode, 0x1234);
        for version in [
            AUTHENTICATED_CONTROL_VERSION - 1,
            AUTHENTICATED_CONTROL_VERSION,
        ] {
            let at = At {
                lsn: 8192 + 48,
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
    let ivs = IvSource::with_prefix(3);
    let key = SealKey {
        keys: &keys,
        key_id: 1,
        ivs: &ivs,
    };
    let seal = Seal::new(Mode::PerRecordGcm, 1);
    let at = At {
        lsn: 4096 + 48,
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
    let ivs = IvSource::with_prefix(3);
    let key = SealKey {
        keys: &keys,
        key_id: 1,
        ivs: &ivs,
    };
    for written in Mode::ALL {
        let at = At {
            lsn: 4096 + 48,
            version: FORMAT_VERSION,
        };
        let record = seal_at(&Seal::new(written, 1), &key, 1, 0, b"abc", at);
        let hlen = format::header_len_for_flags(record[format::REC_FLAGS_AT]);
        let header = RecordHeader::decode(&record[..hlen]).unwrap();
        for read in Mode::ALL {
            let agrees = Seal::new(read, 1)
                .check_header(&header, FORMAT_VERSION, false)
                .is_ok();
            let same_records = RecordSeal::for_record(read, FORMAT_VERSION, 0)
                == RecordSeal::for_record(written, FORMAT_VERSION, 0);
            assert_eq!(agrees, same_records, "{written:?} read as {read:?}");
        }
    }
}
