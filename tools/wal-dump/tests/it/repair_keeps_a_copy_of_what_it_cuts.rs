//! `wal-dump --repair --backup DIR` cuts a damaged log at its first damage: the log opens again
//! with every record before the damaged one, and the backup holds the segment files as they
//! were, from the damaged one on. `--dry-run` reports the same cut, in records and bytes of
//! written log, and changes nothing; a perrecord log is cut by its checksums without the key.
//! `--truncate-to LSN` and `--purge-before LSN` shorten a closed log the same way, after
//! copying what they remove. All three refuse a log open in another process before they copy
//! anything.

use crate::support;

use support::*;
use walcrypt::{Error, Lsn, Mode};

/// A log of `mode` in `tmp` with one flipped payload byte that recovery must see as damage:
/// the log, its key file and keys, the appended records, the damaged one's index, its segment
/// file and that file's damaged bytes.
struct Damaged {
    log: std::path::PathBuf,
    key_file: std::path::PathBuf,
    keys: walcrypt::KeyRing,
    appended: Vec<Appended>,
    victim: usize,
    path: std::path::PathBuf,
    damaged: Vec<u8>,
    /// End of the last record, before the damage.
    end: Lsn,
}

fn damaged_log(tmp: &std::path::Path, mode: Mode) -> Damaged {
    let hlen = if mode.is_per_record() { 32 } else { 12 };
    // Damage that recovery reads (in the last segment) and that a later flush proves is
    // not a torn tail: a record before the last flush point (every 20th record), on an
    // earlier page than that point. Log lengths vary until such a record exists.
    let (log, key_file, keys, appended, victim) = (100..200)
        .find_map(|n| {
            let dir = tmp.join(format!("n{n}"));
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
    let reader = walcrypt::Reader::open(&log, Some(keys.clone())).unwrap();
    let end = reader
        .raw_records_from(Lsn::default())
        .last()
        .unwrap()
        .unwrap()
        .end_lsn;
    drop(reader);
    let (path, offset) = locate(&log, appended[victim].lsn);
    flip_bits(&path, offset + hlen, 0x10);
    let damaged = std::fs::read(&path).unwrap();
    assert!(matches!(
        open_retrying(&log, config(mode, &keys)),
        Err(Error::Corrupt { .. })
    ));
    Damaged {
        log,
        key_file,
        keys,
        appended,
        victim,
        path,
        damaged,
        end,
    }
}

#[test]
fn repair_cuts_at_the_damage_and_keeps_copies() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let Damaged {
            log,
            key_file,
            keys,
            appended,
            victim,
            path,
            damaged,
            ..
        } = damaged_log(tmp.path(), mode);

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
        let wal = open_retrying(&log, config(mode, &keys)).unwrap();
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

/// Every file of the log directory and its bytes.
fn snapshot(log: &std::path::Path) -> Vec<(std::ffi::OsString, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(log)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn dry_run_reports_the_records_and_bytes_a_cut_removes_and_changes_nothing() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let d = damaged_log(tmp.path(), mode);
        let before = snapshot(&d.log);
        let cut = d.appended.len() - d.victim;
        let bytes = u64::from(d.end) - u64::from(d.appended[d.victim].lsn);

        let o = wal_dump(&[
            &"--repair",
            &"--dry-run",
            &"--key-file",
            &d.key_file,
            &d.log,
        ]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {text}{}", stderr(&o));
        assert!(text.contains("dry run: nothing changed"), "{mode}: {text}");
        assert!(
            text.contains(&format!("{} records before the damage kept", d.victim)),
            "{mode}: {text}"
        );
        if mode == Mode::PageLevel {
            // Record headers are inside encrypted pages: counting resumes at the next page
            // where a record starts.
            assert!(text.contains("would cut: at least "), "{mode}: {text}");
        } else {
            assert!(
                text.contains(&format!("would cut: {cut} records ({bytes} bytes of log")),
                "{mode}: {text}"
            );
        }
        assert_eq!(snapshot(&d.log), before, "{mode}: dry run changed the log");

        let o = wal_dump(&[
            &"--repair",
            &"--dry-run",
            &"--format",
            &"json",
            &"--key-file",
            &d.key_file,
            &d.log,
        ]);
        let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
        assert_eq!(report["result"], "would_cut", "{report}");
        assert_eq!(report["exit_code"], 1, "{report}");
        assert_eq!(report["dry_run"], true, "{report}");
        assert_eq!(report["records_kept"], d.victim, "{report}");
        assert_eq!(
            report["cut_at"],
            u64::from(d.appended[d.victim].lsn),
            "{report}"
        );
        assert_eq!(
            report["damage"]["segment"],
            d.path.file_name().unwrap().to_str().unwrap(),
            "{report}"
        );
        if mode != Mode::PageLevel {
            assert_eq!(report["records_cut"], cut, "{report}");
            assert_eq!(report["records_cut_is_lower_bound"], false, "{report}");
            assert_eq!(report["bytes_cut"], bytes, "{report}");
        }
        assert!(report["backup"].is_null(), "{report}");

        // The repair itself reports the same cut, in JSON too.
        let backup = tmp.path().join("cut");
        let o = wal_dump(&[
            &"--repair",
            &"--backup",
            &backup,
            &"--format",
            &"json",
            &"--key-file",
            &d.key_file,
            &d.log,
        ]);
        let done: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
        assert_eq!(o.status.code(), Some(0), "{done}");
        assert_eq!(done["result"], "repaired", "{done}");
        assert_eq!(done["records_cut"], report["records_cut"], "{done}");
        assert_eq!(done["bytes_cut"], report["bytes_cut"], "{done}");
        assert!(done["backup_files"].as_u64().unwrap() >= 1, "{done}");
        let o = wal_dump(&[
            &"--repair",
            &"--dry-run",
            &"--format",
            &"json",
            &"--key-file",
            &d.key_file,
            &d.log,
        ]);
        let clean: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
        assert_eq!(
            (clean["result"].as_str(), o.status.code()),
            (Some("no_damage"), Some(0)),
            "{clean}"
        );
    }
}

#[test]
fn a_perrecord_log_is_repaired_by_its_checksums_without_the_key_and_a_pagelevel_one_is_not() {
    for mode in [Mode::PerRecord, Mode::PerRecordGcm, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let d = damaged_log(tmp.path(), mode);
        let backup = tmp.path().join("cut");
        let o = wal_dump(&[&"--repair", &"--backup", &backup, &d.log]);
        if mode == Mode::PageLevel {
            assert_fails(&o, 2, "a pagelevel log needs --key-file to be repaired");
            assert_eq!(std::fs::read(&d.path).unwrap(), d.damaged);
            continue;
        }
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{mode}: {text}{}", stderr(&o));
        assert!(
            text.contains(&format!("the log now ends at {}", d.appended[d.victim].lsn)),
            "{mode}: {text}"
        );
        assert_eq!(
            std::fs::read(backup.join(d.path.file_name().unwrap())).unwrap(),
            d.damaged
        );
        // The writer opens the cut log with the default policy and the key, and reads every
        // record before the damage.
        let wal = open_retrying(&d.log, config(mode, &d.keys)).unwrap();
        assert_eq!(wal.end_lsn(), d.appended[d.victim].lsn, "{mode}");
        wal.close().unwrap();
        let reader = walcrypt::Reader::open(&d.log, Some(d.keys.clone())).unwrap();
        let kept: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| r.unwrap().payload)
            .collect();
        let expected: Vec<_> = d.appended[..d.victim]
            .iter()
            .map(|a| a.payload.clone())
            .collect();
        assert_eq!(kept, expected, "{mode}");
        let o = wal_dump(&[&"--verify", &"--key-file", &d.key_file, &d.log]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stdout(&o));
    }
}

/// A record whose page's header vouches for durability beyond the record's start, so a cut
/// there must lower that page's durable hint; otherwise a record in the middle of the log.
fn cut_point(log: &std::path::Path, keys: &walcrypt::KeyRing, appended: &[Appended]) -> usize {
    let reader = walcrypt::Reader::open(log, Some(keys.clone())).unwrap();
    let hints: Vec<(u64, u64)> = reader
        .page_headers()
        .unwrap()
        .into_iter()
        .filter_map(|p| {
            p.header
                .map(|h| (u64::from(p.page_lsn), u64::from(h.durable_hint)))
        })
        .collect();
    (appended.len() / 2..appended.len() - 1)
        .find(|&i| {
            let lsn = u64::from(appended[i].lsn);
            hints
                .iter()
                .any(|&(page, hint)| page == lsn - lsn % PAGE && hint > lsn)
        })
        .unwrap_or(appended.len() / 2)
}

#[test]
fn truncate_to_cuts_at_a_record_boundary_after_keeping_a_copy() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, keys, appended) = make_log(tmp.path(), mode, 200);
        let i = cut_point(&log, &keys, &appended);
        let lsn = appended[i].lsn;
        let before = snapshot(&log);

        let o = wal_dump(&[
            &"--truncate-to",
            &lsn.to_string(),
            &"--dry-run",
            &"--key-file",
            &key_file,
            &log,
        ]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{mode}: {text}{}", stderr(&o));
        assert!(
            text.contains(&format!("would cut: {} records", 200 - i)),
            "{mode}: {text}"
        );
        assert_eq!(snapshot(&log), before, "{mode}");

        let off = walcrypt::Lsn(u64::from(lsn) + 1).to_string();
        let backup = tmp.path().join("cut");
        assert_fails(
            &wal_dump(&[
                &"--truncate-to",
                &off,
                &"--backup",
                &backup,
                &"--key-file",
                &key_file,
                &log,
            ]),
            2,
            "no record starts there",
        );
        assert_eq!(snapshot(&log), before, "{mode}");

        let o = wal_dump(&[
            &"--truncate-to",
            &lsn.to_string(),
            &"--backup",
            &backup,
            &"--format",
            &"json",
            &"--key-file",
            &key_file,
            &log,
        ]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stderr(&o));
        let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
        assert_eq!(report["result"], "truncated", "{report}");
        assert_eq!(report["records_cut"], 200 - i, "{report}");
        let (path, _) = locate(&log, lsn);
        let name = path.file_name().unwrap();
        let original = &before.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(
            &std::fs::read(backup.join(name)).unwrap(),
            original,
            "{mode}"
        );

        // The writer opens the shortened log with the default policy.
        let wal = open_retrying(&log, config(mode, &keys)).unwrap();
        wal.close().unwrap();
        let reader = walcrypt::Reader::open(&log, Some(keys.clone())).unwrap();
        let kept: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| r.unwrap().payload)
            .collect();
        let expected: Vec<_> = appended[..i].iter().map(|a| a.payload.clone()).collect();
        assert_eq!(kept, expected, "{mode}");
        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stdout(&o));
    }
}

