//! wal-key creates (0600, never overwriting), rotates and lists key rings without ever printing
//! key bytes, and its rings decrypt logs in wal-dump.

mod support;

use std::os::unix::fs::PermissionsExt;

use support::*;
use walcrypt::{KeyRing, Mode};

fn key_hex(file: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

#[test]
fn wal_key_manages_rings() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ring");
    let o = wal_key(&[&"new", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut printed = stdout(&o) + &stderr(&o);

    assert_fails(&wal_key(&[&"new", &file]), 2, "refusing to overwrite");

    let o = wal_key(&[&"rotate", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    printed += &(stdout(&o) + &stderr(&o));

    let o = wal_key(&[&"list", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let list = stdout(&o);
    printed += &(list.clone() + &stderr(&o));
    let ring = KeyRing::load(&file).unwrap();
    assert_eq!(ring.ids(), vec![1, 2]);
    for id in [1, 2] {
        let kcv = hex(&ring.get(id).unwrap().fingerprint());
        assert!(
            list.lines()
                .any(|l| l.trim_start().starts_with(&id.to_string()) && l.contains(&kcv)),
            "{list}"
        );
    }
    assert!(
        list.lines()
            .any(|l| l.trim_start().starts_with('2') && l.contains("active")),
        "{list}"
    );

    // A log written with the ring reads back through wal-dump.
    let log = tmp.path().join("log");
    let appended = append(&log, Mode::PerRecord, &ring, 0, 20);
    let o = wal_dump(&[&"--key-file", &file, &"--payload", &"hex", &log]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dump = stdout(&o);
    assert!(dump.contains(&hex(&appended[3].payload)));
    printed += &(dump + &stderr(&o));

    for key in key_hex(&file) {
        assert_eq!(key.len(), 64);
        assert!(!printed.contains(&key), "key bytes printed");
        assert!(!printed.contains(&key[..16]), "part of a key printed");
    }

    assert_fails(&wal_key(&[&"list", &tmp.path().join("nope")]), 2, "nope");
}
