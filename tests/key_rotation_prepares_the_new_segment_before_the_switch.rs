//! A segment prepared ahead lists the key active when it was made. When a key rotation makes
//! the log switch to that segment, the rotation makes it again listing the new key, before it
//! takes the log's locks, so the writer that enters it afterwards only opens it instead of
//! creating a full segment under the write lock. Driven step by step (background preparation
//! off) in both encrypted CTR modes; every record reads back with both keys.

mod support;

use support::faults::{FaultStorage, Op};
use support::{payload, read_all};
use walcrypt::{Config, Key, KeyRing, Lsn, Mode, SyncMode, Wal};

fn config(mode: Mode, keys: &KeyRing, storage: &FaultStorage) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(64 * 1024)
        .prepare_segments(false)
        .storage(storage.arc())
}

#[test]
fn the_segment_after_a_key_switch_is_made_by_the_rotation_not_the_writer() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let storage = FaultStorage::new();
        let wal = Wal::open(dir.path(), config(mode, &keys, &storage)).unwrap();
        let mut expected: Vec<(Lsn, Vec<u8>)> = Vec::new();
        for i in 0..5 {
            let p = payload(i, 300);
            let lsn = wal.append(1, &p).unwrap();
            wal.flush(lsn).unwrap();
            expected.push((lsn, p));
        }
        assert!(
            wal.prepare_next_segment().unwrap(),
            "{mode}: the next segment is prepared under key 1"
        );

        let created = storage.count(Op::Create);
        let new_key = Key::generate().unwrap();
        wal.activate_key(2, new_key.clone()).unwrap();
        assert_eq!(
            storage.count(Op::Create),
            created + 1,
            "{mode}: the rotation makes the next segment again, listing key 2"
        );

        let created = storage.count(Op::Create);
        for i in 5..10 {
            let p = payload(i, 300);
            let lsn = wal.append(1, &p).unwrap();
            wal.flush(lsn).unwrap();
            expected.push((lsn, p));
        }
        assert_eq!(
            storage.count(Op::Create),
            created,
            "{mode}: the writer entered the new segment without creating one"
        );
        assert!(
            u64::from(expected[5].0) >= 64 * 1024,
            "{mode}: records after the rotation are in the next segment"
        );
        wal.close().unwrap();

        let mut both = keys.clone();
        both.add(2, new_key).unwrap();
        let read: Vec<(Lsn, Vec<u8>)> = read_all(dir.path(), Some(both))
            .into_iter()
            .map(|(lsn, _, p)| (lsn, p))
            .collect();
        assert_eq!(read, expected, "{mode}");
    }
}
