//! With compression on, compressible records are stored compressed (flag set, fewer bytes),
//! incompressible and small ones as they are, in every mode; the reader, the raw reader and
//! replay return the payloads as appended, and a log written with compression reads the same
//! when reopened without it.

use crate::support;

use support::{payload, small_config};
use walcrypt::inspect::RECORD_FLAG_COMPRESSED;
use walcrypt::{Compression, KeyRing, Lsn, Mode, Reader, Wal};

fn compressible(i: u64, len: usize) -> Vec<u8> {
    let row = format!("row {i:04} name=user-{} balance={:06};", i % 7, i * 37);
    row.into_bytes().into_iter().cycle().take(len).collect()
}

#[test]
fn compressed_records_round_trip_in_every_mode() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys).compression(Compression::Lz4 { min_len: 200 });
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        let mut written = Vec::new();
        for i in 0..60u64 {
            let data = match i % 3 {
                0 => compressible(i, 300 + 97 * i as usize),
                1 => payload(i, 300 + 50 * i as usize),
                _ => compressible(i, 150),
            };
            written.push((wal.append(i as u8, &data).unwrap(), i as u8, data));
        }
        wal.close().unwrap();

        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        for (raw, (lsn, _, data)) in reader.raw_records_from(Lsn::default()).zip(&written) {
            let raw = raw.unwrap();
            assert_eq!(raw.lsn, *lsn);
            let i = raw.header.kind as u64;
            let compressed = raw.header.flags & RECORD_FLAG_COMPRESSED != 0;
            assert_eq!(compressed, i.is_multiple_of(3), "{mode}: record {i}");
            if compressed {
                assert!(raw.stored.len() < data.len() / 2, "{mode}: record {i}");
            }
            assert_eq!(raw.payload.as_ref(), Some(data), "{mode}: raw payload {i}");
        }
        let read = support::read_all(dir.path(), Some(keys.clone()));
        assert_eq!(read, written, "{mode}: reader");

        let mut replayed = Vec::new();
        let plain_config = small_config(mode, &keys);
        let wal = Wal::open_and_replay(dir.path(), plain_config, Lsn::default(), |r| {
            replayed.push((r.lsn, r.kind, r.payload));
            Ok(())
        })
        .unwrap();
        wal.close().unwrap();
        assert_eq!(
            replayed, written,
            "{mode}: replay without compression configured"
        );
    }
}
