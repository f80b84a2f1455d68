//! A data key stays in the key store while any segment lists it, and leaves the store (and the
//! log's working keys) in the `purge_before` that removes its last segment; the store does not
//! grow with rotations once old segments are purged, and the log still reads and reopens.

use std::sync::Arc;

use walcrypt::{Config, Kek, KeyProvider, KeyStore, Lsn, Mode, Reader, SyncMode, Wal};

fn ids(store: &KeyStore) -> Vec<u32> {
    store.keys().iter().map(|k| k.id).collect()
}

#[test]
fn key_retired_only_after_its_last_segment_is_purged() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
        let store_path = dir.path().join("keys");
        let store = Arc::new(KeyStore::create(&store_path, kek.clone()).unwrap());
        let config = Config::new(mode)
            .key_store(store.clone())
            .sync(SyncMode::Durable)
            .page_size(512)
            .segment_size(4096);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        let fill = |n: usize| {
            let mut last = Lsn::default();
            for i in 0..n {
                last = wal.append(1, &[i as u8; 200]).unwrap();
            }
            wal.flush(last).unwrap();
            last
        };
        fill(40); // key 1: several segments
        let first_of_2 = {
            wal.rotate_data_key().unwrap();
            let lsn = fill(1);
            fill(40);
            lsn
        };
        wal.rotate_data_key().unwrap();
        let first_of_3 = fill(1);
        fill(10);
        assert_eq!(ids(&store), vec![1, 2, 3]);

        // Step the purge limit one segment at a time up to the end of key 2's first segment
        // (purge removes the segments that end before the limit): key 1 stays in the store
        // exactly as long as a segment lists it.
        let seg = |lsn: Lsn| lsn.0 - lsn.0 % 4096;
        let mut limit = 4096;
        while limit <= seg(first_of_2) + 4096 {
            wal.purge_before(Lsn(limit)).unwrap();
            let reader_segments = walcrypt::Reader::open(dir.path(), Some(store.ring()))
                .unwrap()
                .segments()
                .iter()
                .map(|s| s.header.key_checks[0].0)
                .collect::<Vec<_>>();
            let key1_listed = reader_segments.contains(&1);
            assert_eq!(
                ids(&store).contains(&1),
                key1_listed,
                "{mode}: limit {limit}: segments list {reader_segments:?}, store {:?}",
                ids(&store)
            );
            // The store on disk agrees with the one in memory.
            let on_disk = KeyStore::open(&store_path, kek.clone()).unwrap();
            assert_eq!(ids(&on_disk), ids(&store), "{mode}");
            limit += 4096;
        }
        assert_eq!(ids(&store), vec![2, 3], "{mode}");
        assert_eq!(wal.key_ids(), vec![2, 3], "{mode}");

        wal.purge_before(Lsn(seg(first_of_3) + 1)).unwrap();
        assert_eq!(ids(&store), vec![3], "{mode}");
        // The active key never leaves, however far the purge goes.
        wal.purge_before(wal.flushed_lsn()).unwrap();
        assert_eq!(ids(&store), vec![3], "{mode}");
        fill(3);
        wal.close().unwrap();

        let reopened = Arc::new(KeyStore::open(&store_path, kek.clone()).unwrap());
        let reader = Reader::open(dir.path(), Some(reopened.ring())).unwrap();
        assert!(
            reader
                .records_from(reader.first_lsn().unwrap())
                .all(|r| r.is_ok())
        );
        drop(reader);
        let wal = Wal::open(dir.path(), config.key_store(reopened)).unwrap();
        wal.close().unwrap();
    }
}
