//! A log written at an older format version (a copy of each of the library's v2 and v3
//! goldens) and continued by this build in segments of the current version: `--verify` finds
//! it clean (a version-3 perrecord-gcm tail segment ends with an unsealed switch record, the
//! new segments with sealed ones), every record of the listing shows `crc: ok` (each checked
//! by the rule of its segment's version), and `--stats` counts the segments of each version.

use crate::support;

use std::path::Path;

use support::*;
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, Wal};

/// The library's golden logs (tools/wal-dump is two levels below the workspace root).
fn goldens() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
    let mut dirs: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            p.is_dir() && (name.starts_with("v2-") || name.starts_with("v3-"))
        })
        .collect();
    dirs.sort();
    dirs
}

fn mode_of(golden: &Path) -> Mode {
    let manifest = std::fs::read_to_string(golden.join("manifest")).unwrap();
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("mode = "))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn verify_clean_log_continued_after_a_format_upgrade() {
    let goldens = goldens();
    assert!(!goldens.is_empty(), "no version-2 or version-3 goldens");
    for golden in goldens {
        let name = golden.file_name().unwrap().to_string_lossy().into_owned();
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("log");
        std::fs::create_dir(&log).unwrap();
        for e in std::fs::read_dir(golden.join("log")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), log.join(e.file_name())).unwrap();
        }
        let mode = mode_of(&golden);
        let keys = if mode.is_encrypted() {
            KeyRing::load(golden.join("keys")).unwrap()
        } else {
            KeyRing::empty()
        };
        let key_file = tmp.path().join("keys");
        if mode.is_encrypted() {
            keys.save(&key_file).unwrap();
        }
        // A plaintext log needs no key file.
        let key_args: Vec<&dyn AsRef<std::ffi::OsStr>> = if mode.is_encrypted() {
            vec![&"--key-file", &key_file]
        } else {
            Vec::new()
        };
        let run = |first: &str| {
            let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = Vec::new();
            if !first.is_empty() {
                args.push(&first);
            }
            args.extend(key_args.iter().copied());
            args.push(&log);
            wal_dump(&args)
        };

        let wal = Wal::open(&log, Config::new(mode).keys(keys.clone())).unwrap();
        for i in 0..40usize {
            wal.append(5, &payload(i)).unwrap();
        }
        wal.flush(wal.end_lsn()).unwrap();
        wal.close().unwrap();
        let records = Reader::open(&log, Some(keys.clone()))
            .unwrap()
            .records_from(Lsn::default())
            .count();

        let o = run("--verify");
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{name}: {text}{}", stderr(&o));
        assert!(
            text.contains(&format!("{records} records checked: clean")),
            "{name}: {text}"
        );

        if mode != Mode::PageLevel {
            let o = run("");
            let text = stdout(&o);
            assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
            let listed: Vec<&str> = text.lines().filter(|l| l.starts_with("lsn: ")).collect();
            assert_eq!(listed.len(), records, "{name}: {text}");
            assert!(
                listed.iter().all(|l| l.contains("crc: ok")),
                "{name}: {text}"
            );
        }

        let o = run("--stats");
        let text = stdout(&o);
        let versions = text
            .lines()
            .find(|l| l.starts_with("format versions:"))
            .unwrap_or_else(|| panic!("{name}: {text}"));
        let old = &name[1..2];
        let current = walcrypt::inspect::FORMAT_VERSION;
        assert!(
            versions.contains(&format!("{old} (")) && versions.contains(&format!(", {current} (")),
            "{name}: {versions}"
        );
    }
}
