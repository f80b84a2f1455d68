//! wal-key manages key stores end to end without ever printing key bytes: a KEK file, a store
//! initialised with it, a raw ring wrapped into a store, data-key and KEK rotation, a listing
//! (ids, state, creation time, fingerprints) that needs no KEK, verify against a log; wal-dump
//! decrypts with the store and --kek-file or --kek-command, and a swapped key line is reported
//! without the key.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use support::*;
use walcrypt::{Config, KekFile, KeyRing, KeyStore, Mode, SyncMode, Wal};

#[test]
fn wal_key_manages_stores() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let kek = dir.join("kek");
    let kek2 = dir.join("kek2");
    let store = dir.join("keys.store");
    let mut printed = String::new();
    let mut run = |args: &[&dyn AsRef<std::ffi::OsStr>]| {
        let o = wal_key(args);
        printed += &(stdout(&o) + &stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
    };

    run(&[&"kek-new", &kek]);
    run(&[&"kek-new", &kek2]);
    assert_eq!(
        std::fs::metadata(&kek).unwrap().permissions().mode() & 0o777,
        0o600
    );
    run(&[&"init", &store, &"--kek-file", &kek]);
    assert_eq!(
        std::fs::metadata(&store).unwrap().permissions().mode() & 0o777,
        0o600
    );
    run(&[&"rotate", &store, &"--kek-file", &kek]);

    // A listing needs no KEK and shows ids, states, times and fingerprints.
    let list = run(&[&"list", &store]);
    let opened = KeyStore::open(&store, Arc::new(KekFile::open(&kek).unwrap())).unwrap();
    assert!(list.contains(&opened.kek_id()), "{list}");
    for k in opened.keys() {
        let line = list
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{} ", k.id)))
            .unwrap_or_else(|| panic!("{list}"));
        assert!(line.contains(&hex(&k.fingerprint)), "{line}");
        assert!(line.contains(k.state.name()), "{line}");
        assert!(line.contains("20"), "{line}");
    }

    // A log written with the store reads back through wal-dump with the KEK file, and with a
    // command that prints the KEK.
    let log = dir.join("log");
    let store_arc = Arc::new(opened);
    let wal = Wal::open(
        &log,
        Config::new(Mode::PerRecord)
            .key_store(store_arc.clone())
            .sync(SyncMode::Buffered),
    )
    .unwrap();
    let lsn = wal.append(1, b"secret payload").unwrap();
    wal.rotate_data_key().unwrap();
    wal.append(1, b"second payload").unwrap();
    wal.close().unwrap();
    let o = wal_dump(&[
        &"--key-file",
        &store,
        &"--kek-file",
        &kek,
        &"--payload",
        &"text",
        &log,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("secret payload") && stdout(&o).contains("second payload"));
    let script = dir.join("print-kek");
    std::fs::write(&script, format!("#!/bin/sh\ncat '{}'\n", kek.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = wal_dump(&[
        &"--key-file",
        &store,
        &"--kek-command",
        &script,
        &"--payload",
        &"hex",
        &log,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&hex(b"secret payload")));
    let o = wal_dump(&[
        &"--verify",
        &"--key-file",
        &store,
        &"--kek-file",
        &kek,
        &log,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    // Without the KEK, or with another one: one clear line.
    assert_fails(&wal_dump(&[&"--key-file", &store, &log]), 2, "--kek-file");
    assert_fails(
        &wal_dump(&[&"--key-file", &store, &"--kek-file", &kek2, &log]),
        2,
        "wrapped under another KEK",
    );

    // KEK rotation re-wraps only: the log is untouched and reads with the new KEK alone.
    let before: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    run(&[
        &"rotate-kek",
        &store,
        &"--kek-file",
        &kek,
        &"--new-kek-file",
        &kek2,
    ]);
    let after: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(before, after);
    assert_fails(
        &wal_key(&[&"verify", &store, &"--kek-file", &kek]),
        2,
        "wrapped under another KEK",
    );
    let v = run(&[&"verify", &store, &"--kek-file", &kek2, &"--log", &log]);
    assert!(v.contains("matching check value"), "{v}");
    let o = wal_dump(&[
        &"--key-file",
        &store,
        &"--kek-file",
        &kek2,
        &"--payload",
        &"text",
        &log,
    ]);
    assert!(stdout(&o).contains("secret payload"), "{}", stderr(&o));
    let _ = lsn;

    // A raw ring wraps into a store with the same ids and keys.
    let ring_file = dir.join("ring");
    let mut ring = KeyRing::generate().unwrap();
    ring.rotate().unwrap();
    ring.save(&ring_file).unwrap();
    let wrapped = dir.join("wrapped.store");
    run(&[&"wrap", &ring_file, &wrapped, &"--kek-file", &kek]);
    let w = KeyStore::open(&wrapped, Arc::new(KekFile::open(&kek).unwrap())).unwrap();
    assert_eq!(w.ring().ids(), vec![1, 2]);
    for id in [1, 2] {
        assert_eq!(
            w.ring().get(id).unwrap().fingerprint(),
            ring.get(id).unwrap().fingerprint()
        );
    }
    assert_fails(
        &wal_key(&[&"init", &wrapped, &"--kek-file", &kek]),
        2,
        "refusing to overwrite",
    );

    // No key byte (data keys, KEKs) was ever printed, and the store holds none in the clear.
    let mut secrets: Vec<String> = Vec::new();
    for file in [&kek, &kek2] {
        secrets.push(std::fs::read_to_string(file).unwrap().trim().to_string());
    }
    for line in std::fs::read_to_string(&ring_file)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
    {
        if let Some(hex) = line.split_whitespace().nth(1) {
            secrets.push(hex.to_string());
        }
    }
    let store_bytes = hex(&std::fs::read(&store).unwrap());
    for s in &secrets {
        assert!(!printed.contains(&s[..16]), "key bytes printed");
        assert!(
            !store_bytes.contains(&s[..16]),
            "a key in the clear in the store"
        );
    }

    // A raw ring line with its fields swapped: reported without the key, by both tools.
    let swapped = dir.join("swapped");
    std::fs::write(&swapped, format!("{} 1\n", secrets[2])).unwrap();
    std::fs::set_permissions(&swapped, std::fs::Permissions::from_mode(0o600)).unwrap();
    for o in [
        wal_key(&[&"list", &swapped]),
        wal_dump(&[&"--key-file", &swapped, &log]),
    ] {
        assert_fails(&o, 2, "swapped");
        assert!(!stderr(&o).contains(&secrets[2][..8]), "{}", stderr(&o));
    }
}
