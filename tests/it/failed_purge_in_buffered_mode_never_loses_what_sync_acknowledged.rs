//! Buffered mode, small pages: a purge fails halfway (its second unlink or rename fails), the
//! log appends once more and `sync()` returns Ok, then the power fails. Every record appended
//! before that `sync()` must come back, from the oldest segment the purge left on, in every
//! mode, with recycling on and off; and the reopened log must take new records.
//!
//! A purge once took the segments it meant to remove off the list of files to fdatasync before
//! removing them, and did not put them back when it failed: `sync()` then skipped them, and a
//! power cut left a log whose oldest segment had never been synced. Recovery started there,
//! took the hole for a torn tail and cut every later segment away.
//!
//! WALCRYPT_CRASH_SEED sets the seed.

use crate::support;

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, crash_config, payload_for, seed_from_env};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;
const EIO: i32 = 5;

fn config(mode: Mode, keys: &KeyRing, recycle: usize) -> Config {
    crash_config(mode, keys, SyncMode::Buffered, PAGE).recycle_segments(recycle)
}

/// Small records, so every segment holds several and some span pages.
fn small(id: u64) -> (u8, Vec<u8>) {
    let (kind, mut payload) = payload_for(id);
    payload.truncate(8 + (id as usize * 37) % 300);
    (kind, payload)
}

fn check_small(kind: u8, payload: &[u8]) -> u64 {
    let id = u64::from_le_bytes(payload[..8].try_into().unwrap());
    let (k, expected) = small(id);
    assert!(k == kind && expected == payload, "record {id} altered");
    id
}

fn scenario(mode: Mode, recycle: usize, fail: Op, seed: u64, image: u32) {
    let what = format!("{mode}, recycle {recycle}, failing {fail:?}, image {image}");
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let fault = FaultStorage::new();
    let wal = Wal::open(&dir, config(mode, &keys, recycle).storage(fault.arc())).unwrap();
    let mut appended = Vec::new();
    let mut id = 1;
    while u64::from(wal.end_lsn()) < 6 * SEGMENT {
        let (kind, payload) = small(id);
        appended.push((wal.append(kind, &payload).unwrap(), id));
        id += 1;
        if id % 5 == 0 {
            wal.flush(wal.end_lsn()).unwrap();
        }
    }
    wal.flush(wal.end_lsn()).unwrap();
    // The purge's second removal fails, whichever way it removes (unlink or rename to a free
    // file).
    fault.fail_nth(fail, fault.count(fail) + 2, Effect::Errno(EIO));
    let purged = wal.purge_before(Lsn(3 * SEGMENT));
    assert!(purged.is_err(), "{what}: the purge was meant to fail");
    fault.heal();
    let (kind, payload) = small(id);
    appended.push((wal.append(kind, &payload).unwrap(), id));
    wal.sync()
        .unwrap_or_else(|e| panic!("{what}: sync after the failed purge: {e}"));
    let acknowledged = appended.clone();

    let out = tmp.path().join("image");
    let mut rng = Rng::new(seed ^ u64::from(image));
    fault.crash_image_with_names(&dir, &out, &mut rng, Tear::AnySectors);
    drop(wal);

    let wal = Wal::open(&out, config(mode, &keys, recycle))
        .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let lsn = wal
        .append(7, b"after the power cut")
        .unwrap_or_else(|e| panic!("{what}: append after reopen: {e}"));
    wal.flush(lsn)
        .unwrap_or_else(|e| panic!("{what}: flush after reopen: {e}"));
    wal.close().unwrap();
    let reader = Reader::open(&out, Some(keys)).unwrap();
    let read: Vec<(Lsn, u64)> = reader
        .records_from(Lsn::default())
        .map(|r| r.unwrap_or_else(|e| panic!("{what}: read: {e}")))
        .filter(|r| r.kind != 7 || r.payload != b"after the power cut")
        .map(|r| (r.lsn, check_small(r.kind, &r.payload)))
        .collect();
    let first = read
        .first()
        .unwrap_or_else(|| panic!("{what}: nothing read back"))
        .0;
    assert!(
        first < Lsn(4 * SEGMENT),
        "{what}: the log starts at {first}, past the oldest segment the purge may have left"
    );
    let expected: Vec<(Lsn, u64)> = acknowledged
        .into_iter()
        .filter(|(lsn, _)| *lsn >= first)
        .collect();
    assert_eq!(
        read, expected,
        "{what}: records acknowledged by sync() lost or altered"
    );
}

#[test]
fn failed_purge_in_buffered_mode_never_loses_what_sync_acknowledged() {
    let seed = seed_from_env("WALCRYPT_CRASH_SEED");
    println!("seed {seed}");
    for mode in Mode::ALL {
        for (recycle, fail) in [(0, Op::Remove), (4, Op::Rename)] {
            for image in 0..3 {
                scenario(mode, recycle, fail, seed, image);
            }
        }
    }
}
