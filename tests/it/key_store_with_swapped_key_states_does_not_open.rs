//! Someone who can write the key store file but has no KEK swaps the state bytes of the active
//! and a decrypt-only entry (and fixes the checksum), so that the log would write new records
//! under the old key. The store's authentication covers the states: it does not open, and the
//! error names the store without any key material.

use crate::support;

use std::sync::Arc;

use support::store_bytes::{STATE_AT, entries, fix_crc};
use walcrypt::{Kek, KeyProvider, KeyStore};

#[test]
fn key_store_with_swapped_key_states_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = KeyStore::create(&path, kek.clone()).unwrap();
    store.rotate_data_key().unwrap();
    drop(store);

    let mut bytes = std::fs::read(&path).unwrap();
    let at = entries(&bytes);
    assert_eq!(at.len(), 2);
    let (first, second) = (at[0].start + STATE_AT, at[1].start + STATE_AT);
    assert_eq!(
        (bytes[first], bytes[second]),
        (2, 1),
        "decrypt-only, active"
    );
    bytes.swap(first, second);
    fix_crc(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();

    let err = KeyStore::open(&path, kek).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("authentication failed"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
}
