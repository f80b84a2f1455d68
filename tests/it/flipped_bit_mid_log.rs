//! A flipped bit in a record in the middle of the log is corruption with its position, from
//! the reader and from recovery: never silently treated as the end of the log.

use crate::support;

use std::os::unix::fs::FileExt;

use support::{payload, small_config};
use walcrypt::{CorruptionKind, Error, KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn flipped_bit_is_reported_with_its_position() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        let wal_segment_size = wal.geometry().segment_size;
        let records: Vec<_> = (0..50).map(|i| (1u8, payload(i, 60))).collect();
        let lsns = support::append_all(&wal, &records);
        wal.close().unwrap();

        // Flip one bit in a payload byte of the first record from 20 on whose header and
        // that byte share a page.
        let n = (20..40)
            .find(|&i| (u64::from(lsns[i]) + 40) / 512 == u64::from(lsns[i]) / 512)
            .unwrap();
        let byte = u64::from(lsns[n]) + 40;
        let segment = byte - byte % wal_segment_size;
        let path = dir
            .path()
            .join(walcrypt::inspect::segment_file_name(Lsn(segment)));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, byte - segment).unwrap();
        b[0] ^= 0x10;
        file.write_all_at(&b, byte - segment).unwrap();
        drop(file);

        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let results: Vec<_> = reader.records_from(Lsn::default()).collect();
        assert_eq!(
            results.len(),
            n + 1,
            "{mode}: {n} good records and one error"
        );
        for (r, lsn) in results[..n].iter().zip(&lsns) {
            assert_eq!(r.as_ref().unwrap().lsn, *lsn);
        }
        match &results[n] {
            Err(Error::Corrupt { at, kind }) => {
                assert_eq!(at.lsn, lsns[n], "{mode}");
                assert_eq!(u64::from(at.segment), segment, "{mode}");
                assert!(
                    matches!(kind, CorruptionKind::RecordChecksum { .. }),
                    "{mode}: {kind:?}"
                );
                let message = results[n].as_ref().unwrap_err().to_string();
                assert!(message.contains("checksum"), "{message}");
                assert!(message.contains(&walcrypt::inspect::segment_file_name(Lsn(segment))));
            }
            other => panic!("{mode}: expected corruption, got {other:?}"),
        }

        match Wal::open(dir.path(), config) {
            Err(Error::Corrupt { at, .. }) => assert_eq!(at.lsn, lsns[n], "{mode}"),
            other => panic!("{mode}: recovery must refuse, got {other:?}"),
        }
    }
}
