//! A crash leaves the last record torn (garbage) and a complete record after it, at the LSN
//! where a record of the torn one's length would end. Reopening ends the log at the torn
//! record and zeroes the rest of its segment: in every mode the tail segment reads as zeros
//! from the recovered end, and (plaintext, perrecord: the next record goes exactly there) a
//! new record of the torn one's length is the last record read back, not followed by the
//! remnant, which would otherwise read as valid at its position.

use crate::support;

use std::os::unix::fs::FileExt;

use support::{Rng, payload, read_all};
use walcrypt::inspect::segment_file_name;
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const SEGMENT: u64 = 64 * 1024;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

#[test]
fn a_remnant_after_a_torn_record_never_follows_a_new_record() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
        let mut expected = Vec::new();
        for i in 0..5 {
            let p = payload(10 + i, 200);
            let lsn = wal.append(1, &p).unwrap();
            wal.flush(lsn).unwrap();
            expected.push((lsn, 1u8, p));
        }
        // The torn record and the remnant, written out together by the writer's drop (as a
        // crash during their flush leaves them): no page header vouches for either.
        let torn = wal.append(2, &payload(100, 300)).unwrap();
        let remnant = wal.append(3, &payload(101, 150)).unwrap();
        drop(wal);
        let records = read_all(dir.path(), Some(keys.clone()));
        assert_eq!(records.len(), 7, "{mode}");
        assert_eq!(records[6].0, remnant, "{mode}");

        // The torn record's bytes become garbage; the remnant stays whole.
        let (torn, remnant) = (u64::from(torn), u64::from(remnant));
        let path = dir.path().join(segment_file_name(Lsn(0)));
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let mut garbage = vec![0u8; (remnant - torn) as usize];
        Rng::new(7).fill(&mut garbage);
        file.write_all_at(&garbage, torn).unwrap();
        drop(file);
        assert_eq!(read_all(dir.path(), Some(keys.clone())), expected, "{mode}");

        let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, SEGMENT, "{mode}");
        let first_nonzero = bytes[torn as usize..].iter().position(|&b| b != 0);
        assert_eq!(
            first_nonzero, None,
            "{mode}: the rest of the segment is zero"
        );

        if mode != Mode::PageLevel {
            let p = payload(102, 300);
            let lsn = wal.append(2, &p).unwrap();
            assert_eq!(
                u64::from(lsn),
                torn,
                "{mode}: the new record takes the torn one's place"
            );
            wal.flush(lsn).unwrap();
            expected.push((lsn, 2, p));
            let end = Reader::open(dir.path(), Some(keys.clone()))
                .unwrap()
                .records_from(lsn)
                .next()
                .unwrap()
                .unwrap()
                .end_lsn;
            assert_eq!(
                u64::from(end),
                remnant,
                "{mode}: it ends where the remnant starts"
            );
        }
        wal.close().unwrap();
        let got = read_all(dir.path(), Some(keys));
        let heads = |v: &[(Lsn, u8, Vec<u8>)]| v.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>();
        assert_eq!(
            heads(&got),
            heads(&expected),
            "{mode}: (lsn, kind) read back"
        );
        assert!(got == expected, "{mode}: payloads differ");
    }
}
