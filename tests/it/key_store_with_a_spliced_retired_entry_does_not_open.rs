//! Someone who can write the key store file but has no KEK takes a retired key's entry from an
//! old copy of the store and splices it back into the current one (count and checksum fixed).
//! The store's authentication covers the set of entries: it does not open.

use crate::support;

use std::sync::Arc;

use support::store_bytes::{entries, fix_crc, set_count};
use walcrypt::{Kek, KeyProvider, KeyStore};

#[test]
fn key_store_with_a_spliced_retired_entry_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = KeyStore::create(&path, kek.clone()).unwrap();
    store.rotate_data_key().unwrap();
    store.rotate_data_key().unwrap();
    let backup = std::fs::read(&path).unwrap();
    assert_eq!(store.retire_unused(&[2, 3]).unwrap(), vec![1]);
    drop(store);

    let current = std::fs::read(&path).unwrap();
    let retired = backup[entries(&backup)[0].clone()].to_vec();
    let first = entries(&current)[0].start;
    let mut spliced = current[..first].to_vec();
    spliced.extend_from_slice(&retired);
    spliced.extend_from_slice(&current[first..]);
    set_count(&mut spliced, 3);
    fix_crc(&mut spliced);
    std::fs::write(&path, &spliced).unwrap();

    let err = KeyStore::open(&path, kek.clone()).unwrap_err();
    assert!(err.to_string().contains("authentication failed"), "{err}");
    // The untouched current store still opens, without key 1.
    std::fs::write(&path, &current).unwrap();
    assert_eq!(KeyStore::open(&path, kek).unwrap().ring().ids(), vec![2, 3]);
}
