//! A crash (an injected I/O failure followed by a power-cut image of the directory) at every
//! storage operation of creating a key store, rotating the data key of a live log, rotating
//! the KEK and retiring keys after a purge leaves a key store that opens (under the old or the
//! new KEK) and holds every key the log in the same image needs: every record that reached
//! the image reads back.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use support::Rng;
use support::faults::{Effect, FaultStorage, Op, Tear};
use walcrypt::{Config, Kek, KeyProvider, KeyRing, KeyStore, Lsn, Mode, Reader, SyncMode, Wal};

const OPS: [Op; 5] = [Op::Create, Op::Write, Op::Sync, Op::Rename, Op::SyncDir];

#[derive(Debug, Clone, Copy)]
enum Step {
    CreateStore,
    RotateDataKey,
    RotateKek,
    RetireAfterPurge,
}

fn config(mode: Mode, storage: &FaultStorage, store: &Arc<KeyStore>) -> Config {
    Config::new(mode)
        .key_store(store.clone())
        .storage(storage.arc())
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(4096)
        .buffer_size(4096)
}

fn append_some(wal: &Wal, from: u32, n: u32) {
    for i in from..from + n {
        let Ok(lsn) = wal.append(1, format!("record {i}").repeat(3).as_bytes()) else {
            return;
        };
        if wal.flush(lsn).is_err() {
            return;
        }
    }
}

/// Runs `step` with the `nth` `op` of the step failing; returns false when no fault fired
/// (the step has fewer such operations).
fn crash_during(mode: Mode, step: Step, op: Op, nth: u64, seed: u64) -> bool {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    std::fs::create_dir_all(&dir).unwrap();
    let store_path = dir.join("keys.store");
    let storage = FaultStorage::new();
    let old: Arc<dyn KeyProvider> = Arc::new(Kek::generate("old kek").unwrap());
    let new: Arc<dyn KeyProvider> = Arc::new(Kek::generate("new kek").unwrap());
    let fail = |storage: &FaultStorage| {
        storage.fail_nth(op, storage.count(op) + nth, Effect::Errno(libc::EIO));
        storage.injected()
    };

    let mut wal = None;
    let before = if let Step::CreateStore = step {
        fail(&storage)
    } else {
        0
    };
    let created = KeyStore::create_from_ring_in(
        storage.arc(),
        &store_path,
        old.clone(),
        &KeyRing::generate().unwrap(),
    );
    let mut fired = matches!(step, Step::CreateStore) && storage.injected() > before;
    storage.heal();
    if let Ok(store) = created {
        let store = Arc::new(store);
        let w = Wal::open(&dir, config(mode, &storage, &store)).unwrap();
        append_some(&w, 0, 20);
        match step {
            Step::CreateStore => {}
            Step::RotateDataKey => {
                let before = fail(&storage);
                let _ = w.rotate_data_key();
                fired = storage.injected() > before;
                storage.heal();
                append_some(&w, 100, 20);
            }
            Step::RotateKek => {
                let before = fail(&storage);
                let _ = store.rotate_kek(new.clone());
                fired = storage.injected() > before;
                storage.heal();
                append_some(&w, 100, 5);
            }
            Step::RetireAfterPurge => {
                w.rotate_data_key().unwrap();
                append_some(&w, 100, 40);
                let before = fail(&storage);
                let _ = w.purge_before(w.flushed_lsn());
                fired = storage.injected() > before;
                storage.heal();
                append_some(&w, 200, 5);
            }
        }
        wal = Some(w);
    }
    storage.heal();

    let image = tmp.path().join("image");
    let mut rng = Rng::new(seed);
    storage.crash_image(&dir, &image, &mut rng, Tear::Prefix);
    drop(wal);
    check_image(&image, &[old, new], step, op, nth);
    fired
}

fn check_image(image: &Path, keks: &[Arc<dyn KeyProvider>], step: Step, op: Op, nth: u64) {
    let what = format!("{step:?}, {op:?} #{nth}");
    let store_path = image.join("keys.store");
    let has_log = std::fs::read_dir(image)
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".wal"));
    if !store_path.exists() {
        // Only a store that was never created may be missing, and then no log used it.
        assert!(matches!(step, Step::CreateStore), "{what}: store missing");
        assert!(!has_log, "{what}: a log without its store");
        return;
    }
    let store = keks
        .iter()
        .find_map(|kek| KeyStore::open(&store_path, kek.clone()).ok())
        .unwrap_or_else(|| panic!("{what}: the store opens under neither KEK"));
    if !has_log {
        return;
    }
    let reader = Reader::open(image, Some(store.ring()))
        .unwrap_or_else(|e| panic!("{what}: log does not open with the store's keys: {e}"));
    for record in reader.records_from(Lsn::default()) {
        if let Err(e) = record {
            // A torn tail is the log's business; a missing or wrong key is the store's.
            assert!(
                !matches!(
                    e,
                    walcrypt::Error::MissingKey { .. } | walcrypt::Error::WrongKey { .. }
                ),
                "{what}: {e}"
            );
            break;
        }
    }
    // The log also reopens for writing with the store.
    let store = Arc::new(store);
    let cfg = Config::new(reader.mode())
        .key_store(store)
        .page_size(512)
        .segment_size(4096)
        .buffer_size(4096);
    drop(reader);
    let wal = Wal::open(image, cfg).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    wal.close().unwrap();
}

#[test]
fn key_store_crash_at_every_step() {
    let mut seed = 1;
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        for step in [
            Step::CreateStore,
            Step::RotateDataKey,
            Step::RotateKek,
            Step::RetireAfterPurge,
        ] {
            for op in OPS {
                let mut nth = 1;
                while crash_during(mode, step, op, nth, seed) {
                    nth += 1;
                    seed += 1;
                    assert!(nth < 64, "{step:?} {op:?}: too many operations");
                }
            }
        }
    }
}
