//! Bad key files, bad configurations, wrong or missing keys and a second writer get clear
//! errors that name what and where; nothing is written or lost.

use crate::support;

use std::os::unix::fs::PermissionsExt;

use walcrypt::{Config, Error, Key, KeyRing, Mode, Reader, SyncMode, Wal};

fn hex_key(byte: u8) -> String {
    format!("{byte:02x}").repeat(32)
}

fn load_error(text: &str) -> (usize, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    std::fs::write(&path, text).unwrap();
    match KeyRing::load(&path) {
        Err(e @ Error::KeyFile { .. }) => {
            let shown = e.to_string();
            let Error::KeyFile {
                line,
                reason,
                path: p,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(p, path, "the error names the file");
            assert!(shown.contains("keys"), "{shown}");
            (line, reason, shown)
        }
        other => panic!("expected a key file error for {text:?}, got {other:?}"),
    }
}

#[test]
fn key_file_with_bad_hex_names_the_line() {
    let bad = format!("# ring\n1 {}\n2 {}zz\n", hex_key(1), &hex_key(2)[..62]);
    let (line, reason, shown) = load_error(&bad);
    assert_eq!(line, 3);
    assert!(reason.contains("hex"), "{reason}");
    assert!(shown.contains("line 3"), "{shown}");
}

#[test]
fn key_file_with_wrong_length_names_the_line() {
    let (line, reason, _) = load_error(&format!("1 {}\n", &hex_key(1)[..40]));
    assert_eq!(line, 1);
    assert!(reason.contains("64"), "{reason}");
    let (line, _, _) = load_error(&format!("\n\n1 {}ab\n", hex_key(1)));
    assert_eq!(line, 3);
}

#[test]
fn key_file_with_duplicate_ids_names_the_line() {
    let (line, reason, _) = load_error(&format!(
        "7 {}\n8 {}\n7 {}\n",
        hex_key(1),
        hex_key(2),
        hex_key(3)
    ));
    assert_eq!(line, 3);
    assert!(
        reason.contains('7') && reason.contains("already"),
        "{reason}"
    );
}

#[test]
fn key_file_with_bad_id_or_no_key_is_refused() {
    let (line, _, _) = load_error(&format!("one {}\n", hex_key(1)));
    assert_eq!(line, 1);
    let (line, _, _) = load_error(&format!("0 {}\n", hex_key(1)));
    assert_eq!(line, 1, "key id 0 is reserved");
    let (_, reason, _) = load_error("# nothing here\n\n");
    assert!(reason.contains("no key"), "{reason}");
}

#[test]
fn world_readable_key_file_is_not_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let ring = KeyRing::generate().unwrap();
    ring.save(&path).unwrap();
    assert!(KeyRing::file_is_private(&path).unwrap(), "save writes 0600");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(!KeyRing::file_is_private(&path).unwrap());
    // Still loadable: the caller decides whether to warn or refuse.
    assert_eq!(KeyRing::load(&path).unwrap().ids(), vec![1]);
}

#[test]
fn encrypted_modes_refuse_an_empty_key_ring() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let err = Wal::open(dir.path(), Config::new(mode)).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{mode}: {err:?}");
        assert!(err.to_string().contains("key"), "{err}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{mode}: nothing written"
        );
    }
}

#[test]
fn segment_size_not_a_multiple_of_the_page_size_is_refused() {
    let keys = KeyRing::generate().unwrap();
    for (page, segment) in [
        (4096, 4096 * 3 + 512),
        (4096, 4096),
        (1000, 8000),
        (256, 4096),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(Mode::PerRecord)
            .keys(keys.clone())
            .page_size(page)
            .segment_size(segment);
        let err = Wal::open(dir.path(), config).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{page}/{segment}: {err:?}");
        assert!(err.to_string().contains("size"), "{err}");
    }
}

fn small(mode: Mode, keys: &KeyRing) -> Config {
    support::config_4k_pages(mode, keys, SyncMode::Durable)
}

