//! A flipped bit inside the durable log: by default the log refuses to open and nothing on disk
//! changes; with `RecoveryMode::TruncateAtDamage` it opens, keeps every record before the
//! damaged one, reports the cut, and continues writing where the damage was. Salvage reads the
//! whole log, so it also finds damage before the tail that an ordinary open reads.

use crate::support;

use std::os::unix::fs::FileExt;

use support::{payload, read_all, segment_files, small_config};
use walcrypt::{CorruptionKind, Error, KeyRing, Lsn, Mode, RecoveryMode, Wal};

fn snapshot(dir: &std::path::Path) -> Vec<Vec<u8>> {
    segment_files(dir)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

#[test]
fn default_refuses_and_salvage_keeps_every_record_before_the_damage() {
    for mode in Mode::ALL {
        for replay in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let config = small_config(mode, &keys);
            let wal = Wal::open(dir.path(), config.clone()).unwrap();
            let records: Vec<_> = (0..60).map(|i| (1u8, payload(i, 70))).collect();
            let lsns = support::append_all(&wal, &records);
            let geo = wal.geometry();
            wal.close().unwrap();

            // Damage a payload byte of a record near the end, inside the tail a default open
            // reads (in the same page as its header).
            let n = (40..55)
                .find(|&i| (u64::from(lsns[i]) + 40) / 512 == u64::from(lsns[i]) / 512)
                .unwrap();
            let byte = u64::from(lsns[n]) + 40;
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
            b[0] ^= 0x04;
            file.write_all_at(&b, byte - segment).unwrap();
            drop(file);

            // Default: refuse, and leave the files as they are.
            let before = snapshot(dir.path());
            match Wal::open(dir.path(), config.clone()) {
                Err(Error::Corrupt { at, .. }) => assert_eq!(at.lsn, lsns[n], "{mode}"),
                other => panic!("{mode}: the default must refuse, got {other:?}"),
            }
            assert_eq!(
                snapshot(dir.path()),
                before,
                "{mode}: a refused open changed files"
            );

            // Salvage, asked for explicitly.
            let salvage = config.clone().recovery(RecoveryMode::TruncateAtDamage);
            let mut replayed = Vec::new();
            let wal = if replay {
                Wal::open_and_replay(dir.path(), salvage, Lsn::default(), |r| {
                    replayed.push(r.payload);
                    Ok(())
                })
                .unwrap()
            } else {
                Wal::open(dir.path(), salvage).unwrap()
            };
            let summary = wal.recovery_summary().unwrap().clone();
            let cut = summary.salvaged.expect("the cut is reported");
            assert_eq!(cut.cut_at, lsns[n], "{mode}");
            assert_eq!(cut.at.lsn, lsns[n], "{mode}");
            assert!(
                matches!(cut.kind, CorruptionKind::RecordChecksum { .. }),
                "{mode}: {:?}",
                cut.kind
            );
            assert!(cut.files_ended_at > lsns[59], "{mode}");
            assert_eq!(summary.end, lsns[n], "{mode}");
            if replay {
                assert_eq!(summary.replayed, n as u64, "{mode}");
                let expected: Vec<_> = records[..n].iter().map(|(_, p)| p.clone()).collect();
                assert_eq!(replayed, expected, "{mode}: replay stops before the damage");
            }
            // Writing resumes where the damaged record was.
            let next = wal.append(2, b"after the repair").unwrap();
            if mode == Mode::PageLevel {
                // A reopened pagelevel log continues on the next page, after a resume record.
                assert!(next > lsns[n], "{mode}");
            } else {
                assert_eq!(next, lsns[n], "{mode}");
            }
            wal.flush(next).unwrap();
            wal.close().unwrap();

            let log = read_all(dir.path(), Some(keys.clone()));
            assert_eq!(log.len(), n + 1, "{mode}");
            for (i, (lsn, kind, p)) in log[..n].iter().enumerate() {
                assert_eq!(
                    (*lsn, *kind, p),
                    (lsns[i], 1, &records[i].1),
                    "{mode}: record {i}"
                );
            }
            assert_eq!(log[n].2, b"after the repair");
            // The repaired log opens with the default policy.
            Wal::open(dir.path(), config).unwrap().close().unwrap();
        }
    }
}

#[test]
fn salvage_finds_damage_before_the_tail_an_ordinary_open_reads() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        // No segment prepared ahead, so the count of segment files below is exact.
        let config = small_config(mode, &keys).prepare_segments(false);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        let records: Vec<_> = (0..300).map(|i| (1u8, payload(i, 70))).collect();
        let lsns = support::append_all(&wal, &records);
        let geo = wal.geometry();
        wal.close().unwrap();
        assert!(
            segment_files(dir.path()).len() > 4,
            "a log of several segments"
        );

        // Damage a record in the oldest segment, far before the tail.
        let n = (3..20)
            .find(|&i| (u64::from(lsns[i]) + 40) / 512 == u64::from(lsns[i]) / 512)
            .unwrap();
        let byte = u64::from(lsns[n]) + 40;
        assert!(byte < geo.segment_size);
        let path = dir
            .path()
            .join(walcrypt::inspect::segment_file_name(Lsn(0)));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, byte).unwrap();
        b[0] ^= 0x01;
        file.write_all_at(&b, byte).unwrap();
        drop(file);

        let wal = Wal::open(dir.path(), config.recovery(RecoveryMode::TruncateAtDamage)).unwrap();
        let cut = wal.recovery_summary().unwrap().salvaged.clone().unwrap();
        assert_eq!(cut.cut_at, lsns[n]);
        if mode == Mode::PageLevel {
            assert!(wal.end_lsn() > lsns[n], "{mode}");
        } else {
            assert_eq!(wal.end_lsn(), lsns[n], "{mode}");
        }
        wal.close().unwrap();
        let log = read_all(dir.path(), Some(keys));
        assert_eq!(
            log.len(),
            n,
            "{mode}: every record before the damage, nothing after it"
        );
        assert_eq!(segment_files(dir.path()).len(), 1, "later segments removed");
    }
}
