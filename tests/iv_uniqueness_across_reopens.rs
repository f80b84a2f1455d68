//! Fifty open/append/close cycles in perrecord and pagelevel mode: no IV is ever used twice.
//! Every write the log makes is captured, so page IVs overwritten on disk by later rewrites of
//! the same page are counted too.

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use support::{Recorder, RecordingStorage};
use walcrypt::format::{PAGE_HEADER_LEN, PageHeader};
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
        let mut note = |iv: [u8; 16], at: String| {
            count += 1;
            if let Some(first) = seen.insert(iv, at.clone()) {
                panic!("{mode}: IV {iv:02x?} used at {first} and again at {at}");
            }
        };
        match mode {
            // perrecord-gcm: the GCM nonce is the IV's first 12 bytes, the rest zero, so
            // distinct IVs are distinct nonces.
            Mode::PerRecord | Mode::PerRecordGcm => {
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
                let page = 512usize;
                for (offset, bytes) in recorder.writes.lock().unwrap().iter() {
                    for (i, image) in bytes.chunks(page).enumerate() {
                        if let Some(h) = PageHeader::decode(log_id, &image[..PAGE_HEADER_LEN]) {
                            note(
                                h.iv,
                                format!("write at offset {}", offset + (i * page) as u64),
                            );
                        }
                    }
                }
                assert!(
                    count >= 300,
                    "every flush writes at least one page ({count})"
                );
            }
        }
    }
}
