//! A follower attached to a live Wal (`Follower::attach`) before the Wal rotates its data key
//! yields every record, those under the new key included: meeting a key id it lacks, it takes
//! the Wal's current keys. It used to stop with `MissingKey(2)` at the first record after the
//! rotation. perrecord, pagelevel and perrecord-gcm.

use std::sync::Arc;
use std::time::Duration;

use walcrypt::{Config, Follower, Kek, KeyProvider, KeyStore, Lsn, Mode, SyncMode, Wal};

const PATIENCE: Duration = Duration::from_secs(10);

#[test]
fn attached_follower_reads_on_across_a_data_key_rotation() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
        let store = Arc::new(KeyStore::create(dir.path().join("keys.store"), kek).unwrap());
        let config = Config::new(mode)
            .key_store(store)
            .sync(SyncMode::Durable)
            .page_size(1024)
            .segment_size(16 * 1024);
        let wal = Arc::new(Wal::open(dir.path().join("log"), config).unwrap());
        let mut follower = Follower::attach(&wal, Lsn::default()).unwrap();
        let mut expected = Vec::new();
        for round in 0..3u32 {
            for i in 0..5u32 {
                let payload = format!("round {round} record {i}").into_bytes();
                let lsn = wal.append(1, &payload).unwrap();
                wal.flush(lsn).unwrap();
                expected.push(payload);
            }
            assert_eq!(wal.rotate_data_key().unwrap(), round + 2, "{mode}");
        }
        let mut got = Vec::new();
        while got.len() < expected.len() {
            let record = follower
                .next_timeout(PATIENCE)
                .unwrap_or_else(|e| panic!("{mode}: after {} records: {e}", got.len()))
                .unwrap_or_else(|| panic!("{mode}: no record after {}", got.len()));
            got.push(record.payload);
        }
        assert_eq!(got, expected, "{mode}");
    }
}
