//! A key store written in the first version (no authentication of its listing) still opens
//! with its keys and states, and its next write rewrites it in the current version, whose
//! authentication then refuses swapped states.

use crate::support;

use std::sync::Arc;

use support::store_bytes::{STATE_AT, entries, fix_crc, states, version_1_file};
use walcrypt::{Kek, Key, KeyProvider, KeyStore, STORE_VERSION};

#[test]
fn key_store_of_the_first_version_opens_and_is_rewritten_authenticated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let (one, two) = (Key::generate().unwrap(), Key::generate().unwrap());
    std::fs::write(
        &path,
        version_1_file(kek.as_ref(), 4, &[(1, 2, &one), (2, 1, &two)]),
    )
    .unwrap();

    let store = KeyStore::open(&path, kek.clone()).unwrap();
    assert_eq!(store.generation(), 4);
    assert_eq!(
        states(&store.keys()),
        vec![(1, "decrypt-only"), (2, "active")]
    );
    assert_eq!(
        store.ring().get(1).unwrap().fingerprint(),
        one.fingerprint()
    );
    assert_eq!(store.ring().active_id(), Some(2));

    store.rotate_data_key().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[8..12], STORE_VERSION.to_le_bytes());
    assert_eq!(STORE_VERSION, 2);
    let reopened = KeyStore::open(&path, kek.clone()).unwrap();
    assert_eq!(reopened.ring().ids(), vec![1, 2, 3]);
    assert_eq!(
        reopened.ring().get(2).unwrap().fingerprint(),
        two.fingerprint()
    );

    let mut swapped = bytes.clone();
    let at = entries(&swapped);
    swapped.swap(at[1].start + STATE_AT, at[2].start + STATE_AT);
    fix_crc(&mut swapped);
    std::fs::write(&path, &swapped).unwrap();
    assert!(KeyStore::open(&path, kek).is_err());
}
