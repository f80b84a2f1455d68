//! The next segment is prepared ahead — created full size with its blocks written as zeros,
//! fdatasync'ed and renamed into place — so the writer that reaches it only opens it. Driven
//! step by step here through `Wal::prepare_next_segment` (background preparation off):
//!
//! * a full disk shows at preparation: the error comes back from `prepare_next_segment`, leaves
//!   no file behind and does not poison the log;
//! * a prepared segment is used as is: crossing into it creates nothing;
//! * a crash image with a prepared, never used segment reopens to every flushed record, and
//!   recovery removes the unused segment.
//!
//! With background preparation on (the default), a log written across many segments reopens
//! to every record.

use crate::support;

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, check_payload, payload_for};
use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

const SEGMENT: u64 = 64 * 1024;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

fn segment_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "LOCK")
        .collect();
    names.sort();
    names
}

fn replay_ids(dir: &std::path::Path, config: Config) -> (Wal, Vec<u64>) {
    let mut ids = Vec::new();
    let wal = Wal::open_and_replay(dir, config, Lsn::default(), |r| {
        ids.push(check_payload(r.kind, &r.payload).unwrap());
        Ok(())
    })
    .unwrap();
    (wal, ids)
}

#[test]
fn preparation_step_by_step() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let storage = FaultStorage::new();
        let wal = Wal::open(&dir, config(mode, &keys).storage(storage.arc())).unwrap();
        let (kind, payload) = payload_for(1);
        let lsn = wal.append(kind, &payload).unwrap();
        wal.flush(lsn).unwrap();
        // No space for the next segment: reported here, nothing left behind, log unharmed.
        storage.fail_nth(
            Op::FillZeros,
            storage.count(Op::FillZeros) + 1,
            Effect::Errno(libc::ENOSPC),
        );
        let err = wal.prepare_next_segment().unwrap_err();
        assert!(
            err.to_string().contains("0000000000010000.wal"),
            "{mode}: {err}"
        );
        assert_eq!(segment_names(&dir), ["0000000000000000.wal"], "{mode}");
        let (kind, payload) = payload_for(2);
        let lsn = wal.append(kind, &payload).unwrap();
        wal.flush(lsn).unwrap();
        // A failed preparation is not retried by itself (the writer would create the segment
        // when it gets there); the next request comes when a writer enters a segment.
        storage.heal();
        assert!(!wal.prepare_next_segment().unwrap(), "{mode}");
        drop(wal);
        let (wal, ids) = replay_ids(&dir, config(mode, &keys).storage(storage.arc()));
        assert_eq!(ids, [1, 2], "{mode}");
        // The reopened writer asks for the next segment with its first write.
        let (kind, payload) = payload_for(3);
        let lsn = wal.append(kind, &payload).unwrap();
        wal.flush(lsn).unwrap();
        assert!(wal.prepare_next_segment().unwrap(), "{mode}: prepared");
        assert!(
            !wal.prepare_next_segment().unwrap(),
            "{mode}: nothing more to prepare"
        );
        let next = dir.join("0000000000010000.wal");
        assert_eq!(std::fs::metadata(&next).unwrap().len(), SEGMENT, "{mode}");
        // A crash now: the prepared segment lies after the end; recovery removes it.
        let image = tmp.path().join("image");
        storage.crash_image(&dir, &image, &mut Rng::new(7), Tear::AnySectors);
        let (reopened, ids) = replay_ids(&image, config(mode, &keys));
        assert_eq!(ids, [1, 2, 3], "{mode}");
        assert_eq!(segment_names(&image), ["0000000000000000.wal"], "{mode}");
        reopened.close().unwrap();
        // Crossing into the prepared segment creates nothing.
        let creates = storage.count(Op::Create);
        let mut id = 4;
        while segment_names(&dir).len() < 3 || id < 40 {
            let (kind, payload) = payload_for(id);
            let lsn = wal.append(kind, &payload).unwrap();
            wal.flush(lsn).unwrap();
            if segment_names(&dir).len() == 2 && wal.end_lsn() > Lsn(SEGMENT) {
                break;
            }
            id += 1;
            assert!(id < 2000, "{mode}: never reached the next segment");
        }
        assert!(
            wal.end_lsn() > Lsn(SEGMENT),
            "{mode}: writing in the second segment"
        );
        assert_eq!(
            storage.count(Op::Create),
            creates,
            "{mode}: the prepared segment was used"
        );
        wal.close().unwrap();
        let (wal, ids) = replay_ids(&dir, config(mode, &keys));
        assert_eq!(ids, (1..=id).collect::<Vec<_>>(), "{mode}");
        wal.close().unwrap();
    }
}

#[test]
fn background_preparation_keeps_every_record() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let config = config(mode, &keys).prepare_segments(true);
        let wal = Wal::open(tmp.path(), config.clone()).unwrap();
        for id in 1..=300 {
            let (kind, payload) = payload_for(id);
            let lsn = wal.append(kind, &payload).unwrap();
            if id % 5 == 0 {
                wal.flush(lsn).unwrap();
            }
        }
        let end = wal.end_lsn();
        wal.close().unwrap();
        assert!(
            u64::from(end) > 3 * SEGMENT,
            "{mode}: several segments written"
        );
        let (wal, ids) = replay_ids(tmp.path(), config);
        assert_eq!(ids, (1..=300).collect::<Vec<_>>(), "{mode}");
        wal.close().unwrap();
    }
}
