//! A power cut left a Buffered log whose end lies two or more segments before its last segment
//! file (the files were made, their records never synced). The next open removes those later
//! segments; here its directory syncs fail, once or twice, in two opens one after the other,
//! and the power fails again. Unless each removal was made durable before the next, the image
//! can keep the removal of a middle segment and bring back a later one: a gap after the end of
//! the log, and a log that no longer opens. Every image must open, hold a prefix of what was
//! appended, and take new records.
//!
//! Each open's failure is placed at each of its first directory syncs, so the test does not
//! depend on how many an open makes before its first removal. Fixed seeds.

use crate::support;

use std::path::Path;

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, crash_config, payload_for};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;
const EIO: i32 = 5;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    crash_config(mode, keys, SyncMode::Buffered, PAGE).recycle_segments(0)
}

fn segment_files(dir: &Path) -> Vec<u64> {
    let mut starts: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let start = name.strip_suffix(".wal")?;
            u64::from_str_radix(start, 16).ok()
        })
        .collect();
    starts.sort();
    starts
}

/// The records of the log in `dir`, checked against what their ids say they hold.
fn records(dir: &Path, keys: &KeyRing, what: &str) -> Vec<(Lsn, u64)> {
    Reader::open(dir, Some(keys.clone()))
        .unwrap_or_else(|e| panic!("{what}: read: {e}"))
        .records_from(Lsn::default())
        .map(|r| r.unwrap_or_else(|e| panic!("{what}: read: {e}")))
        .filter(|r| r.kind != 7)
        .map(|r| {
            let id = u64::from_le_bytes(r.payload[..8].try_into().unwrap());
            assert!(
                payload_for(id) == (r.kind, r.payload.clone()),
                "{what}: record {id} altered"
            );
            (r.lsn, id)
        })
        .collect()
}

/// A crash image of a Buffered log of five segments whose records after the first segment
/// were never synced, chosen so that at least two segment files lie after its end. Returns
/// the image's directory and what was appended.
fn log_with_segments_after_its_end(
    mode: Mode,
    keys: &KeyRing,
    root: &Path,
) -> (std::path::PathBuf, Vec<(Lsn, u64)>) {
    let dir = root.join("wal");
    let fault = FaultStorage::new();
    let wal = Wal::open(&dir, config(mode, keys).storage(fault.arc())).unwrap();
    let mut appended = Vec::new();
    let mut id = 1;
    let mut synced = false;
    while u64::from(wal.end_lsn()) < 5 * SEGMENT {
        let (kind, payload) = payload_for(id);
        appended.push((wal.append(kind, &payload).unwrap(), id));
        id += 1;
        wal.flush(wal.end_lsn()).unwrap();
        if !synced && u64::from(wal.end_lsn()) > SEGMENT / 2 {
            wal.sync().unwrap();
            synced = true;
        }
    }
    for seed in 0..200 {
        let image = root.join(format!("crashed-{seed}"));
        fault.crash_image_with_names(&dir, &image, &mut Rng::new(seed), Tear::Whole);
        let files = segment_files(&image);
        let read = records(&image, keys, &format!("{mode}: crash image {seed}"));
        let end_segment = read
            .last()
            .map_or(0, |r| u64::from(r.0) / SEGMENT * SEGMENT);
        if files.iter().filter(|&&s| s > end_segment).count() >= 2 {
            return (image, appended);
        }
        std::fs::remove_dir_all(&image).unwrap();
    }
    panic!("{mode}: no crash image with two segments after its end in 200 seeds");
}

fn scenario(mode: Mode, first: u64, second: u64) {
    let what = format!("{mode}, failing directory syncs {first} and {second}");
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, appended) = log_with_segments_after_its_end(mode, &keys, tmp.path());
    let before = segment_files(&dir);
    // Two opens, each failing in a directory sync.
    let fault = FaultStorage::new();
    let mut failed = 0;
    for n in [first, second] {
        fault.fail_nth(
            Op::SyncDir,
            fault.count(Op::SyncDir) + n,
            Effect::Errno(EIO),
        );
        match Wal::open(&dir, config(mode, &keys).storage(fault.arc())) {
            Ok(wal) => drop(wal),
            Err(_) => failed += 1,
        }
        fault.heal();
    }
    assert!(failed > 0, "{what}: no open failed");
    let after = segment_files(&dir);
    for image in 0..8u64 {
        let what = format!("{what}, image {image} (files before {before:x?}, after {after:x?})");
        let out = tmp.path().join(format!("image-{image}"));
        let mut rng = Rng::new(0x51ed ^ (first << 8) ^ (second << 16) ^ image);
        fault.crash_image_with_names(&dir, &out, &mut rng, Tear::Whole);
        let files = segment_files(&out);
        let wal = Wal::open(&out, config(mode, &keys))
            .unwrap_or_else(|e| panic!("{what}, image files {files:x?}: reopen: {e}"));
        let lsn = wal
            .append(7, b"after the power cut")
            .unwrap_or_else(|e| panic!("{what}: append after reopen: {e}"));
        wal.sync()
            .unwrap_or_else(|e| panic!("{what}: sync after reopen: {e}"));
        wal.close().unwrap();
        let read = records(&out, &keys, &what);
        assert!(!read.is_empty(), "{what}: the synced records are gone");
        assert!(
            read.iter().all(|r| r.0 < lsn),
            "{what}: a record after the new one"
        );
        assert_eq!(
            read,
            appended[..read.len()],
            "{what}: not a prefix of what was appended"
        );
    }
}

#[test]
fn open_removing_segments_after_the_end_leaves_no_gap() {
    for mode in [Mode::Plaintext, Mode::PerRecord, Mode::PageLevel] {
        for first in 1..=4 {
            for second in 1..=2 {
                scenario(mode, first, second);
            }
        }
    }
}
