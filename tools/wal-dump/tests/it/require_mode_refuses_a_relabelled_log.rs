//! A perrecord-gcm log whose segment headers were rewritten to say perrecord (checksums
//! recomputed) reads as a perrecord log; `--verify` says which mode it found, and with
//! `--require-mode perrecord-gcm` every command refuses the log, naming both modes.

use crate::support;

use std::os::unix::fs::FileExt;

use support::*;
use walcrypt::Mode;
use walcrypt::inspect::SegmentHeader;

/// Rewrites the mode of every segment header in `log`, recomputing the header checksum.
fn relabel(log: &std::path::Path, mode: Mode) {
    for entry in std::fs::read_dir(log).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "wal") {
            continue;
        }
        let mut page = std::fs::read(&path).unwrap();
        let mut header = SegmentHeader::decode(&page).unwrap();
        header.mode = mode;
        header.encode(&mut page);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&page[..header.encoded_len()], 0).unwrap();
    }
}

#[test]
fn require_mode_refuses_a_relabelled_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, _) = make_log(tmp.path(), Mode::PerRecordGcm, 40);
    let o = wal_dump(&[&"--verify", &"--require-mode", &"perrecord-gcm", &log]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("mode: perrecord-gcm"), "{}", stdout(&o));
    relabel(&log, Mode::PerRecord);
    let o = wal_dump(&[&"--verify", &log]);
    assert!(stdout(&o).contains("mode: perrecord\n"), "{}", stdout(&o));
    for command in [
        &"--verify" as &dyn AsRef<std::ffi::OsStr>,
        &"--stats",
        &"--pages",
    ] {
        let o = wal_dump(&[
            command,
            &"--key-file",
            &key_file,
            &"--require-mode",
            &"perrecord-gcm",
            &log,
        ]);
        assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("mode perrecord (segment") && err.contains("asks for perrecord-gcm"),
            "{err}"
        );
    }
}
