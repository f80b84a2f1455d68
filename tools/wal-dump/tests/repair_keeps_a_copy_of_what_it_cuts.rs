//! `wal-dump --repair --backup DIR` cuts a damaged log at its first damage: the log opens again
//! with every record before the damaged one, and the backup holds the segment files as they
//! were, from the damaged one on.

mod support;

use std::os::unix::fs::FileExt;

use support::*;
use walcrypt::{Error, Lsn, Mode, Wal};

#[test]
fn repair_cuts_at_the_damage_and_keeps_copies() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let hlen = if mode == Mode::PerRecord { 32 } else { 12 };
        // Damage that recovery reads (in the last segment) and that a later flush proves is
        // not a torn tail: a record before the last flush point (every 20th record), on an
        // earlier page than that point. Log lengths vary until such a record exists.
        let (log, key_file, keys, appended, victim) = (100..200)
            .find_map(|n| {
                let dir = tmp.path().join(format!("n{n}"));
                std::fs::create_dir(&dir).unwrap();
                let (log, key_file, keys, appended) = make_log(&dir, mode, n);
                let last_seg = u64::from(appended.last().unwrap().lsn) / SEGMENT;
                let flush_point = (0..n - 1).rev().find(|i| i % 20 == 19)?;
                let flushed_page = u64::from(appended[flush_point].lsn) / PAGE;
                let victim = (0..flush_point).find(|&i| {
                    let lsn = u64::from(appended[i].lsn);
                    lsn / SEGMENT == last_seg
                        && lsn / PAGE < flushed_page
                        && !appended[i].payload.is_empty()
                        && lsn / PAGE == (lsn + hlen) / PAGE
                })?;
                Some((log, key_file, keys, appended, victim))
            })
            .expect("a log with damage recovery must see");
        let (path, offset) = locate(&log, appended[victim].lsn);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, offset + hlen).unwrap();
        byte[0] ^= 0x10;
        file.write_all_at(&byte, offset + hlen).unwrap();
        drop(file);
        let damaged = std::fs::read(&path).unwrap();
        assert!(matches!(
            Wal::open(&log, config(mode, &keys)),
            Err(Error::Corrupt { .. })
        ));

        // Without --backup: refused, nothing changed.
        let o = wal_dump(&[&"--repair", &"--key-file", &key_file, &log]);
        assert_eq!(o.status.code(), Some(2), "{mode}: {}", stderr(&o));
        assert_eq!(std::fs::read(&path).unwrap(), damaged);

        let backup = tmp.path().join("cut");
        let o = wal_dump(&[
            &"--repair",
            &"--backup",
            &backup,
            &"--key-file",
            &key_file,
            &log,
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{mode}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        let text = stdout(&o);
        assert!(text.contains("repaired"), "{mode}: {text}");
        assert!(
            text.contains(&appended[victim].lsn.to_string()),
            "{mode}: names the cut: {text}"
        );

        // The backup holds the damaged segment as it was, and every later one.
        let seg_name = path.file_name().unwrap();
        assert_eq!(std::fs::read(backup.join(seg_name)).unwrap(), damaged);
        let later = std::fs::read_dir(&backup).unwrap().count();
        let last_seg = u64::from(appended.last().unwrap().lsn) / SEGMENT;
        let damaged_seg = u64::from(appended[victim].lsn) / SEGMENT;
        // (Plus the empty segment prepared ahead, when the writer had prepared it.)
        let expected = last_seg - damaged_seg + 1;
        assert!(
            (expected..=expected + 1).contains(&(later as u64)),
            "{mode}: {later} files backed up, expected {expected}"
        );

        // The log opens with the default policy and holds every record before the damage.
        let wal = Wal::open(&log, config(mode, &keys)).unwrap();
        if mode == Mode::PageLevel {
            // A reopened pagelevel log continues on the next page, after a resume record.
            assert!(wal.end_lsn() > appended[victim].lsn, "{mode}");
        } else {
            assert_eq!(wal.end_lsn(), appended[victim].lsn, "{mode}");
        }
        wal.close().unwrap();
        let reader = walcrypt::Reader::open(&log, Some(keys.clone())).unwrap();
        let kept: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| r.unwrap().payload)
            .collect();
        let expected: Vec<_> = appended[..victim]
            .iter()
            .map(|a| a.payload.clone())
            .collect();
        assert_eq!(kept, expected, "{mode}");

        // A clean log: nothing to repair, nothing copied.
        let again = tmp.path().join("again");
        let o = wal_dump(&[
            &"--repair",
            &"--backup",
            &again,
            &"--key-file",
            &key_file,
            &log,
        ]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stderr(&o));
        assert!(stdout(&o).contains("no damage"), "{mode}");
        assert!(!again.exists() || std::fs::read_dir(&again).unwrap().count() == 0);
    }
}
