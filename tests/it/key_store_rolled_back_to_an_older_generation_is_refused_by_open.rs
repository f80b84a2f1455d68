//! Someone who can write the files but has no KEK puts an older key store in place after the
//! log rotated its data key: the store's first generation (a backup), or a first-version store
//! file whose states were rewritten so an older key is active. Either is a store the KEK
//! vouches for (or vouched for once); `Wal::open` refuses it because its active key is older
//! than the newest key id the log's segments list, naming both ids and the store.

use crate::support;

use std::sync::Arc;

use support::store_bytes::version_1_file;
use walcrypt::{Config, Kek, KeyProvider, KeyStore, Mode, SyncMode, Wal};

fn config(store: Arc<KeyStore>) -> Config {
    Config::new(Mode::PerRecord)
        .key_store(store)
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(4096)
}

fn refused(dir: &std::path::Path, path: &std::path::Path, kek: Arc<dyn KeyProvider>, older: u32) {
    let store = Arc::new(KeyStore::open(path, kek).unwrap());
    let err = Wal::open(dir, config(store)).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&format!("active key id {older} is older than key id 3")),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
}

#[test]
fn key_store_rolled_back_to_an_older_generation_is_refused_by_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = Arc::new(KeyStore::create(&path, kek.clone()).unwrap());
    let generation_1 = std::fs::read(&path).unwrap();
    let wal = Wal::open(dir.path(), config(store.clone())).unwrap();
    for _ in 0..2 {
        wal.flush(wal.append(1, b"before a rotation").unwrap())
            .unwrap();
        wal.rotate_data_key().unwrap();
    }
    wal.flush(wal.append(1, b"under key 3").unwrap()).unwrap();
    wal.close().unwrap();
    let current = std::fs::read(&path).unwrap();
    let ring = store.ring();

    std::fs::write(&path, &generation_1).unwrap();
    refused(dir.path(), &path, kek.clone(), 1);

    // Every key present, an older one active (what version 1 wraps allowed).
    let keys = [
        (1, 2, ring.get(1).unwrap()),
        (2, 1, ring.get(2).unwrap()),
        (3, 2, ring.get(3).unwrap()),
    ];
    std::fs::write(&path, version_1_file(kek.as_ref(), 9, &keys)).unwrap();
    refused(dir.path(), &path, kek.clone(), 2);

    std::fs::write(&path, &current).unwrap();
    let store = Arc::new(KeyStore::open(&path, kek).unwrap());
    Wal::open(dir.path(), config(store))
        .unwrap()
        .close()
        .unwrap();
}