#[test]
fn purge_before_removes_whole_old_segments_after_keeping_a_copy() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, keys, appended) = make_log(tmp.path(), mode, 300);
        let lsn = appended[200].lsn;
        let doomed: Vec<String> = snapshot(&log)
            .into_iter()
            .filter_map(|(n, _)| {
                let n = n.into_string().unwrap();
                let start = walcrypt::inspect::parse_segment_file_name(&n)?;
                (u64::from(start) + SEGMENT <= u64::from(lsn)).then_some(n)
            })
            .collect();
        assert!(doomed.len() > 2, "{mode}: {doomed:?}");
        let before = snapshot(&log);

        let o = wal_dump(&[
            &"--purge-before",
            &lsn.to_string(),
            &"--dry-run",
            &"--format",
            &"json",
            &"--key-file",
            &key_file,
            &log,
        ]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stderr(&o));
        let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
        assert_eq!(report["result"], "would_purge", "{report}");
        assert_eq!(
            report["segments_removed"],
            serde_json::json!(doomed),
            "{report}"
        );
        assert_eq!(snapshot(&log), before, "{mode}");

        if mode.is_encrypted() {
            let backup = tmp.path().join("nokey");
            assert_fails(
                &wal_dump(&[
                    &"--purge-before",
                    &lsn.to_string(),
                    &"--backup",
                    &backup,
                    &log,
                ]),
                2,
                "needs --key-file",
            );
        }

        let backup = tmp.path().join("purged");
        let o = wal_dump(&[
            &"--purge-before",
            &lsn.to_string(),
            &"--backup",
            &backup,
            &"--key-file",
            &key_file,
            &log,
        ]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{mode}: {text}{}", stderr(&o));
        assert!(
            text.contains(&format!("purged: {} segment files removed", doomed.len())),
            "{mode}: {text}"
        );
        for name in &doomed {
            assert!(!log.join(name).exists(), "{mode}: {name} still there");
            let original = &before
                .iter()
                .find(|(n, _)| n.to_str() == Some(name))
                .unwrap()
                .1;
            assert_eq!(
                &std::fs::read(backup.join(name)).unwrap(),
                original,
                "{mode}"
            );
        }
        let reader = walcrypt::Reader::open(&log, Some(keys.clone())).unwrap();
        let last = reader.records_from(Lsn::default()).last().unwrap().unwrap();
        assert_eq!(last.payload, appended[299].payload, "{mode}");
        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stdout(&o));
    }
}

