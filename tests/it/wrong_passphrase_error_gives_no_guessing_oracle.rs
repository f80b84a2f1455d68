//! A wrong passphrase (or another KEK) is reported without anything derived from a secret: the
//! error used to print the store's salt and cost and the 8-byte fingerprints of the stored and
//! the derived KEK, which let anyone reading a log of errors test passphrases offline. Now it
//! says the passphrase is wrong and names the store; no error text holds a run of 16 or more
//! hex digits or the salt.

use std::sync::Arc;

use walcrypt::{Kek, KeyProvider, KeyStore, PassphraseKek};

fn longest_hex_run(text: &str) -> usize {
    let (mut best, mut run) = (0, 0);
    for c in text.chars() {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

fn assert_no_oracle(text: &str, salt: &str) {
    assert!(longest_hex_run(text) < 16, "{text}");
    assert!(!text.contains(salt), "{text}");
    assert!(!text.contains("sha256:"), "{text}");
    assert!(!text.contains("m=64"), "{text}");
}

#[test]
fn wrong_passphrase_error_gives_no_guessing_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let cheap = (64, 1, 1);
    let kek = PassphraseKek::with_cost(b"correct horse battery staple", cheap).unwrap();
    KeyStore::create(&path, Arc::new(kek)).unwrap();
    let (kek_id, _, _) = KeyStore::inspect(&path).unwrap();
    let salt = kek_id.split(':').nth(2).unwrap().to_string();
    assert_eq!(salt.len(), 32, "{kek_id}");

    let wrong = PassphraseKek::for_store(&path, b"incorrect horse").unwrap();
    let err = KeyStore::open(&path, Arc::new(wrong)).unwrap_err();
    let (shown, debug) = (err.to_string(), format!("{err:?}"));
    assert!(shown.contains("wrong passphrase"), "{shown}");
    assert!(shown.contains(&path.display().to_string()), "{shown}");
    assert_no_oracle(&shown, &salt);
    assert_no_oracle(&debug, &salt);

    // Another KEK altogether (a KEK file's, a fresh passphrase's): no fingerprint either.
    let other: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek file k").unwrap());
    let shown = KeyStore::open(&path, other).unwrap_err().to_string();
    assert!(shown.contains("another KEK"), "{shown}");
    assert_no_oracle(&shown, &salt);
    let fresh = PassphraseKek::with_cost(b"correct horse battery staple", cheap).unwrap();
    let shown = KeyStore::open(&path, Arc::new(fresh))
        .unwrap_err()
        .to_string();
    assert_no_oracle(&shown, &salt);
}
