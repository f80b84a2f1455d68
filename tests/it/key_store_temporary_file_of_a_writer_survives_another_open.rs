//! A writer of the key store (a rotation in another process) has written its temporary file
//! and not renamed it yet when another process opens the store (`wal-key list`, a replica):
//! the open leaves the temporary file alone, and the writer's rename then succeeds. Opening a
//! store used to remove every temporary file beside it, and the rotation failed with "No such
//! file or directory". A temporary file left by a crashed writer is removed by the next write.

use std::sync::Arc;

use walcrypt::{Kek, KeyProvider, KeyStore};

#[test]
fn key_store_temporary_file_of_a_writer_survives_another_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.store");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    KeyStore::create(&path, kek.clone()).unwrap();

    // The rotation's next generation, as its writer made it: written and synced under a
    // temporary name beside the store.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::copy(&path, elsewhere.join("keys.store")).unwrap();
    let rotated = KeyStore::open(elsewhere.join("keys.store"), kek.clone()).unwrap();
    rotated.rotate_data_key().unwrap();
    let tmp = dir.path().join(".keys.store.0123456789abcdef.tmp");
    std::fs::write(&tmp, std::fs::read(rotated.path()).unwrap()).unwrap();

    // Meanwhile someone else opens and inspects the store.
    let reader = KeyStore::open(&path, kek.clone()).unwrap();
    assert_eq!(reader.ring().ids(), vec![1]);
    KeyStore::inspect(&path).unwrap();
    assert!(tmp.exists(), "an open removed a writer's temporary file");

    // The writer completes its rotation.
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(
        KeyStore::open(&path, kek.clone()).unwrap().ring().ids(),
        vec![1, 2]
    );

    // A temporary file whose writer is gone is removed by the next write of the store.
    let stale = dir.path().join(".keys.store.fedcba9876543210.tmp");
    std::fs::write(&stale, b"left by a crash").unwrap();
    let writer = KeyStore::open(&path, kek).unwrap();
    assert!(stale.exists());
    writer.rotate_data_key().unwrap();
    assert!(!stale.exists());
}
