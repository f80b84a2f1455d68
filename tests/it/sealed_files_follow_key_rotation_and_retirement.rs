//! Sealed files and key rotation: new files use the active key, a file under a rotated-out
//! key still opens while the key is present, a missing key is named by its id, the key ids a
//! directory of sealed files uses can be listed from the headers alone, and `purge_before`
//! does not retire a key that a sealed file in a registered directory still needs.

use std::sync::Arc;

use walcrypt::{
    Config, Error, Kek, KeyProvider, KeyRing, KeyStore, Lsn, Mode, SealedFileProblem, SealedFiles,
    SyncMode, Wal, open_file, seal_file, sealed_key_id, sealed_key_ids,
};

#[test]
fn file_under_a_rotated_out_key_opens_and_a_missing_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut keys = KeyRing::generate().unwrap();
    let old = dir.path().join("snapshot-1");
    seal_file(&old, b"under key 1", &keys).unwrap();
    assert_eq!(keys.rotate().unwrap(), 2);
    let new = dir.path().join("snapshot-2");
    seal_file(&new, b"under key 2", &keys).unwrap();
    assert_eq!(sealed_key_id(&old).unwrap(), 1);
    assert_eq!(sealed_key_id(&new).unwrap(), 2);
    assert_eq!(sealed_key_ids(dir.path()).unwrap(), vec![1, 2]);
    assert_eq!(open_file(&old, &keys).unwrap(), b"under key 1");
    assert_eq!(open_file(&new, &keys).unwrap(), b"under key 2");

    // A ring holding only key 2: the file under key 1 names the key it needs.
    let mut only_2 = KeyRing::empty();
    only_2.add(2, keys.get(2).unwrap().clone()).unwrap();
    let err = open_file(&old, &only_2).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("key id 1"), "{text}");
    assert!(text.contains(&old.display().to_string()), "{text}");
    assert!(matches!(
        err,
        Error::SealedFile {
            problem: SealedFileProblem::MissingKey { key_id: 1 },
            ..
        }
    ));
}

#[test]
fn retirement_keeps_a_key_that_a_sealed_file_still_needs() {
    let dir = tempfile::tempdir().unwrap();
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = Arc::new(KeyStore::create(dir.path().join("keys"), kek.clone()).unwrap());
    let snapshots = dir.path().join("snapshots");
    std::fs::create_dir(&snapshots).unwrap();
    std::fs::write(snapshots.join("README"), b"not a sealed file").unwrap();
    std::fs::create_dir(snapshots.join("old")).unwrap();
    let config = Config::new(Mode::PerRecord)
        .key_store(store.clone())
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(4096)
        // No segment made ahead: retirement waits while a reused file is being made into a
        // segment (its old pages may be under any key), and the preparer making one beside the
        // purge this test retires key 1 with (a loaded machine) deferred it to the next purge.
        .prepare_segments(false)
        .sealed_dirs([&snapshots]);
    let wal = Wal::open(dir.path().join("log"), config).unwrap();
    let files = SealedFiles::new(&store).chunk_size(64);
    let snapshot = snapshots.join("snapshot");
    files.write(&snapshot, &[1u8; 300]).unwrap();
    assert_eq!(files.key_id(&snapshot).unwrap(), 1);

    let fill = |n: usize| {
        let mut last = Lsn::default();
        for i in 0..n {
            last = wal.append(1, &[i as u8; 200]).unwrap();
        }
        wal.flush(last).unwrap();
    };
    fill(40);
    // A handle on the store opened before the rotation (another process, say).
    let early = Arc::new(KeyStore::open(dir.path().join("keys"), kek.clone()).unwrap());
    assert_eq!(wal.rotate_data_key().unwrap(), 2);
    fill(40);
    // Every segment of key 1 goes; the snapshot keeps key 1 in the store.
    wal.purge_before(wal.flushed_lsn()).unwrap();
    let ids = |s: &KeyStore| s.keys().iter().map(|k| k.id).collect::<Vec<_>>();
    assert_eq!(ids(&store), vec![1, 2]);
    assert_eq!(files.read(&snapshot).unwrap(), vec![1u8; 300]);
    // The store on disk agrees: another process opens the snapshot with it.
    let reopened = Arc::new(KeyStore::open(dir.path().join("keys"), kek.clone()).unwrap());
    assert_eq!(open_file(&snapshot, &reopened).unwrap(), vec![1u8; 300]);

    // The next snapshot replaces it under the active key; the next purge that removes a
    // segment retires key 1.
    files.write(&snapshot, &[2u8; 300]).unwrap();
    assert_eq!(files.key_ids_in(&snapshots).unwrap(), vec![2]);
    // The early handle lacks key 2: it reads the store again and opens the file.
    assert_eq!(open_file(&snapshot, &early).unwrap(), vec![2u8; 300]);
    fill(40);
    wal.purge_before(wal.flushed_lsn()).unwrap();
    assert_eq!(ids(&store), vec![2]);
    assert_eq!(files.read(&snapshot).unwrap(), vec![2u8; 300]);
    wal.close().unwrap();
}

#[test]
fn retirement_retires_nothing_when_a_sealed_header_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = Arc::new(KeyStore::create(dir.path().join("keys"), kek).unwrap());
    let snapshots = dir.path().join("snapshots");
    std::fs::create_dir(&snapshots).unwrap();
    let config = Config::new(Mode::PerRecord)
        .key_store(store.clone())
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(4096)
        .sealed_dirs([&snapshots]);
    let wal = Wal::open(dir.path().join("log"), config).unwrap();
    let snapshot = snapshots.join("snapshot");
    seal_file(&snapshot, b"under key 1", &store).unwrap();
    // A damaged header: the magic, then a future version. Its key id cannot be trusted.
    let mut bytes = std::fs::read(&snapshot).unwrap();
    bytes[8] = 9;
    std::fs::write(&snapshot, &bytes).unwrap();
    for i in 0..40 {
        wal.append(1, &[i as u8; 200]).unwrap();
    }
    wal.rotate_data_key().unwrap();
    let lsn = wal.append(1, b"under key 2").unwrap();
    wal.flush(lsn).unwrap();
    let err = wal.purge_before(wal.flushed_lsn()).unwrap_err();
    assert!(err.to_string().contains("version 9"), "{err}");
    assert_eq!(store.keys().len(), 2, "nothing retired on a guess");
    wal.close().unwrap();
}

#[test]
fn a_file_whose_key_was_retired_while_it_was_written_fails_to_finish() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = Arc::new(KeyStore::create(dir.path().join("keys"), kek).unwrap());
    let path = dir.path().join("snapshot");
    let mut writer = SealedFiles::new(&store).replace(&path).unwrap();
    assert_eq!(writer.key_id(), 1);
    writer.write_all(&[3u8; 1000]).unwrap();
    // Meanwhile the key rotates and, with no segment or registered file listing it, retires.
    store.rotate_data_key().unwrap();
    assert_eq!(store.retire_unused(&[]).unwrap(), vec![1]);
    let err = writer.finish().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("key id 1 was retired"), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
    // Sealed again, it is under the active key and opens.
    seal_file(&path, &[3u8; 1000], &store).unwrap();
    assert_eq!(sealed_key_id(&path).unwrap(), 2);
    assert_eq!(open_file(&path, &store).unwrap(), vec![3u8; 1000]);
}
