//! A flipped bit anywhere in a log, opened with `RecoveryMode::TruncateAtDamage`: either the
//! open fails with an error (damaged segment headers are never salvaged), or the log that
//! remains reads back without an error as a prefix of what was written, holding at least every
//! record that ended before the damaged page.

use crate::support;

use std::os::unix::fs::FileExt;

use support::{copy_dir, payload, small_config};
use walcrypt::{KeyRing, Lsn, Mode, Reader, RecoveryMode, Wal};

const FLIPS_PER_MODE: u64 = 20;

#[test]
fn every_salvaged_log_is_a_clean_prefix() {
    let mut seed = 0x5eed_f11b_0000_0001_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for mode in Mode::ALL {
        let original = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(original.path(), small_config(mode, &keys)).unwrap();
        let mut written = Vec::new();
        for i in 0..120 {
            let p = payload(i, (i as usize * 41) % 200);
            let lsn = wal.append(1, &p).unwrap();
            if i % 5 == 4 {
                wal.flush(lsn).unwrap();
            }
            written.push((lsn, p));
        }
        let geo = wal.geometry();
        let end = u64::from(wal.end_lsn());
        wal.close().unwrap();
        let ends: Vec<u64> = written
            .iter()
            .skip(1)
            .map(|(l, _)| u64::from(*l))
            .chain([end])
            .collect();

        for _ in 0..FLIPS_PER_MODE {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(original.path(), dir.path());
            let byte = next(end);
            let segment = byte - byte % geo.segment_size;
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
            b[0] ^= 1 << next(8);
            file.write_all_at(&b, byte - segment).unwrap();
            drop(file);

            let config = small_config(mode, &keys).recovery(RecoveryMode::TruncateAtDamage);
            let Ok(wal) = Wal::open(dir.path(), config) else {
                assert!(
                    byte % geo.segment_size < geo.page_size,
                    "{mode}: byte {byte}: only a segment header flip may refuse salvage"
                );
                continue;
            };
            wal.close().unwrap();
            let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
            let kept: Vec<_> = reader
                .records_from(Lsn::default())
                .map(|r| r.unwrap_or_else(|e| panic!("{mode}: byte {byte}: {e}")))
                .collect();
            for (r, (lsn, p)) in kept.iter().zip(&written) {
                assert_eq!((&r.lsn, &r.payload), (lsn, p), "{mode}: byte {byte}");
            }
            assert!(kept.len() <= written.len());
            let page = byte - byte % geo.page_size;
            let safe = ends.iter().filter(|&&e| e <= page).count();
            assert!(
                kept.len() >= safe,
                "{mode}: byte {byte}: kept {} of the {safe} records before the damaged page",
                kept.len()
            );
        }
    }
}
