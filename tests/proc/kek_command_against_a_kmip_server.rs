//! Opt-in: the command KEK provider against a real key manager. `WALCRYPT_KEK_COMMAND` and
//! `WALCRYPT_NEW_KEK_COMMAND` are command lines (program and arguments, split on spaces) that
//! print two different KEKs; `tests/kmip/kmip_kek.py get <id>` does that for a local PyKMIP
//! server (setup in that file). A store created under the first KEK serves a live log through a
//! data-key rotation, is re-wrapped under the second, and then opens only with the second.
//!
//! ```text
//! WALCRYPT_KEK_COMMAND="python3 tests/kmip/kmip_kek.py get 1" \
//! WALCRYPT_NEW_KEK_COMMAND="python3 tests/kmip/kmip_kek.py get 2" \
//!     cargo test --test proc kek_command_against_a_kmip_server:: -- --ignored
//! ```

use std::sync::Arc;
use std::time::Duration;

use walcrypt::{Config, KekCommand, KeyProvider, KeyStore, Lsn, Mode, Reader, Wal};

fn provider(var: &str) -> Arc<dyn KeyProvider> {
    let line = std::env::var(var).unwrap_or_else(|_| panic!("set {var}"));
    let mut words = line.split_whitespace();
    let program = words.next().unwrap_or_else(|| panic!("{var} is empty"));
    let args: Vec<String> = words.map(str::to_string).collect();
    Arc::new(KekCommand::run(program, &args, Duration::from_secs(30)).unwrap())
}

#[test]
#[ignore = "needs a key manager: set WALCRYPT_KEK_COMMAND and WALCRYPT_NEW_KEK_COMMAND"]
fn kek_command_against_a_kmip_server() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.store");
    let old = provider("WALCRYPT_KEK_COMMAND");
    let new = provider("WALCRYPT_NEW_KEK_COMMAND");
    assert_ne!(old.kek_id().unwrap(), new.kek_id().unwrap());

    let store = Arc::new(KeyStore::create(&path, old.clone()).unwrap());
    let log = dir.path().join("log");
    let wal = Wal::open(&log, Config::new(Mode::PerRecord).key_store(store.clone())).unwrap();
    wal.append(1, b"under key 1").unwrap();
    wal.rotate_data_key().unwrap();
    wal.append(1, b"under key 2").unwrap();
    wal.close().unwrap();

    store.rotate_kek(new.clone()).unwrap();
    assert!(KeyStore::open(&path, old).is_err());
    let reopened = KeyStore::open(&path, new).unwrap();
    let reader = Reader::open(&log, Some(reopened.ring())).unwrap();
    let payloads: Vec<_> = reader
        .records_from(Lsn::default())
        .map(|r| r.unwrap().payload)
        .collect();
    assert_eq!(
        payloads,
        vec![b"under key 1".to_vec(), b"under key 2".to_vec()]
    );
}
