//! An I/O error while an open zeroes the rest of the tail segment (writing zeros over a torn
//! tail, or extending a segment file cut short) fails that open with an error naming the
//! segment file and the offset. Nothing acknowledged is lost: a later open, of the files as
//! they are or of a crash image taken right after the failure, recovers every acknowledged
//! record and goes on writing.

use crate::support;

use std::os::unix::fs::FileExt;
use std::path::Path;

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, payload, read_all};
use walcrypt::inspect::segment_file_name;
use walcrypt::{Config, Error, KeyRing, Lsn, Mode, SyncMode, Wal};

const SEGMENT: u64 = 64 * 1024;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

/// A log of durable records whose first segment holds garbage after the end (`cut`: and the
/// file then ends early). Returns the records.
fn torn_log(dir: &Path, mode: Mode, keys: &KeyRing, cut: bool) -> Vec<(Lsn, u8, Vec<u8>)> {
    let wal = Wal::open(dir, config(mode, keys)).unwrap();
    for i in 0..8 {
        let lsn = wal.append(1, &payload(40 + i, 500)).unwrap();
        wal.flush(lsn).unwrap();
    }
    wal.close().unwrap();
    let records = read_all(dir, Some(keys.clone()));
    let end = records.last().unwrap().0.0 + 600;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(segment_file_name(Lsn(0))))
        .unwrap();
    file.write_all_at(&payload(98, 10_000), end).unwrap();
    if cut {
        file.set_len(end + 5_000).unwrap();
    }
    file.sync_all().unwrap();
    records
}

/// Opens with `fault` planned; the open must fail naming the segment and an offset.
fn failing_open(dir: &Path, mode: Mode, keys: &KeyRing, storage: &FaultStorage, what: &str) {
    let err = Wal::open(dir, config(mode, keys).storage(storage.arc()))
        .err()
        .unwrap_or_else(|| panic!("{what}: the open succeeded"));
    assert_eq!(storage.injected(), 1, "{what}: {err}");
    let segment = dir.join(segment_file_name(Lsn(0)));
    match &err {
        Error::Io { path, source, .. } => {
            assert_eq!(path, &segment, "{what}: {err}");
            assert!(source.to_string().contains("offset"), "{what}: {err}");
        }
        other => panic!("{what}: {other}"),
    }
    assert!(err.to_string().contains("offset"), "{what}: {err}");
}

/// A later open recovers `records` and appends after them.
fn recovers(dir: &Path, mode: Mode, keys: &KeyRing, records: &[(Lsn, u8, Vec<u8>)], what: &str) {
    let wal = Wal::open(dir, config(mode, keys)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let lsn = wal.append(2, b"after").unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();
    let mut got = read_all(dir, Some(keys.clone()));
    assert_eq!(got.pop().map(|r| r.2), Some(b"after".to_vec()), "{what}");
    assert!(got == records, "{what}: the acknowledged records differ");
}

#[test]
fn a_failed_zero_write_fails_the_open_and_a_later_open_recovers() {
    let mut rng = Rng::new(0x2E80);
    for mode in Mode::ALL {
        for effect in [Effect::Errno(libc::EIO), Effect::ShortWrite(libc::ENOSPC)] {
            let what = format!("{mode}, {effect:?} on the first zero write");
            let dir = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let records = torn_log(dir.path(), mode, &keys, false);
            let storage = FaultStorage::new();
            storage.fail_nth(Op::Write, 1, effect);
            failing_open(dir.path(), mode, &keys, &storage, &what);
            let image = tempfile::tempdir().unwrap();
            storage.crash_image(dir.path(), image.path(), &mut rng, Tear::AnySectors);
            recovers(
                image.path(),
                mode,
                &keys,
                &records,
                &format!("{what}, crash image"),
            );
            recovers(dir.path(), mode, &keys, &records, &what);
        }
    }
}

#[test]
fn a_failed_zero_fill_of_a_file_cut_short_fails_the_open_and_a_later_open_recovers() {
    for mode in Mode::ALL {
        let what = format!("{mode}, EIO extending the cut file");
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let records = torn_log(dir.path(), mode, &keys, true);
        let storage = FaultStorage::new();
        storage.fail_nth(Op::FillZeros, 1, Effect::Errno(libc::EIO));
        failing_open(dir.path(), mode, &keys, &storage, &what);
        recovers(dir.path(), mode, &keys, &records, &what);
    }
}
