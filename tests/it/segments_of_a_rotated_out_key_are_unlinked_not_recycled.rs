//! A purge keeps for reuse only segment files whose header lists exactly the active data key.
//! After a rotation, the segments of the old key are unlinked when purged, never renamed to
//! free files, and free files kept while the old key was active are unlinked by the next
//! purge: when the old key leaves the key store (the purge of its last segment), no file in
//! the log's directory lists it any more, so its ciphertext does not outlive it there.

use std::path::Path;
use std::sync::Arc;

use walcrypt::inspect::SegmentHeader;
use walcrypt::{Config, Kek, KeyProvider, KeyStore, Lsn, Mode, SyncMode, Wal};

const SEGMENT: u64 = 4096;

/// `(file name, key ids its header lists)` of every segment and free file in `dir`.
fn files(dir: &Path) -> Vec<(String, Vec<u32>)> {
    let mut out: Vec<(String, Vec<u32>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wal") || n.ends_with(".free"))
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            let header = SegmentHeader::decode(&bytes).unwrap();
            (n, header.key_checks.iter().map(|(id, _)| *id).collect())
        })
        .collect();
    out.sort();
    out
}

fn free_keys(dir: &Path) -> Vec<Vec<u32>> {
    files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".free"))
        .map(|(_, k)| k)
        .collect()
}

#[test]
fn segments_of_a_rotated_out_key_are_unlinked_not_recycled() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
        let store = Arc::new(KeyStore::create(dir.join("keys"), kek).unwrap());
        let config = Config::new(mode)
            .key_store(store.clone())
            .sync(SyncMode::Durable)
            .page_size(512)
            .segment_size(SEGMENT)
            .prepare_segments(false)
            .recycle_segments(4);
        let wal = Wal::open(dir.join("wal"), config).unwrap();
        let dir = dir.join("wal");
        let fill = |n: usize| {
            let mut last = Lsn::default();
            for i in 0..n {
                last = wal.append(1, &[i as u8; 200]).unwrap();
            }
            wal.flush(last).unwrap();
            last
        };
        // Key 1 active: purged segments are kept.
        fill(100);
        let at = u64::from(wal.flushed_lsn());
        let purged = wal.purge_before(Lsn(at - at % SEGMENT - SEGMENT)).unwrap();
        assert!(purged >= 2, "{mode}: {purged}");
        assert_eq!(free_keys(&dir), vec![vec![1]; purged.min(4)], "{mode}");

        // Key 2 active: the next purge removes key 1's free files and keeps none of its
        // segments, although key 1 is still listed by the segment the rotation left.
        wal.rotate_data_key().unwrap();
        let first_of_2 = u64::from(fill(1));
        fill(60);
        let before = first_of_2 - first_of_2 % SEGMENT;
        assert!(
            wal.purge_before(Lsn(before - SEGMENT)).unwrap() >= 1,
            "{mode}"
        );
        assert!(free_keys(&dir).is_empty(), "{mode}: {:?}", files(&dir));
        assert!(store.keys().iter().any(|k| k.id == 1), "{mode}");

        // The purge of key 1's last segment retires it; nothing in the directory lists it.
        assert_eq!(wal.purge_before(Lsn(before)).unwrap(), 1, "{mode}");
        assert!(!store.keys().iter().any(|k| k.id == 1), "{mode}");
        let listed: Vec<_> = files(&dir)
            .into_iter()
            .filter(|(_, k)| k.contains(&1))
            .collect();
        assert!(listed.is_empty(), "{mode}: {listed:?}");

        // Key 2's own purged segments are kept, and reused.
        let at = u64::from(wal.flushed_lsn());
        wal.purge_before(Lsn(at - at % SEGMENT)).unwrap();
        assert!(!free_keys(&dir).is_empty(), "{mode}");
        assert!(
            free_keys(&dir).iter().all(|k| k == &[2]),
            "{mode}: {:?}",
            files(&dir)
        );
        fill(40);
        wal.close().unwrap();
    }
}
