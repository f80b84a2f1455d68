//! `Config::validate` reports a bad setting before any file is touched, and an existing log's
//! page and segment sizes win over defaults but conflict with sizes set explicitly.

use walcrypt::{Config, Error, KeyRing, Lsn, Mode, Wal};

#[test]
fn validate_names_the_setting_that_is_wrong() {
    let keys = KeyRing::generate().unwrap();
    let ok = Config::new(Mode::PerRecord).keys(keys.clone());
    ok.validate().unwrap();
    assert_eq!(ok.mode(), Mode::PerRecord);

    let no_keys = Config::new(Mode::PageLevel).validate().unwrap_err();
    assert!(
        matches!(&no_keys, Error::Config(why) if why.contains("key ring")),
        "{no_keys}"
    );
    let page = ok.clone().page_size(1000).validate().unwrap_err();
    assert!(
        matches!(&page, Error::Config(why) if why.contains("page size")),
        "{page}"
    );
    let segment = ok.clone().segment_size(4096 + 512).validate().unwrap_err();
    assert!(
        matches!(&segment, Error::Config(why) if why.contains("segment size")),
        "{segment}"
    );

    // Wal::open validates before it creates anything.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("log");
    assert!(matches!(
        Wal::open(&missing, ok.clone().page_size(1000)),
        Err(Error::Config(_))
    ));
    assert!(!missing.exists());
}

#[test]
fn an_existing_log_keeps_its_sizes_and_refuses_explicit_other_ones() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let base = Config::new(Mode::PerRecord).keys(keys.clone());
    let wal = Wal::open(dir.path(), base.clone().page_size(512).segment_size(4096)).unwrap();
    wal.append(1, b"one").unwrap();
    wal.close().unwrap();

    // Defaults: the log's own sizes are used.
    let wal = Wal::open(dir.path(), base.clone()).unwrap();
    assert_eq!(wal.geometry().page_size, 512);
    assert_eq!(wal.geometry().segment_size, 4096);
    wal.close().unwrap();

    // The same sizes, set explicitly: fine.
    Wal::open(dir.path(), base.clone().page_size(512).segment_size(4096))
        .unwrap()
        .close()
        .unwrap();

    // Other sizes, set explicitly: a mismatch that names the setting and both values.
    match Wal::open(dir.path(), base.clone().page_size(1024)) {
        Err(Error::Mismatch {
            what,
            on_disk,
            configured,
        }) => {
            assert_eq!(
                (what, on_disk.as_str(), configured.as_str()),
                ("page size", "512", "1024")
            )
        }
        other => panic!("expected a page size mismatch, got {other:?}"),
    }
    let err = Wal::open(dir.path(), base.clone().page_size(512).segment_size(8192)).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Mismatch {
                what: "segment size",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("4096"), "{err}");
}

/// A size left unset takes the log's own before the sizes are checked together: a
/// configuration setting only the segment size (its page size left at the 8 KiB default, which
/// a 1 KiB segment could not hold) opens a log of 512-byte pages and 1 KiB segments through
/// every entry point, and one setting another segment size is a mismatch, not a bad setting.
#[test]
fn a_segment_size_set_alone_is_checked_against_the_logs_own_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let base = Config::new(Mode::Plaintext);
    let wal = Wal::open(dir.path(), base.clone().page_size(512).segment_size(1024)).unwrap();
    let first = wal.append(1, b"acknowledged").unwrap();
    wal.checkpoint(first, b"meta").unwrap();
    wal.close().unwrap();

    let own = base.clone().segment_size(1024);
    let wal = Wal::open(dir.path(), own.clone()).unwrap();
    assert_eq!(
        (wal.geometry().page_size, wal.geometry().segment_size),
        (512, 1024)
    );
    wal.close().unwrap();
    let mut replayed = Vec::new();
    Wal::open_and_replay(dir.path(), own.clone(), Lsn::default(), |r| {
        replayed.push(r.lsn);
        Ok(())
    })
    .unwrap()
    .close()
    .unwrap();
    assert_eq!(replayed, [first]);
    let mut restored = None;
    Wal::open_from_checkpoint(
        dir.path(),
        own,
        |c| {
            restored = c.map(|c| c.lsn);
            Ok(())
        },
        |_| Ok(()),
    )
    .unwrap()
    .close()
    .unwrap();
    assert_eq!(restored, Some(first));

    let other = base.clone().segment_size(2048);
    let mismatch = |err: Error| match err {
        Error::Mismatch {
            what: "segment size",
            on_disk,
            configured,
        } => assert_eq!((on_disk.as_str(), configured.as_str()), ("1024", "2048")),
        other => panic!("expected a segment size mismatch, got {other:?}"),
    };
    mismatch(Wal::open(dir.path(), other.clone()).unwrap_err());
    mismatch(
        Wal::open_and_replay(dir.path(), other.clone(), Lsn::default(), |_| Ok(())).unwrap_err(),
    );
    mismatch(Wal::open_from_checkpoint(dir.path(), other, |_| Ok(()), |_| Ok(())).unwrap_err());

    // A new log still gets the sizes as configured, so they must fit together.
    let missing = dir.path().join("new");
    let err = Wal::open(&missing, base.segment_size(1024)).unwrap_err();
    assert!(
        matches!(&err, Error::Config(why) if why.contains("segment size")),
        "{err}"
    );
    assert!(!missing.exists());
}
