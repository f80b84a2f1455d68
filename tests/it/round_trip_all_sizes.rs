//! Payloads from 0 bytes to more than a segment round-trip in every mode, across page and
//! segment boundaries, through the reader and through replay.

use crate::support;

use support::{payload, read_all, small_config};
use walcrypt::{KeyRing, Lsn, Mode, Wal};

#[test]
fn every_size_round_trips_in_every_mode() {
    // 0 B up to three segments (a segment is 4 KiB here), with sizes around page bodies.
    let mut sizes: Vec<usize> = vec![0, 1, 15, 16, 17, 100, 463, 464, 465, 511, 512, 1000];
    sizes.extend([4096, 4097, 9000, 12_345]);
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        let mut expected = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            let p = payload(i as u64, len);
            let lsn = wal.append(i as u8, &p).unwrap();
            expected.push((lsn, i as u8, p));
        }
        wal.flush(expected.last().unwrap().0).unwrap();
        wal.close().unwrap();

        assert_eq!(read_all(dir.path(), Some(keys.clone())), expected, "{mode}");
        let files = support::segment_files(dir.path());
        assert!(
            files.len() >= 4,
            "{mode}: expected several segments, got {}",
            files.len()
        );

        let mut replayed = Vec::new();
        let wal = Wal::open_and_replay(dir.path(), config, Lsn::default(), |r| {
            replayed.push((r.lsn, r.kind, r.payload));
            Ok(())
        })
        .unwrap();
        assert_eq!(replayed, expected, "{mode}: replay");
        // Appending after the replay continues the same log.
        let lsn = wal.append(7, b"after replay").unwrap();
        assert!(lsn > expected.last().unwrap().0);
        wal.close().unwrap();
        let all = read_all(dir.path(), Some(keys));
        assert_eq!(all.len(), expected.len() + 1);
        assert_eq!(all.last().unwrap(), &(lsn, 7, b"after replay".to_vec()));
    }
}

#[test]
fn replay_from_a_middle_lsn_starts_there() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        let records: Vec<_> = (0..60).map(|i| (1u8, payload(i, 90))).collect();
        let lsns = support::append_all(&wal, &records);
        drop(wal);
        let from = lsns[37];
        let mut seen = Vec::new();
        let wal = Wal::open_and_replay(dir.path(), config, from, |r| {
            seen.push(r.lsn);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, lsns[37..].to_vec(), "{mode}");
        drop(wal);
    }
}

#[test]
fn reading_from_a_position_inside_a_record_is_refused() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        let records: Vec<_> = (0..30).map(|i| (1u8, payload(i, 200))).collect();
        let lsns = support::append_all(&wal, &records);
        wal.close().unwrap();
        let reader = walcrypt::Reader::open(dir.path(), Some(keys)).unwrap();
        // Every record start works, and yields exactly the records from there.
        for (i, lsn) in lsns.iter().enumerate() {
            let n = reader.records_from(*lsn).filter(|r| r.is_ok()).count();
            assert!(
                reader.records_from(*lsn).all(|r| r.is_ok()),
                "{mode} from {lsn}"
            );
            assert_eq!(n, lsns.len() - i, "{mode} from {lsn}");
        }
        // A position inside a record (header or payload, or a continuation on a later page),
        // for the reader and for replay at open.
        for lsn in [lsns[3].0 + 1, lsns[3].0 + 100, lsns[10].0 + 250] {
            match reader.records_from(Lsn(lsn)).next() {
                Some(Err(walcrypt::Error::NotRecordStart(at))) => assert_eq!(at, Lsn(lsn)),
                other => panic!("{mode}: from {lsn}: {other:?}"),
            }
            let replayed = Wal::open_and_replay(dir.path(), config.clone(), Lsn(lsn), |_| Ok(()));
            match replayed {
                Err(walcrypt::Error::NotRecordStart(at)) => assert_eq!(at, Lsn(lsn)),
                other => panic!("{mode}: replay from {lsn}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_failing_replay_callback_aborts_the_open_with_its_error() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = small_config(mode, &keys);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        // Enough records for several batches between the reading and the replaying thread.
        let records: Vec<_> = (0..2000).map(|i| (1u8, payload(i, 20))).collect();
        let lsns = support::append_all(&wal, &records);
        wal.close().unwrap();

        let mut seen = Vec::new();
        let failed = Wal::open_and_replay(dir.path(), config.clone(), Lsn::default(), |r| {
            if seen.len() == 700 {
                return Err(walcrypt::Error::Config(
                    "the engine refused record 700".into(),
                ));
            }
            seen.push(r.lsn);
            Ok(())
        });
        match failed {
            Err(walcrypt::Error::Config(why)) => assert!(why.contains("700")),
            other => panic!("{mode}: expected the callback's error, got {other:?}"),
        }
        assert_eq!(seen, lsns[..700].to_vec(), "{mode}");
        // Nothing was changed: the next open replays everything.
        let mut all = 0;
        let wal = Wal::open_and_replay(dir.path(), config, Lsn::default(), |_| {
            all += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(all, 2000, "{mode}");
        drop(wal);
    }
}