#[test]
fn repair_names_written_pages_after_an_end_that_reads_as_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = walcrypt::KeyRing::generate().unwrap();
    let log = tmp.path().join("log");
    // No flushes: no durable hint proves the damage, so the reader takes it for the end.
    let wal = open_retrying(
        &log,
        walcrypt::Config::new(Mode::PerRecord)
            .keys(keys.clone())
            .page_size(PAGE)
            .segment_size(SEGMENT),
    )
    .unwrap();
    let lsns: Vec<Lsn> = (0..300)
        .map(|i| wal.append(1, &payload(i)).unwrap())
        .collect();
    // Dropped, not closed: a close syncs, and the last page's header would vouch for it all.
    drop(wal);
    let victim = (100..300).find(|&i| !payload(i).is_empty()).unwrap();
    let (path, offset) = locate(&log, lsns[victim]);
    flip_bits(&path, offset + 32, 0x10);

    let o = wal_dump(&[&"--repair", &"--dry-run", &log]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    assert!(text.contains("no damage found"), "{text}");
    assert!(
        text.contains(&format!(
            "note: the valid log ends at {}, but ",
            lsns[victim]
        )),
        "{text}"
    );
    let o = wal_dump(&[&"--repair", &"--dry-run", &"--format", &"json", &log]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
    assert!(report["pages_after_end"].as_u64().unwrap() > 0, "{report}");
}

/// A log open in a `Wal` (of this process, to the tool another one) is refused by
/// `--purge-before` (also where nothing would be purged, and with `--dry-run`) and
/// `--truncate-to` before anything is copied: the backup directory is never made, and the same
/// command with the same directory works once the writer is closed. `--repair` of a damaged log
/// whose lock is held is refused the same way.
#[test]
fn a_log_open_in_another_process_is_refused_before_anything_is_copied() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, keys, appended) = make_log(tmp.path(), Mode::PerRecord, 300);
    let purge_at = appended[200].lsn.to_string();
    let nothing_at = appended[0].lsn.to_string();
    let cut_at = appended[250].lsn.to_string();
    let backup = tmp.path().join("backup");
    let wal = open_when_unlocked(&log, config(Mode::PerRecord, &keys));
    let runs: [&[&dyn AsRef<std::ffi::OsStr>]; 4] = [
        &[&"--purge-before", &purge_at, &"--backup", &backup],
        &[&"--purge-before", &nothing_at, &"--backup", &backup],
        &[&"--purge-before", &purge_at, &"--dry-run"],
        &[&"--truncate-to", &cut_at, &"--backup", &backup],
    ];
    for run in runs {
        let mut args = run.to_vec();
        args.extend([
            &"--key-file" as &dyn AsRef<std::ffi::OsStr>,
            &key_file,
            &log,
        ]);
        let o = wal_dump(&args);
        assert!(!backup.exists(), "copied before the lock was found held");
        assert_fails(&o, 2, "the log is open in another process");
    }
    wal.close().unwrap();
    // The retry with the same backup directory, and a truncation after it.
    let truncated = tmp.path().join("truncated");
    for (op, lsn, dir) in [
        ("--purge-before", &purge_at, &backup),
        ("--truncate-to", &cut_at, &truncated),
    ] {
        let o = wal_dump(&[&op, lsn, &"--backup", dir, &"--key-file", &key_file, &log]);
        assert_eq!(o.status.code(), Some(0), "{op}: {}", stderr(&o));
        assert!(std::fs::read_dir(dir).unwrap().count() > 0, "{op}");
    }

    let d = damaged_log(tmp.path(), Mode::PerRecord);
    use walcrypt::storage::{FsStorage, Storage};
    let held = FsStorage.lock_dir(&d.log).unwrap();
    assert!(held.is_some());
    let repaired = tmp.path().join("repaired");
    for dry in [false, true] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"--repair", &"--key-file", &d.key_file];
        if dry {
            args.push(&"--dry-run");
        } else {
            args.extend([&"--backup" as &dyn AsRef<std::ffi::OsStr>, &repaired]);
        }
        args.push(&d.log);
        let o = wal_dump(&args);
        assert!(!repaired.exists(), "copied before the lock was found held");
        assert_fails(&o, 2, "the log is open in another process");
    }
    drop(held);
    let o = wal_dump(&[
        &"--repair",
        &"--backup",
        &repaired,
        &"--key-file",
        &d.key_file,
        &d.log,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
