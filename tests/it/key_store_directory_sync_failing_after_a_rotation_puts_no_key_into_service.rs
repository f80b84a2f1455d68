//! The directory sync after a data-key rotation renamed the new key store into place fails:
//! the rotation fails, and while the sync keeps failing no log opens with the store (so no
//! record is written under the new key); once it succeeds the new key goes into service. A
//! power cut at the end (the store and the log as their last syncs left them, directory
//! entries included) leaves a store that holds every key the log uses: every flushed record
//! reads back.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use support::Rng;
use support::faults::{Effect, FaultStorage, Op, Tear};
use walcrypt::{Config, Kek, KeyProvider, KeyRing, KeyStore, Lsn, Mode, Reader, SyncMode, Wal};

fn config(storage: &FaultStorage, store: &Arc<KeyStore>) -> Config {
    // No preparer thread: its renames and directory syncs, at times of its own, would be
    // counted with (and could take the injected failure meant for) the key store's.
    Config::new(Mode::PerRecord)
        .prepare_segments(false)
        .key_store(store.clone())
        .storage(storage.arc())
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(4096)
        .buffer_size(4096)
}

fn append_flushed(wal: &Wal, from: u32, n: u32) {
    for i in from..from + n {
        let lsn = wal.append(1, format!("record {i}").as_bytes()).unwrap();
        wal.flush(lsn).unwrap();
    }
}

fn read_image(image: &Path, kek: &Arc<dyn KeyProvider>, seed: u64) -> Vec<Vec<u8>> {
    let store = KeyStore::open(image.join("keys").join("keys.store"), kek.clone()).unwrap();
    let reader = Reader::open(image.join("log"), Some(store.ring())).unwrap();
    reader
        .records_from(Lsn::default())
        .map(|r| {
            r.unwrap_or_else(|e| panic!("seed {seed}: store ids {:?}: {e}", store.ring().ids()))
                .payload
        })
        .collect()
}

#[test]
fn key_store_directory_sync_failing_after_a_rotation_puts_no_key_into_service() {
    let tmp = tempfile::tempdir().unwrap();
    let (keys_dir, log_dir) = (tmp.path().join("keys"), tmp.path().join("log"));
    std::fs::create_dir_all(&keys_dir).unwrap();
    let storage = FaultStorage::new();
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = Arc::new(
        KeyStore::create_from_ring_in(
            storage.arc(),
            keys_dir.join("keys.store"),
            kek.clone(),
            &KeyRing::generate().unwrap(),
        )
        .unwrap(),
    );
    let wal = Wal::open(&log_dir, config(&storage, &store)).unwrap();
    append_flushed(&wal, 0, 10);

    // The rename of the rotated store succeeds, the directory sync after it fails.
    storage.fail_nth(
        Op::SyncDir,
        storage.count(Op::SyncDir) + 1,
        Effect::Errno(libc::EIO),
    );
    let renames = storage.count(Op::Rename);
    assert!(wal.rotate_data_key().is_err());
    assert_eq!(
        storage.count(Op::Rename),
        renames + 1,
        "the store was renamed"
    );
    assert_eq!(wal.key_ids(), vec![1]);
    append_flushed(&wal, 10, 10);
    wal.close().unwrap();

    // While the directory sync keeps failing, the store's new key is not put into service.
    storage.fail_from(
        Op::SyncDir,
        storage.count(Op::SyncDir) + 1,
        Effect::Errno(libc::EIO),
    );
    let err = Wal::open(&log_dir, config(&storage, &store)).unwrap_err();
    assert!(err.to_string().contains("not known to be durable"), "{err}");
    assert!(store.rotate_data_key().is_err());
    storage.heal();

    // Once the sync succeeds, it is.
    let wal = Wal::open(&log_dir, config(&storage, &store)).unwrap();
    assert_eq!(wal.key_ids(), vec![1, 2]);
    append_flushed(&wal, 20, 10);

    let expected: Vec<Vec<u8>> = (0..30)
        .map(|i| format!("record {i}").into_bytes())
        .collect();
    for seed in 0..16 {
        let image = tmp.path().join(format!("image{seed}"));
        let mut rng = Rng::new(seed);
        for dir in ["keys", "log"] {
            storage.crash_image_with_names(
                &tmp.path().join(dir),
                &image.join(dir),
                &mut rng,
                Tear::Prefix,
            );
        }
        let payloads = read_image(&image, &kek, seed);
        assert_eq!(payloads[..30], expected[..], "seed {seed}");
    }
    drop(wal);
}
