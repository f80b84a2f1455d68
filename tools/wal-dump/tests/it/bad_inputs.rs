//! Bad inputs give their exit code and one clear line on stderr, never a panic.

use crate::support;

use std::os::unix::fs::FileExt;

use support::*;
use walcrypt::{KeyRing, Mode};

#[test]
fn empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    assert_fails(&wal_dump(&[&tmp.path()]), 2, "holds no walcrypt log");
    assert_fails(
        &wal_dump(&[&"--verify", &tmp.path()]),
        2,
        "holds no walcrypt log",
    );
    assert_fails(&wal_dump(&[&tmp.path().join("missing")]), 2, "missing");
}

#[test]
fn non_walcrypt_files() {
    let tmp = tempfile::tempdir().unwrap();
    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, b"hello").unwrap();
    assert_fails(&wal_dump(&[&notes]), 2, "not a walcrypt segment file");
    let fake = tmp.path().join("0000000000000000.wal");
    std::fs::write(&fake, vec![0x5a; 5000]).unwrap();
    assert_fails(
        &wal_dump(&[&tmp.path()]),
        1,
        "0000000000000000.wal offset 0",
    );
    assert_fails(&wal_dump(&[&fake]), 1, "bad magic");
    let o = wal_dump(&[&"--verify", &tmp.path()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("bad magic"), "{}", stdout(&o));
}

#[test]
fn truncated_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, appended) = make_log(tmp.path(), Mode::PerRecord, 200);
    let (path, _) = locate(&log, appended[60].lsn);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(1000).unwrap();
    drop(file);
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    assert_fails(&wal_dump(&[&"--key-file", &key_file, &log]), 1, &name);
    let o = wal_dump(&[&"--verify", &log]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains(&format!("segment {name} is 1000 bytes")),
        "{}",
        stdout(&o)
    );
    // Truncated inside the segment header: the header cannot be read.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(20)
        .unwrap();
    assert_fails(&wal_dump(&[&log]), 1, &name);
}

#[test]
fn absurd_length_fields() {
    for len in [u32::MAX, 1 << 30, 5_000_000] {
        let tmp = tempfile::tempdir().unwrap();
        let (log, _, _, appended) = make_log(tmp.path(), Mode::Plaintext, 200);
        let victim = appended[80..]
            .iter()
            .find(|a| u64::from(a.lsn) % PAGE < PAGE - 12)
            .unwrap();
        let (path, offset) = locate(&log, victim.lsn);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&len.to_le_bytes(), offset + 4).unwrap();
        drop(file);
        // The message names the damaged record (and where the damage showed).
        assert_fails(&wal_dump(&[&log]), 1, &format!("(lsn {})", victim.lsn));
        let o = wal_dump(&[&"--verify", &log]);
        assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    }
}

#[test]
fn wrong_key_error_names_the_log_directory_the_key_file_and_the_fingerprint() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let (log, _, _, _) = make_log(tmp.path(), mode, 30);
        let other = tmp.path().join("other-keys");
        let wrong = KeyRing::generate().unwrap();
        wrong.save(&other).unwrap();
        let fp = hex(&wrong.get(1).unwrap().fingerprint());
        let needles = [
            format!("log {}", log.display()),
            format!("key file {}", other.display()),
            format!("key id 1, fingerprint {fp}"),
            "check that the key file or store is this log's".to_string(),
        ];
        for args in [
            vec![&"--key-file" as &dyn AsRef<std::ffi::OsStr>, &other, &log],
            vec![&"--stats", &"--key-file", &other, &log],
            vec![&"--verify", &"--key-file", &other, &log],
        ] {
            let o = wal_dump(&args);
            assert_fails(&o, 2, "wrong key");
            for needle in &needles {
                assert!(
                    stderr(&o).contains(needle.as_str()),
                    "{needle}: {}",
                    stderr(&o)
                );
            }
        }
        let o = wal_key(&[&"verify", &other, &"--log", &log]);
        assert_fails(&o, 2, "wrong key for key id 1");
        for needle in &needles {
            assert!(
                stderr(&o).contains(needle.as_str()),
                "{needle}: {}",
                stderr(&o)
            );
        }
    }
}

#[test]
fn wrong_key() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let (log, _, _, _) = make_log(tmp.path(), mode, 30);
        let other = tmp.path().join("other-keys");
        KeyRing::generate().unwrap().save(&other).unwrap();
        assert_fails(
            &wal_dump(&[&"--key-file", &other, &log]),
            2,
            "wrong key for key id 1",
        );
        assert_fails(
            &wal_dump(&[&"--stats", &"--key-file", &other, &log]),
            2,
            "wrong key",
        );
        let o = wal_dump(&[&"--verify", &"--key-file", &other, &log]);
        assert_fails(&o, 2, "wrong key");
        assert!(
            stdout(&o).contains("key: segment 0000000000000000.wal offset 48: key id 1"),
            "{}",
            stdout(&o)
        );
    }
}

