//! Records under key 1, rotate, records under key 2: all readable with the ring {1, 2};
//! without key 1 the reader says MissingKey for key 1, naming the record; another key under id 1 is WrongKey.

use crate::support;

use support::{payload, read_all, small_config};
use walcrypt::{Error, Key, KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn rotation_keeps_old_records_readable_and_names_missing_or_wrong_keys() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let mut keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        let first: Vec<_> = (0..10).map(|i| (1u8, payload(i, 120))).collect();
        let first_lsns = support::append_all(&wal, &first);
        wal.close().unwrap();

        assert_eq!(keys.rotate().unwrap(), 2);
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        let second: Vec<_> = (10..20).map(|i| (2u8, payload(i, 120))).collect();
        let second_lsns = support::append_all(&wal, &second);
        wal.close().unwrap();

        let all = read_all(dir.path(), Some(keys.clone()));
        let expected: Vec<_> = first_lsns
            .iter()
            .zip(&first)
            .chain(second_lsns.iter().zip(&second))
            .map(|(l, (k, p))| (*l, *k, p.clone()))
            .collect();
        assert_eq!(all, expected, "{mode}");

        if mode.is_per_record() {
            let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
            let ids: Vec<u32> = reader
                .raw_records_from(Lsn::default())
                .map(|r| r.unwrap().header.encryption.unwrap().0)
                .collect();
            assert_eq!(ids, [vec![1; 10], vec![2; 10]].concat());
        }

        // Every page and record names a key its segment header lists, so a segment's check
        // values vouch for all of its data.
        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        for seg in reader.segments() {
            let listed: Vec<u32> = seg.header.key_checks.iter().map(|(id, _)| *id).collect();
            let start = u64::from(seg.header.start);
            for page in reader.page_headers().unwrap() {
                if let Some(h) = page.header
                    && u64::from(page.segment) == start
                    && h.key_id != 0
                {
                    assert!(
                        listed.contains(&h.key_id),
                        "{mode}: page {} uses key {} not in {listed:?}",
                        page.page_lsn,
                        h.key_id
                    );
                }
            }
        }
        for r in reader.raw_records_from(Lsn::default()) {
            let r = r.unwrap();
            if let Some((id, _)) = r.header.encryption {
                let seg = u64::from(r.lsn) - u64::from(r.lsn) % reader.geometry().segment_size;
                let header = &reader
                    .segments()
                    .iter()
                    .find(|s| u64::from(s.header.start) == seg)
                    .unwrap()
                    .header;
                assert!(
                    header.key_checks.iter().any(|(k, _)| *k == id),
                    "{mode}: record {} key {id}",
                    r.lsn
                );
            }
        }
        // The old records read with key 1 alone.
        let mut only_one = KeyRing::empty();
        only_one.add(1, keys.get(1).unwrap().clone()).unwrap();
        let reader = Reader::open(dir.path(), Some(only_one)).unwrap();
        let old: Vec<_> = reader
            .records_from(Lsn::default())
            .take(10)
            .map(|r| r.unwrap().payload)
            .collect();
        assert_eq!(
            old,
            first.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
            "{mode}"
        );

        // Only key 2: the first record needs key 1.
        let mut only_two = KeyRing::empty();
        only_two.add(2, keys.get(2).unwrap().clone()).unwrap();
        let reader = Reader::open(dir.path(), Some(only_two)).unwrap();
        let first_result = reader.records_from(Lsn::default()).next().unwrap();
        // The error says where: the first record (pagelevel: its page) and its segment.
        match &first_result {
            Err(
                e @ Error::MissingKey {
                    key_id: 1,
                    at: Some(at),
                    attached_wal_gone: false,
                },
            ) => {
                assert_eq!(at.segment, Lsn(0), "{mode}");
                // small_config's pages are 512 bytes.
                let place = match mode {
                    Mode::PageLevel => Lsn(first_lsns[0].0 / 512 * 512),
                    _ => first_lsns[0],
                };
                assert_eq!(at.lsn, place, "{mode}");
                let text = e.to_string();
                assert!(text.contains("key id 1"), "{mode}: {text}");
                assert!(text.contains(&at.lsn.to_string()), "{mode}: {text}");
            }
            other => panic!("{mode}: expected MissingKey for key 1 with its place: {other:?}"),
        }

        // A different key under id 1 is a wrong key, found before any payload is decrypted.
        let mut impostor = KeyRing::empty();
        impostor.add(1, Key::generate().unwrap()).unwrap();
        impostor.add(2, keys.get(2).unwrap().clone()).unwrap();
        match Reader::open(dir.path(), Some(impostor.clone())) {
            Err(Error::WrongKey { key_id: 1, .. }) => {}
            other => panic!("{mode}: expected WrongKey for id 1, got {other:?}"),
        }
        match Wal::open(dir.path(), small_config(mode, &impostor)) {
            Err(Error::WrongKey { key_id: 1, .. }) => {}
            other => panic!("{mode}: expected WrongKey at open, got {other:?}"),
        }
    }
}

/// A log that keeps its data keys in a key store refuses `activate_key`: the key would encrypt
/// records without being in the store, so a restart could never read them (an outside probe
/// found it accepted, and the reopen then blamed a rolled-back store). The store's own rotation
/// still works, and every record reads back after a restart.
#[test]
fn activate_key_is_refused_for_a_log_with_a_key_store() {
    use std::sync::Arc;
    use walcrypt::{Config, Kek, KeyProvider, KeyStore, SyncMode};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let store = Arc::new(KeyStore::create(&path, kek.clone()).unwrap());
    let config = |store| {
        Config::new(Mode::PerRecord)
            .key_store(store)
            .sync(SyncMode::Durable)
    };
    let wal = Wal::open(dir.path(), config(store.clone())).unwrap();
    wal.flush(wal.append(1, b"under key 1").unwrap()).unwrap();
    let error = wal.activate_key(7, Key::generate().unwrap()).unwrap_err();
    match &error {
        Error::InvalidArgument { op, reason } => {
            assert_eq!(*op, "activate_key");
            assert!(reason.contains("rotate_data_key"), "{reason}");
            assert!(reason.contains(&path.display().to_string()), "{reason}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(wal.key_ids(), vec![1], "no key was installed");
    wal.flush(wal.append(1, b"still under key 1").unwrap())
        .unwrap();
    wal.rotate_data_key().unwrap();
    wal.flush(wal.append(1, b"under key 2").unwrap()).unwrap();
    wal.close().unwrap();

    let store = Arc::new(KeyStore::open(&path, kek).unwrap());
    let wal = Wal::open(dir.path(), config(store.clone())).unwrap();
    wal.close().unwrap();
    let reader = Reader::open_with_key_store(dir.path(), &store).unwrap();
    let payloads: Vec<Vec<u8>> = reader
        .records_from(Lsn::default())
        .filter_map(|r| r.map(|r| (r.kind == 1).then_some(r.payload)).unwrap())
        .collect();
    assert_eq!(
        payloads,
        [&b"under key 1"[..], b"still under key 1", b"under key 2"]
    );
}
