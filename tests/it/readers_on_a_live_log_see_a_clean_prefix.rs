//! While a writer appends and flushes, other threads open fresh `Reader`s again and again and
//! read everything: in every mode each read is a clean prefix of what was appended, never
//! `Error::Corrupt` because the writer moved on, never a wrong payload.

use std::sync::atomic::{AtomicBool, Ordering};

use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const RECORDS: u64 = 600;
const READERS: usize = 2;

/// 150 bytes naming record `id`.
fn payload(id: u64) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.extend((0..142).map(|i| (id as u8).wrapping_mul(31).wrapping_add(i)));
    p
}

fn read_prefix(dir: &std::path::Path, keys: &KeyRing) -> usize {
    let reader = Reader::open(dir, Some(keys.clone())).expect("open reader on a live log");
    let mut n = 0u64;
    for record in reader.records_from(Lsn::default()) {
        let record = record.unwrap_or_else(|e| panic!("read {n} records, then: {e}"));
        assert_eq!(record.payload, payload(n), "record {n} at {}", record.lsn);
        n += 1;
    }
    n as usize
}

#[test]
fn readers_on_a_live_log_see_a_clean_prefix() {
    for (mode, sync) in [
        (Mode::Plaintext, SyncMode::Durable),
        (Mode::PerRecord, SyncMode::Durable),
        (Mode::PageLevel, SyncMode::Durable),
        (Mode::PerRecord, SyncMode::Buffered),
        (Mode::PageLevel, SyncMode::Buffered),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = Config::new(mode)
            .keys(keys.clone())
            .sync(sync)
            .page_size(4096)
            .segment_size(32 * 1024)
            .buffer_size(32 * 1024);
        let wal = Wal::open(dir.path(), config).unwrap();
        let first = wal.append(1, &payload(0)).unwrap();
        wal.flush(first).unwrap();
        let done = AtomicBool::new(false);
        let reads = std::thread::scope(|s| {
            let readers: Vec<_> = (0..READERS)
                .map(|_| {
                    s.spawn(|| {
                        let (mut reads, mut longest) = (0, 0);
                        while !done.load(Ordering::Acquire) {
                            let n = read_prefix(dir.path(), &keys);
                            assert!(
                                n >= longest,
                                "a later read saw {n} records, an earlier one {longest}"
                            );
                            longest = longest.max(n);
                            reads += 1;
                        }
                        reads
                    })
                })
                .collect();
            for id in 1..RECORDS {
                let lsn = wal.append(1, &payload(id)).unwrap();
                wal.flush(lsn).unwrap();
            }
            done.store(true, Ordering::Release);
            readers
                .into_iter()
                .map(|r| r.join().unwrap())
                .sum::<usize>()
        });
        assert!(reads > 0);
        wal.close().unwrap();
        assert_eq!(
            read_prefix(dir.path(), &keys),
            RECORDS as usize,
            "{mode} {sync:?}"
        );
    }
}
