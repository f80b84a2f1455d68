//! `Config::validate` reports a bad setting before any file is touched, and an existing log's
//! page and segment sizes win over defaults but conflict with sizes set explicitly.

use walcrypt::{Config, Error, KeyRing, Mode, Wal};

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
