//! A follower attached to a `Wal` (`Follower::attach`) outlives it: the `Wal` is dropped, a new
//! `Wal` opens the directory and rotates the data key, and the follower reads on. For a log with a
//! key store the follower keeps that store and takes the new key from it, from the store in
//! memory when the new `Wal` shares it, else by reading the store file again; it used to stop
//! with `MissingKey` for key 2, since it asked only the old `Wal` for keys. A log with a raw key
//! ring leaves the follower nothing to take the key from: its `MissingKey` says that the `Wal` it
//! was attached to is gone and names `set_keys`, and after `set_keys` the record comes.
//! perrecord, pagelevel and perrecord-gcm.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use walcrypt::{
    Config, Error, Follower, Kek, Key, KeyProvider, KeyRing, KeyStore, Lsn, Mode, SyncMode, Wal,
};

const PATIENCE: Duration = Duration::from_secs(10);

fn small(config: Config) -> Config {
    config
        .sync(SyncMode::Durable)
        .page_size(1024)
        .segment_size(16 * 1024)
}

fn append_flushed(wal: &Wal, payload: &[u8]) {
    let lsn = wal.append(1, payload).unwrap();
    wal.flush(lsn).unwrap();
}

fn next_payload(follower: &mut Follower, what: &str) -> Vec<u8> {
    follower
        .next_timeout(PATIENCE)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .unwrap_or_else(|| panic!("{what}: no record"))
        .payload
}

#[test]
fn attached_follower_of_a_key_store_log_reads_on_after_a_reopen_and_a_rotation() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        // The new `Wal` opens with the very store handle the first one had, or with a handle
        // of its own (the follower's handle then has to read the store file again).
        for shared_handle in [true, false] {
            let what = format!("{mode}, shared store handle {shared_handle}");
            let dir = tempfile::tempdir().unwrap();
            let (store_path, log) = (dir.path().join("keys.store"), dir.path().join("log"));
            let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
            let store = Arc::new(KeyStore::create(&store_path, kek.clone()).unwrap());
            let wal = Arc::new(
                Wal::open(&log, small(Config::new(mode).key_store(store.clone()))).unwrap(),
            );
            let mut follower = Follower::attach(&wal, Lsn::default()).unwrap();
            append_flushed(&wal, b"before the reopen");
            assert_eq!(
                next_payload(&mut follower, &what),
                b"before the reopen",
                "{what}"
            );

            drop(wal);
            let store = if shared_handle {
                store
            } else {
                Arc::new(KeyStore::open(&store_path, kek).unwrap())
            };
            let wal = Wal::open(&log, small(Config::new(mode).key_store(store))).unwrap();
            assert_eq!(wal.rotate_data_key().unwrap(), 2, "{what}");
            append_flushed(&wal, b"under key 2");
            assert_eq!(next_payload(&mut follower, &what), b"under key 2", "{what}");
            assert_eq!(wal.rotate_data_key().unwrap(), 3, "{what}");
            append_flushed(&wal, b"under key 3");
            assert_eq!(next_payload(&mut follower, &what), b"under key 3", "{what}");
            wal.close().unwrap();
        }
    }
}

#[test]
fn attached_follower_of_a_raw_key_ring_log_says_its_wal_is_gone_and_takes_set_keys() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let log: &Path = dir.path();
        let mut keys = KeyRing::generate().unwrap();
        let wal = Arc::new(Wal::open(log, small(Config::new(mode).keys(keys.clone()))).unwrap());
        let mut follower = Follower::attach(&wal, Lsn::default()).unwrap();
        append_flushed(&wal, b"before the reopen");
        assert_eq!(
            next_payload(&mut follower, &format!("{mode}")),
            b"before the reopen",
            "{mode}"
        );

        drop(wal);
        let wal = Wal::open(log, small(Config::new(mode).keys(keys.clone()))).unwrap();
        keys.add(2, Key::generate().unwrap()).unwrap();
        wal.activate_key(2, keys.get(2).unwrap().clone()).unwrap();
        append_flushed(&wal, b"under key 2");
        match follower.next_timeout(PATIENCE) {
            Err(
                e @ Error::MissingKey {
                    key_id: 2,
                    at: Some(_),
                    attached_wal_gone: true,
                },
            ) => {
                let text = e.to_string();
                assert!(text.contains("key id 2"), "{mode}: {text}");
                assert!(text.contains("attached"), "{mode}: {text}");
                assert!(text.contains("set_keys"), "{mode}: {text}");
            }
            other => panic!(
                "{mode}: expected MissingKey for key 2 saying the Wal is gone, got {other:?}"
            ),
        }
        follower.set_keys(Some(keys.clone())).unwrap();
        assert_eq!(
            next_payload(&mut follower, &format!("{mode} after set_keys")),
            b"under key 2",
            "{mode}"
        );
        wal.close().unwrap();
    }
}
