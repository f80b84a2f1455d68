//! Fifty open/append/close cycles in perrecord and pagelevel mode: no counter block ever
//! encrypts two different plaintexts. perrecord: no record IV is used twice. pagelevel: every
//! write the log makes is captured (so images overwritten on disk by later rewrites count too);
//! an IV belongs to one page in one open, and each rewrite under it repeats the ciphertext
//! written before, byte for byte.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;

use support::{Recorder, RecordingStorage};
use walcrypt::inspect::{PAGE_HEADER_LEN, PageHeader};
use walcrypt::{KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn no_iv_repeats_over_fifty_reopens() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let recorder = Arc::new(Recorder::default());
        let config = support::small_config(mode, &keys)
            .storage(Arc::new(RecordingStorage(recorder.clone())));
        for cycle in 0..50u64 {
            let wal = Wal::open(dir.path(), config.clone()).unwrap();
            // A few records per cycle, each flushed: the tail page is rewritten every time.
            for i in 0..6 {
                let lsn = wal
                    .append(1, &support::payload(cycle * 10 + i, 40))
                    .unwrap();
                wal.flush(lsn).unwrap();
            }
            wal.close().unwrap();
        }
        let reader = Reader::open(dir.path(), Some(keys)).unwrap();
        let log_id = reader.log_id();
        let mut seen: HashMap<[u8; 16], String> = HashMap::new();
        let mut count = 0;
        match mode {
            // perrecord-gcm: the GCM nonce is the IV's first 12 bytes, the rest zero, so
            // distinct IVs are distinct nonces.
            Mode::PerRecord | Mode::PerRecordGcm => {
                let mut note = |iv: [u8; 16], at: String| {
                    count += 1;
                    if let Some(first) = seen.insert(iv, at.clone()) {
                        panic!("{mode}: IV {iv:02x?} used at {first} and again at {at}");
                    }
                };
                for r in reader.raw_records_from(Lsn::default()) {
                    let r = r.unwrap();
                    let (_, iv) = r
                        .header
                        .encryption
                        .expect("perrecord records are encrypted");
                    if mode == Mode::PerRecordGcm {
                        assert_eq!(iv[12..], [0; 4], "a 96-bit nonce, block field zero");
                    }
                    note(iv, format!("record {}", r.lsn));
                }
                assert_eq!(count, 300);
            }
            _ => {
                // A page keeps its IV for every rewrite within one open; each rewrite must
                // repeat the earlier ciphertext exactly (same page, same key, the earlier
                // image's filled part unchanged), and no IV may serve two pages or two opens.
                let page = 512usize;
                let mut images: HashMap<[u8; 16], (Lsn, Vec<u8>)> = HashMap::new();
                for (offset, bytes) in recorder.writes.lock().unwrap().iter() {
                    for (i, image) in bytes.chunks(page).enumerate() {
                        let Some(h) = PageHeader::decode(log_id, &image[..PAGE_HEADER_LEN]) else {
                            continue;
                        };
                        count += 1;
                        let at = offset + (i * page) as u64;
                        let body = image[PAGE_HEADER_LEN..].to_vec();
                        match images.get_mut(&h.iv) {
                            None => {
                                images.insert(h.iv, (h.page_lsn, body));
                            }
                            Some((first_page, earlier)) => {
                                assert_eq!(
                                    *first_page, h.page_lsn,
                                    "{mode}: IV {:02x?} serves two pages",
                                    h.iv
                                );
                                let common = filled(earlier).min(filled(&body));
                                assert_eq!(
                                    earlier[..common],
                                    body[..common],
                                    "{mode}: a rewrite at offset {at} changed ciphertext \
                                     under IV {:02x?}",
                                    h.iv
                                );
                                if filled(&body) > filled(earlier) {
                                    *earlier = body;
                                }
                            }
                        }
                    }
                }
                assert!(
                    count >= 300,
                    "every flush writes at least one page ({count})"
                );
                assert!(
                    images.len() >= 50,
                    "every open draws its own IVs ({} distinct)",
                    images.len()
                );
            }
        }
    }
}

/// Length of a page body up to its last non-zero byte: the unfilled tail is written as zeros.
fn filled(body: &[u8]) -> usize {
    body.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}
