//! `wal-key rotate` beside a live log that rotates its data key and purges: the operator's
//! handle reads the store, then the log rotates and its purge retires the old key, all before
//! the operator's rotation writes. A retirement leaves the operator's request as valid as it
//! was, so the rotation is made on the newer generation (its key added to what is left) instead
//! of failing with "changed by someone else ... no longer holds key id 1" and writing nothing.
//! The race's steps are taken one after the other, in the order that lost. A log's own handle
//! still refuses a generation lacking a key its log may use
//! (`live_log_keeps_rotating_after_its_key_store_changed_elsewhere.rs`).

use crate::support;
use std::sync::Arc;

use walcrypt::{Kek, KeyProvider, KeyStore, Lsn, Mode, Reader, Wal};

/// Appends 40 records of 300 bytes (about one segment) tagged with `tag`, and flushes.
fn append(wal: &Wal, tag: u8) -> Vec<(Lsn, Vec<u8>)> {
    let records: Vec<(Lsn, Vec<u8>)> = (0..40u8)
        .map(|i| {
            let payload = vec![tag.wrapping_add(i); 300];
            (wal.append(0, &payload).unwrap(), payload)
        })
        .collect();
    wal.flush(wal.end_lsn()).unwrap();
    records
}

#[test]
fn an_operators_rotation_racing_a_key_retirement_is_made_on_top() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, store_path) = (tmp.path().join("wal"), tmp.path().join("keys.store"));
        let provider: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
        let store = Arc::new(KeyStore::create(&store_path, provider.clone()).unwrap());
        let wal = Wal::open(&dir, support::store_config(mode, &store)).unwrap();
        append(&wal, 1);

        // `wal-key rotate` opens the store: key 1.
        let operator = KeyStore::open(&store_path, provider.clone()).unwrap();

        // Meanwhile the log rotates to key 2 and purges every segment under key 1, which
        // retires it from the store.
        assert_eq!(wal.rotate_data_key().unwrap(), 2, "{mode}");
        append(&wal, 2);
        wal.purge_before(wal.end_lsn()).unwrap();
        assert_eq!(
            support::key_ids_on_disk(&store_path, &provider),
            [2],
            "{mode}"
        );

        // The operator's rotation writes now, on top of the retirement.
        let (id, ring) = operator
            .rotate_data_key()
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!((id, ring.ids(), ring.active_id()), (3, vec![2, 3], Some(3)));
        assert_eq!(
            support::key_ids_on_disk(&store_path, &provider),
            [2, 3],
            "{mode}"
        );

        // The log goes on: its next rotation is made on top of the operator's, and every
        // record since the purge reads back with the store.
        let mut want = append(&wal, 3);
        assert_eq!(wal.rotate_data_key().unwrap(), 4, "{mode}");
        want.extend(append(&wal, 4));
        wal.close().unwrap();
        let ring = KeyStore::open(&store_path, provider.clone())
            .unwrap()
            .ring();
        assert_eq!(ring.ids(), [2, 3, 4], "{mode}");
        let reader = Reader::open(&dir, Some(ring)).unwrap();
        let got: Vec<(Lsn, Vec<u8>)> = reader
            .records_from(want[0].0)
            .map(|r| r.map(|r| (r.lsn, r.payload)).unwrap())
            .collect();
        assert!(got == want, "{mode}: the records since the purge read back");
    }
}
