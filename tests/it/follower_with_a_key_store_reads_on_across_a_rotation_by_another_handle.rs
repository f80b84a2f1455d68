//! A follower in another process (here: opened from the files with its own handle of the key
//! store, `Follower::open_with_key_store`) yields every record across data-key rotations done
//! through another handle of the store: meeting a key id its store lacks, it reads the store
//! file again once. A `Reader` opened with a stale handle (`Reader::open_with_key_store`) reads
//! the rotated log the same way. Without a source to reload from, the key is still missing.

use std::sync::Arc;
use std::time::Duration;

use walcrypt::{
    Config, Error, Follower, Kek, KeyProvider, KeyStore, Lsn, Mode, Reader, SyncMode, Visibility,
    Wal,
};

const PATIENCE: Duration = Duration::from_secs(10);

#[test]
fn follower_with_a_key_store_reads_on_across_a_rotation_by_another_handle() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let (store_path, log) = (dir.path().join("keys.store"), dir.path().join("log"));
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
        let writer_store = Arc::new(KeyStore::create(&store_path, kek.clone()).unwrap());
        let config = Config::new(mode)
            .key_store(writer_store)
            .sync(SyncMode::Durable)
            .page_size(1024)
            .segment_size(16 * 1024);
        let wal = Wal::open(&log, config).unwrap();
        let lsn = wal.append(1, b"first").unwrap();
        wal.flush(lsn).unwrap();

        // The replica's handles, opened before the rotations.
        let replica_store = Arc::new(KeyStore::open(&store_path, kek.clone()).unwrap());
        let reader_store = KeyStore::open(&store_path, kek.clone()).unwrap();
        let mut follower =
            Follower::open_with_key_store(&log, replica_store.clone(), Lsn::default())
                .unwrap()
                .visibility(Visibility::Written);
        // Records as stored, with their payloads: the store is read again for them too.
        let raw_store = Arc::new(KeyStore::open(&store_path, kek.clone()).unwrap());
        let mut raw = Follower::open_with_key_store(&log, raw_store, Lsn::default())
            .unwrap()
            .visibility(Visibility::Written);
        let mut plain = Follower::open(&log, Some(replica_store.ring()), Lsn::default())
            .unwrap()
            .visibility(Visibility::Written);

        let mut expected = vec![b"first".to_vec()];
        for round in 0..2u32 {
            wal.rotate_data_key().unwrap();
            for i in 0..4u32 {
                let payload = format!("round {round} record {i}").into_bytes();
                let lsn = wal.append(1, &payload).unwrap();
                wal.flush(lsn).unwrap();
                expected.push(payload);
            }
        }
        wal.close().unwrap();

        let mut got = Vec::new();
        while got.len() < expected.len() {
            let record = follower
                .next_timeout(PATIENCE)
                .unwrap_or_else(|e| panic!("{mode}: after {} records: {e}", got.len()))
                .unwrap_or_else(|| panic!("{mode}: no record after {}", got.len()));
            got.push(record.payload);
        }
        assert_eq!(got, expected, "{mode}");
        assert_eq!(replica_store.ring().ids(), vec![1, 2, 3], "{mode}");
        let mut got_raw = Vec::new();
        while got_raw.len() < expected.len() {
            let record = raw
                .next_raw_timeout(PATIENCE)
                .unwrap_or_else(|e| panic!("{mode}: raw, after {} records: {e}", got_raw.len()))
                .unwrap_or_else(|| panic!("{mode}: raw, no record after {}", got_raw.len()));
            got_raw.push(record.payload);
        }
        let expected_raw: Vec<Option<Vec<u8>>> = expected.iter().cloned().map(Some).collect();
        assert_eq!(
            got_raw, expected_raw,
            "{mode}: records as stored carry their payloads under the rotated keys"
        );

        let reader = Reader::open_with_key_store(&log, &reader_store).unwrap();
        let read: Vec<Vec<u8>> = reader
            .records_from(Lsn::default())
            .map(|r| r.unwrap().payload)
            .collect();
        assert_eq!(read, expected, "{mode}");

        // A follower given a ring alone has nothing to reload.
        assert_eq!(
            plain.next_timeout(PATIENCE).unwrap().unwrap().payload,
            b"first"
        );
        match plain.next_timeout(PATIENCE) {
            Err(Error::MissingKey { key_id: 2, .. }) => {}
            other => panic!("{mode}: expected MissingKey for key 2, got {other:?}"),
        }
    }
}
