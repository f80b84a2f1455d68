//! A second writer on the same directory fails with a clear error; a crash-free reopen after
//! the first closes works.

use walcrypt::{Config, Error, KeyRing, Mode, Wal};

#[test]
fn second_open_fails_while_the_first_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let config = Config::new(Mode::PerRecord).keys(keys);
    let wal = Wal::open(dir.path(), config.clone()).unwrap();
    match Wal::open(dir.path(), config.clone()) {
        Err(e @ Error::Locked(_)) => assert!(e.to_string().contains("already open")),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(wal);
    Wal::open(dir.path(), config).unwrap().close().unwrap();
}

#[test]
fn reopening_in_another_mode_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    Wal::open(dir.path(), Config::new(Mode::PerRecord).keys(keys.clone()))
        .unwrap()
        .close()
        .unwrap();
    match Wal::open(dir.path(), Config::new(Mode::PageLevel).keys(keys)) {
        Err(e @ Error::Mismatch { .. }) => {
            let m = e.to_string();
            assert!(m.contains("perrecord") && m.contains("pagelevel"), "{m}");
        }
        other => panic!("expected Mismatch, got {other:?}"),
    }
}
