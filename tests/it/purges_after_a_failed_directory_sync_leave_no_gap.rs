//! A purge's directory sync fails, so the segment it removed may come back after a power cut;
//! a second purge removes the next segment and its directory sync fails too. A power cut then
//! may keep the second removal and not the first: unless every removal was made durable before
//! the next, the image lacks a segment in the middle of the log, and neither the log nor its
//! checkpoint opens. Every image must open, hold every record from its oldest segment on, and
//! take new records, in every mode and with recycling on and off.
//!
//! Each purge's failure is placed at its first and at its second directory sync, so the test
//! does not depend on how many syncs a purge makes before its first removal. Fixed seeds: the
//! images that keep the later removal alone come up in every run.

use crate::support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::stepping::{Step, Stepping};
use support::{Rng, crash_config, payload_for};
use walcrypt::storage::Storage;
use walcrypt::{Checkpoint, Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;
const EIO: i32 = 5;
const IMAGES: u64 = 12;

fn config(mode: Mode, keys: &KeyRing, recycle: usize) -> Config {
    crash_config(mode, keys, SyncMode::Durable, PAGE).recycle_segments(recycle)
}

fn id_of(kind: u8, payload: &[u8], what: &str) -> u64 {
    let id = u64::from_le_bytes(payload[..8].try_into().unwrap());
    assert!(
        payload_for(id) == (kind, payload.to_vec()),
        "{what}: record {id} altered"
    );
    id
}

/// Appends records until the log reaches `segments` segments, and flushes them. Returns
/// (LSN, id) of each.
fn fill(wal: &Wal, segments: u64) -> Vec<(Lsn, u64)> {
    let mut appended = Vec::new();
    let mut id = 1;
    while u64::from(wal.end_lsn()) < segments * SEGMENT {
        let (kind, payload) = payload_for(id);
        appended.push((wal.append(kind, &payload).unwrap(), id));
        id += 1;
    }
    wal.flush(wal.end_lsn()).unwrap();
    appended
}

/// Opens the crash image `out` (its checkpoint, then the log), appends and flushes one record,
/// and checks that it holds every record of `appended` from its oldest on, and nothing else.
/// Returns where it starts.
fn check_image(
    out: &Path,
    config: Config,
    keys: &KeyRing,
    appended: &[(Lsn, u64)],
    what: &str,
) -> Lsn {
    let what = format!("{what} (files {:?})", segment_names(out));
    Checkpoint::read(out, &config).unwrap_or_else(|e| panic!("{what}: checkpoint: {e}"));
    let wal = Wal::open(out, config).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let lsn = wal
        .append(7, b"after the power cut")
        .unwrap_or_else(|e| panic!("{what}: append after reopen: {e}"));
    wal.flush(lsn)
        .unwrap_or_else(|e| panic!("{what}: flush after reopen: {e}"));
    wal.close().unwrap();
    let read: Vec<(Lsn, u64)> = Reader::open(out, Some(keys.clone()))
        .unwrap()
        .records_from(Lsn::default())
        .map(|r| r.unwrap_or_else(|e| panic!("{what}: read: {e}")))
        .filter(|r| r.lsn != lsn)
        .map(|r| (r.lsn, id_of(r.kind, &r.payload, &what)))
        .collect();
    let from = read.first().map_or(Lsn(u64::MAX), |r| r.0);
    let expected: Vec<(Lsn, u64)> = appended
        .iter()
        .copied()
        .filter(|(l, _)| *l >= from)
        .collect();
    assert_eq!(read, expected, "{what}: records lost or altered");
    from
}

/// The name of the segment file starting at `start`.
fn segment_name(start: u64) -> String {
    format!("{start:016X}.wal")
}

/// Two purges whose directory syncs fail (the `first`th and `second`th of each), then power
/// cuts. Returns how many images brought back a segment a purge had removed.
fn scenario(mode: Mode, recycle: usize, first: u64, second: u64) -> u64 {
    let what = format!("{mode}, recycle {recycle}, failing syncs {first} and {second}");
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let fault = FaultStorage::new();
    let wal = Wal::open(&dir, config(mode, &keys, recycle).storage(fault.arc())).unwrap();
    let appended = fill(&wal, 6);
    for (n, limit) in [(first, 2 * SEGMENT), (second, 3 * SEGMENT)] {
        fault.fail_nth(
            Op::SyncDir,
            fault.count(Op::SyncDir) + n,
            Effect::Errno(EIO),
        );
        let purged = wal.purge_before(Lsn(limit));
        assert!(
            purged.is_err(),
            "{what}: the purge to {limit} was meant to fail"
        );
        fault.heal();
    }
    let mut brought_back = 0;
    for image in 0..IMAGES {
        let what = format!("{what}, image {image}");
        let out = tmp.path().join(format!("image-{image}"));
        let mut rng = Rng::new(0x9e37_79b9 ^ (first << 8) ^ (second << 16) ^ image);
        fault.crash_image_with_names(&dir, &out, &mut rng, Tear::AnySectors);
        let names = segment_names(&out);
        if names.contains(&segment_name(0)) || names.contains(&segment_name(SEGMENT)) {
            brought_back += 1;
        }
        let from = check_image(&out, config(mode, &keys, recycle), &keys, &appended, &what);
        assert!(
            from < Lsn(3 * SEGMENT),
            "{what}: the log starts at {from}, past what the purges may have removed"
        );
    }
    brought_back
}

#[test]
fn purges_after_a_failed_directory_sync_leave_no_gap() {
    for mode in Mode::ALL {
        for recycle in [0, 4] {
            let mut brought_back = 0;
            for first in [1, 2] {
                for second in [1, 2] {
                    brought_back += scenario(mode, recycle, first, second);
                }
            }
            // The failed syncs left removals a power cut can take back: the images test them.
            assert!(
                brought_back > 0,
                "{mode}, recycle {recycle}: no image brought back a removed segment"
            );
        }
    }
}

/// Another purge, played by a storage hook: just before the purge under test removes the oldest
/// segment, the other one removes it and has not synced the directory yet. The purge under
/// test finds it gone and goes on to the next segment; at the directory sync after that
/// removal, crash images are taken.
struct OtherPurge {
    fault: FaultStorage,
    dir: std::path::PathBuf,
    /// 0: waiting for the removal of the oldest segment; 1: waiting for the next directory
    /// sync after the purge's next removal; 2: done.
    phase: Mutex<u32>,
    removed_next: Mutex<bool>,
    images: Mutex<Vec<std::path::PathBuf>>,
    scratch: std::path::PathBuf,
}

impl Step for OtherPurge {
    fn before(&self, step: &str) {
        let mut phase = self.phase.lock().unwrap();
        match *phase {
            0 if step == format!("remove {}", segment_name(0)) => {
                self.fault.remove(&self.dir.join(segment_name(0))).unwrap();
                *phase = 1;
            }
            1 if step == format!("remove {}", segment_name(SEGMENT)) => {
                *self.removed_next.lock().unwrap() = true;
            }
            1 if step == "directory sync" && *self.removed_next.lock().unwrap() => {
                let mut images = self.images.lock().unwrap();
                for image in 0..IMAGES {
                    let out = self.scratch.join(format!("beside-{image}"));
                    let mut rng = Rng::new(0x00be_51de ^ image);
                    self.fault
                        .crash_image_with_names(&self.dir, &out, &mut rng, Tear::AnySectors);
                    images.push(out);
                }
                *phase = 2;
            }
            _ => {}
        }
    }
}

#[test]
fn a_purge_syncs_a_removal_another_purge_made_before_it_removes_the_next_segment() {
    for mode in [Mode::Plaintext, Mode::PerRecordGcm] {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wal");
        let fault = FaultStorage::new();
        let other = Arc::new(OtherPurge {
            fault: fault.clone(),
            dir: dir.clone(),
            phase: Mutex::new(u32::MAX),
            removed_next: Mutex::new(false),
            images: Mutex::new(Vec::new()),
            scratch: tmp.path().to_path_buf(),
        });
        let storage: Arc<dyn Storage> = Arc::new(Stepping(fault.clone(), other.clone()));
        let wal = Wal::open(&dir, config(mode, &keys, 0).storage(storage)).unwrap();
        let appended = fill(&wal, 4);
        *other.phase.lock().unwrap() = 0;
        assert_eq!(wal.purge_before(Lsn(2 * SEGMENT)).unwrap(), 1, "{mode}");
        assert_eq!(
            *other.phase.lock().unwrap(),
            2,
            "{mode}: the other purge never ran"
        );
        drop(wal);
        for out in other.images.lock().unwrap().iter() {
            let what = format!("{mode}, {}", out.display());
            check_image(out, config(mode, &keys, 0), &keys, &appended, &what);
        }
    }
}

/// The segment files of `dir`, sorted.
fn segment_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    names
}
