//! `--verify`'s exit code is its verdict, and "clean" means what it says, also when
//! - the reader of its output went away (`| head`): a damaged log still exits 1, and so does
//!   `--repair --dry-run` (a closed pipe used to end every command with exit 0);
//! - `--start`/`--end` left records out: a `not checked:` line names them;
//! - a writer appends while it reads: never damage (it used to report records in segments made
//!   after it listed the files as using an unlisted key, and the live tail as a torn one).
//!
//! Found by an outside probe of wal-dump on live and damaged logs.

use crate::support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use support::*;
use walcrypt::{Lsn, Mode};

/// A perrecord log of 150 records with one flipped bit in a record's payload in the middle.
fn damaged_log(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, Lsn) {
    let (log, key_file, _, appended) = make_log(dir, Mode::PerRecord, 150);
    let victim = appended[60..]
        .iter()
        .find(|a| {
            let lsn = u64::from(a.lsn);
            !a.payload.is_empty() && lsn / PAGE == (lsn + 32) / PAGE
        })
        .unwrap();
    let (path, offset) = locate(&log, victim.lsn);
    flip_bits(&path, offset + 32, 0x10);
    (log, key_file, victim.lsn)
}

#[test]
fn a_closed_pipe_keeps_the_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _) = damaged_log(tmp.path());
    for args in [
        vec!["--verify"],
        vec!["--verify", "--format", "json"],
        vec!["--repair", "--dry-run"],
    ] {
        // Its read end closed before the child starts: every write meets a closed pipe.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = Command::new(env!("CARGO_BIN_EXE_wal-dump"))
            .args(&args)
            .arg("--key-file")
            .arg(&key_file)
            .arg(&log)
            .stdout(writer)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1), "{args:?}");
    }
}

#[test]
fn a_range_says_what_it_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, damaged) = damaged_log(tmp.path());
    let past = format!("{}", Lsn(u64::from(damaged) + 2 * SEGMENT));
    let o = wal_dump(&[
        &"--verify",
        &"--key-file",
        &key_file,
        &"--start",
        &past,
        &log,
    ]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("not checked: records before"))
        .unwrap_or_else(|| panic!("no line for the records left out: {text}"));
    assert!(line.contains("--start"), "{line}");
    assert!(text.contains("clean as far as checked"), "{text}");
}

#[test]
fn a_live_writer_is_never_damage() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, keys, _) = make_log(tmp.path(), mode, 40);
        let wal = open_when_unlocked(&log, config(mode, &keys));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut i = 1000;
                while !stop.load(Ordering::Relaxed) {
                    let lsn = wal.append(1, &payload(i)).unwrap();
                    wal.flush(lsn).unwrap();
                    i += 1;
                }
                wal.close().unwrap();
            })
        };
        let mut runs = Vec::new();
        for _ in 0..8 {
            let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
            runs.push((o.status.code(), stdout(&o)));
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        for (code, text) in &runs {
            assert!(
                *code == Some(0) && !text.contains("damage:"),
                "{mode}: --verify of a log being written: {code:?}\n{text}"
            );
        }
        // Once the writer has closed it, the whole log verifies clean.
        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stdout(&o));
    }
}