#[test]
fn wrong_key_is_reported_as_a_wrong_key() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small(mode, &keys)).unwrap();
        let lsn = wal.append(1, b"secret").unwrap();
        wal.flush(lsn).unwrap();
        wal.close().unwrap();
        let before = std::fs::read(dir.path().join("0000000000000000.wal")).unwrap();

        let mut wrong = KeyRing::empty();
        wrong.add(1, Key::generate().unwrap()).unwrap();
        let err = Wal::open(dir.path(), small(mode, &wrong)).unwrap_err();
        assert!(
            matches!(err, Error::WrongKey { key_id: 1, .. }),
            "{mode}: {err:?}"
        );
        assert!(err.to_string().contains("wrong key"), "{err}");
        // The message says what to do, and names the segment whose check value differs.
        for needle in [
            "segment 0000000000000000.wal",
            "check that the key file or store is this log's",
        ] {
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        }
        let err = Reader::open(dir.path(), Some(wrong)).unwrap_err();
        assert!(
            matches!(err, Error::WrongKey { key_id: 1, .. }),
            "{mode}: {err:?}"
        );
        let after = std::fs::read(dir.path().join("0000000000000000.wal")).unwrap();
        assert!(before == after, "{mode}: a failed open changed the log");
        assert_eq!(
            support::try_read_records(dir.path(), &keys).unwrap().len(),
            1
        );
    }
}

#[test]
fn missing_key_id_is_reported() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let mut keys = KeyRing::empty();
        keys.add(5, Key::generate().unwrap()).unwrap();
        let wal = Wal::open(dir.path(), small(mode, &keys)).unwrap();
        let lsn = wal.append(1, b"under key 5").unwrap();
        wal.flush(lsn).unwrap();
        wal.close().unwrap();

        // A ring that lacks id 5 entirely.
        let mut other = KeyRing::empty();
        other.add(6, Key::generate().unwrap()).unwrap();
        let mut replayed = 0;
        let opened = Wal::open_and_replay(
            dir.path(),
            small(mode, &other),
            walcrypt::Lsn::default(),
            |_| {
                replayed += 1;
                Ok(())
            },
        );
        match opened {
            Err(Error::MissingSegmentKey {
                key_id: 5,
                segment: walcrypt::Lsn(0),
            }) => {}
            other => panic!("{mode}: expected MissingSegmentKey for key 5, got {other:?}"),
        }
        assert_eq!(replayed, 0);
        let reader = Reader::open(dir.path(), Some(other)).unwrap();
        let first = reader
            .records_from(walcrypt::Lsn::default())
            .next()
            .unwrap();
        assert!(
            matches!(
                first,
                Err(Error::MissingKey {
                    key_id: 5,
                    at: Some(_),
                    attached_wal_gone: false,
                })
            ),
            "{mode}: {first:?}"
        );
        let reader = Reader::open(dir.path(), None).unwrap();
        let first = reader
            .records_from(walcrypt::Lsn::default())
            .next()
            .unwrap();
        assert!(
            matches!(
                first,
                Err(Error::MissingKey {
                    key_id: 5,
                    at: Some(_),
                    attached_wal_gone: false,
                })
            ),
            "{mode}: {first:?}"
        );
        // The right ring still reads it.
        assert_eq!(
            support::try_read_records(dir.path(), &keys).unwrap()[0].payload,
            b"under key 5"
        );
    }
}

#[test]
fn second_open_on_the_same_directory_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), small(Mode::PerRecord, &keys)).unwrap();
    let lsn = wal.append(1, b"first writer").unwrap();
    wal.flush(lsn).unwrap();
    let err = Wal::open(dir.path(), small(Mode::PerRecord, &keys)).unwrap_err();
    assert!(matches!(err, Error::Locked(_)), "{err:?}");
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
    // The first writer is unaffected.
    let lsn = wal.append(1, b"still writing").unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();
    let again = Wal::open(dir.path(), small(Mode::PerRecord, &keys)).unwrap();
    drop(again);
    assert_eq!(
        support::try_read_records(dir.path(), &keys).unwrap().len(),
        2
    );
}

#[test]
fn reopening_in_another_mode_is_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    Wal::open(dir.path(), small(Mode::PerRecord, &keys))
        .unwrap()
        .close()
        .unwrap();
    let err = Wal::open(dir.path(), small(Mode::PageLevel, &keys)).unwrap_err();
    assert!(
        matches!(err, Error::Mismatch { what: "mode", .. }),
        "{err:?}"
    );
}