#[test]
fn missing_key_id() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let mut keys = KeyRing::generate().unwrap();
        let only_first = {
            let mut r = KeyRing::empty();
            r.add(1, keys.get(1).unwrap().clone()).unwrap();
            r
        };
        keys.rotate().unwrap();
        let log = tmp.path().join("log");
        append(&log, mode, &keys, 0, 40);
        let key_file = tmp.path().join("keys");
        only_first.save(&key_file).unwrap();
        let o = wal_dump(&[&"--key-file", &key_file, &"--payload", &"hex", &log]);
        assert_fails(&o, 2, "key id 2");
        assert!(stderr(&o).contains("lacks"), "{}", stderr(&o));
        for needle in [
            format!("log {}", log.display()),
            format!("key file {}", key_file.display()),
        ] {
            assert!(stderr(&o).contains(&needle), "{needle}: {}", stderr(&o));
        }
    }
}

/// `--verify` with a key file that lacks the key id the records use (here the right key bytes
/// under another id) is a key problem, never "clean": the payloads and, in perrecord-gcm, the
/// tags under that key were not checked.
#[test]
fn verify_with_a_key_file_lacking_the_records_key_id_is_a_key_problem() {
    for mode in [Mode::PerRecord, Mode::PerRecordGcm, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let (log, _, keys, _) = make_log(tmp.path(), mode, 40);
        let under_another_id = {
            let mut r = KeyRing::empty();
            r.add(2, keys.get(1).unwrap().clone()).unwrap();
            r
        };
        let key_file = tmp.path().join("keys-id-2");
        under_another_id.save(&key_file).unwrap();
        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(2), "{mode}: {text}{}", stderr(&o));
        assert!(!text.contains("clean"), "{mode}: {text}");
        assert!(text.contains("key id 1"), "{mode}: {text}");
        let o = wal_dump(&[
            &"--verify",
            &"--format",
            &"json",
            &"--key-file",
            &key_file,
            &log,
        ]);
        let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
        assert_eq!(report["result"], "key_problem", "{mode}: {report}");
    }
}

#[test]
fn unreadable_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, _) = make_log(tmp.path(), Mode::Plaintext, 200);
    // A directory where the key file should be: unreadable whoever runs the test.
    assert_fails(
        &wal_dump(&[&"--key-file", &tmp.path(), &log]),
        2,
        "key file",
    );
    // A directory in place of a segment file.
    let seg = log.join("0000000000001000.wal");
    std::fs::remove_file(&seg).unwrap();
    std::fs::create_dir(&seg).unwrap();
    assert_fails(&wal_dump(&[&log]), 2, "0000000000001000.wal");
    assert_fails(&wal_dump(&[&"--verify", &log]), 2, "0000000000001000.wal");
}

#[test]
fn usage_errors() {
    assert_fails(&wal_dump(&[]), 2, "PATH");
    assert_fails(&wal_dump(&[&"--payload", &"bits", &"."]), 2, "bits");
    assert_fails(&wal_dump(&[&"--raw", &"."]), 2, "--payload");
}

#[test]
fn a_usage_error_points_to_help_once() {
    let tmp = tempfile::tempdir().unwrap();
    for o in [
        wal_dump(&[&"--format", &"jsn", &tmp.path()]),
        wal_dump(&[&"--bogus", &tmp.path()]),
        wal_key(&[&"lst", &tmp.path()]),
        wal_key(&[&"list", &tmp.path(), &"--format", &"xml"]),
    ] {
        assert_fails(&o, 2, "--help");
        let err = stderr(&o);
        assert_eq!(err.matches("--help").count(), 1, "{err}");
    }
}

#[test]
fn a_kek_file_given_as_the_key_file_is_named_as_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, _) = make_log(tmp.path(), Mode::PerRecord, 10);
    let kek = tmp.path().join("kek");
    walcrypt::KekFile::create(&kek).unwrap();
    assert_fails(
        &wal_dump(&[&"--key-file", &kek, &log]),
        2,
        "is a KEK file, not a key store or key ring",
    );
}

/// A segment header, its checksum made right by anyone, claiming segments of 1 TiB over a file
/// of a few KiB: `--verify` walks the file's pages, not the claimed segment's 2^31 (it kept a
/// header for each and died failing to allocate tens of GiB). Run with 2 GB of address space,
/// so that walking the claim fails fast here instead of exhausting the machine.
#[test]
fn verify_walks_the_files_pages_not_a_segment_size_the_header_claims() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, _) = make_log(tmp.path(), Mode::PerRecord, 3);
    let first = log.join("0000000000000000.wal");
    let mut bytes = std::fs::read(&first).unwrap();
    let mut header = walcrypt::inspect::SegmentHeader::decode(&bytes).unwrap();
    header.geometry.segment_size = 1 << 40;
    header.encode(&mut bytes);
    std::fs::write(&first, &bytes).unwrap();
    for entry in std::fs::read_dir(&log).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wal") && path != first {
            std::fs::remove_file(path).unwrap();
        }
    }
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000 && exec \"$0\" --verify \"$1\"")
        .arg(env!("CARGO_BIN_EXE_wal-dump"))
        .arg(&log)
        .output()
        .expect("run wal-dump under sh");
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("expected 1099511627776: truncated at offset"),
        "{}",
        stdout(&o)
    );
}
