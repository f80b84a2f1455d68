//! `KeyStore::open_or_create` creates the store when no file is there and opens it otherwise;
//! callers racing to create the same store all end up with one store (the same keys), never
//! one each written over another's.

use std::sync::{Arc, Barrier};

use walcrypt::{Kek, KeyProvider, KeyStore};

#[test]
fn key_store_open_or_create_makes_one_store_for_racing_callers() {
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.store");
        let barrier = Arc::new(Barrier::new(4));
        let fingerprints: Vec<_> = (0..4)
            .map(|_| {
                let (path, kek, barrier) = (path.clone(), kek.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let store = KeyStore::open_or_create(&path, kek).unwrap();
                    store.keys()[0].fingerprint
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let on_disk = KeyStore::open(&path, kek.clone()).unwrap();
        assert_eq!(
            on_disk.generation(),
            1,
            "round {round}: written more than once"
        );
        for fingerprint in fingerprints {
            assert_eq!(fingerprint, on_disk.keys()[0].fingerprint, "round {round}");
        }
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(names.is_empty(), "round {round}: {names:?}");
    }
    // An existing store is opened, not replaced.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.store");
    let created = KeyStore::create(&path, kek.clone()).unwrap();
    created.rotate_data_key().unwrap();
    let opened = KeyStore::open_or_create(&path, kek).unwrap();
    assert_eq!(opened.ring().ids(), vec![1, 2]);
}
