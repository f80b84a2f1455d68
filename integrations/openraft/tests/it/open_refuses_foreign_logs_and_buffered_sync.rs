//! A walcrypt log written by something else (records of other kinds) is refused with the LSN
//! of the first foreign record, and a configuration that would report entries flushed before
//! fdatasync is refused before anything is opened.

use crate::support;

use support::config;
use walcrypt::{KeyRing, Mode, SyncMode, Wal};
use walcrypt_openraft::kv::TypeConfig;
use walcrypt_openraft::{Error, WalLogStore};

#[test]
fn foreign_records_and_buffered_sync_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
    let lsn = wal.append(1, b"an engine's own record").unwrap();
    wal.close().unwrap();

    match WalLogStore::<TypeConfig>::open(dir.path(), config(Mode::PerRecord, &keys)) {
        Err(e @ Error::Decode { .. }) => {
            let Error::Decode { lsn: at, source } = &e else {
                unreachable!()
            };
            assert_eq!(*at, lsn);
            assert_eq!(source.kind, 1);
            assert!(e.to_string().contains(&lsn.to_string()), "{e}");
        }
        Err(other) => panic!("expected a decode error, got {other}"),
        Ok(_) => panic!("a foreign log was opened as a raft log"),
    }

    let empty = tempfile::tempdir().unwrap();
    let buffered = config(Mode::PerRecord, &keys).sync(SyncMode::Buffered);
    match WalLogStore::<TypeConfig>::open(empty.path().join("log"), buffered) {
        Err(Error::Config(why)) => assert!(why.contains("durable"), "{why}"),
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("a buffered log store was opened"),
    }
    assert!(
        !empty.path().join("log").exists(),
        "the refused store created its directory"
    );
}
