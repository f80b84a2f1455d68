//! Random power-failure images, built by the fault storage from what was fsynced and the writes
//! since (each dropped, kept, or torn: a prefix or any subset of its 512-byte sectors, or any
//! subset of its 4 KiB blocks), always reopen to a prefix of the appended records holding every
//! record whose flush returned Ok (SyncMode::Durable), in every mode, including pagelevel
//! rewrites of partly filled pages at the default 8 KiB page size. In SyncMode::Buffered nothing
//! is promised across a machine crash, but the image must still open, to a correct prefix.
//!
//! Durable runs may end in a power cut inside a flush (its fdatasync never returns): those
//! images tear the flush's own page writes, including the rewrite of a partly filled page.
//!
//! WALCRYPT_CRASH_IMAGE_RUNS sets the runs per mode (default 8), WALCRYPT_CRASH_SEED the seed.

use crate::support;

use std::path::Path;

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, check_payload, env_usize, payload_for, seed_from_env};
use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

const EIO: i32 = libc::EIO;

fn config(mode: Mode, keys: &KeyRing, sync: SyncMode, page: u64) -> Config {
    // Small segments and a small buffer: many partial-page rewrites, segment rolls and
    // buffer-full writes that put unflushed pages on disk.
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(page)
        .segment_size(16 * page)
        .buffer_size(4 * page as usize)
        .prepare_segments(false)
}

/// Id of the record appended after each reopen.
const MARKER: u64 = 1 << 40;

/// Opens a crash image as a writer would (Wal::open, no replay), appends and flushes a marker
/// record, then reads the log with the Reader and with replay from the start: both must give
/// records 1..=m in order, byte-identical, then the marker. Returns m; an error opening is
/// returned.
fn reopen(dir: &Path, mode: Mode, keys: &KeyRing, page: u64, what: &str) -> walcrypt::Result<u64> {
    let wal = Wal::open(dir, config(mode, keys, SyncMode::Durable, page))?;
    let (kind, payload) = payload_for(MARKER);
    let lsn = wal.append(kind, &payload).unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
    let read =
        support::try_read_records(dir, keys).unwrap_or_else(|e| panic!("{what}: reader: {e}"));
    let ids: Vec<u64> = read
        .iter()
        .map(|r| check_payload(r.kind, &r.payload).unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect();
    let m = ids.len() as u64 - 1;
    let mut expected: Vec<u64> = (1..=m).collect();
    expected.push(MARKER);
    assert_eq!(
        ids, expected,
        "{what}: not a prefix in order, then the marker"
    );
    let mut replayed = Vec::new();
    let wal = Wal::open_and_replay(
        dir,
        config(mode, keys, SyncMode::Durable, page),
        Lsn::default(),
        |rec| {
            replayed.push(rec.payload);
            Ok(())
        },
    )
    .unwrap_or_else(|e| panic!("{what}: second reopen: {e}"));
    wal.close().unwrap();
    let payloads: Vec<Vec<u8>> = read.into_iter().map(|r| r.payload).collect();
    assert!(replayed == payloads, "{what}: replay and reader disagree");
    Ok(m)
}

struct Totals {
    images: usize,
    damaged_ops: usize,
    /// Runs that ended in a power cut inside a flush.
    cut_flushes: usize,
}

/// One run: appends with random flushes, taking crash images at random moments.
fn one_run(
    mode: Mode,
    sync: SyncMode,
    tear: Tear,
    page: u64,
    seed: u64,
    totals: &mut Totals,
) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let storage = FaultStorage::new();
    if let Some(keep) = std::env::var_os("WALCRYPT_KEEP_IMAGE") {
        keys.save(std::path::Path::new(&keep).with_extension("keys"))
            .unwrap();
    }
    let wal = Wal::open(&dir, config(mode, &keys, sync, page).storage(storage.arc())).unwrap();
    let mut acked = 0;
    let records = rng.range(20, 160);
    let mut image_no = 0;
    let mut check_image = |id: u64, acked: u64, rng: &mut Rng, totals: &mut Totals| {
        image_no += 1;
        let image = tmp.path().join(format!("image-{image_no}"));
        totals.damaged_ops += storage.crash_image(&dir, &image, rng, tear);
        totals.images += 1;
        let what = format!("{mode} {sync:?} {tear:?} image after {id}, acked {acked}");
        let keep = std::env::var_os("WALCRYPT_KEEP_IMAGE").map(std::path::PathBuf::from);
        if let Some(keep) = &keep {
            let _ = std::fs::remove_dir_all(keep);
            support::copy_dir(&image, keep);
        }
        match reopen(&image, mode, &keys, page, &what) {
            Ok(m) => {
                if sync == SyncMode::Durable && m < acked {
                    return Err(format!("{what}: only {m} records back"));
                }
            }
            Err(e) => return Err(format!("{what}: reopen failed: {e}")),
        }
        std::fs::remove_dir_all(&image).unwrap();
        Ok(())
    };
    for id in 1..=records {
        let (kind, payload) = payload_for(id);
        let lsn = wal.append(kind, &payload).unwrap();
        if rng.chance(30) {
            if sync == SyncMode::Durable && rng.chance(10) {
                // Power fails inside this flush: its page writes (a rewrite of the partly
                // filled page among them) reach the disk in part, its fdatasync never returns.
                storage.fail_from(Op::Sync, storage.count(Op::Sync) + 1, Effect::Errno(EIO));
                if wal.flush(lsn).is_ok() {
                    return Err(format!("{mode}: a flush returned Ok without its fdatasync"));
                }
                totals.cut_flushes += 1;
                for _ in 0..3 {
                    check_image(id, acked, &mut rng, totals)?;
                }
                return Ok(());
            }
            wal.flush(lsn).unwrap();
            acked = id;
        }
        if rng.chance(8) || id == records {
            check_image(id, acked, &mut rng, totals)?;
        }
    }
    drop(wal);
    Ok(())
}

fn sweep(modes: &[Mode], sync: SyncMode, tear: Tear, page: u64) {
    let seed = seed_from_env("WALCRYPT_CRASH_SEED");
    let runs = env_usize("WALCRYPT_CRASH_IMAGE_RUNS", 8);
    // Runs at the default page size take longer (more bytes per image): half as many.
    let runs = if page == DEFAULT_PAGE {
        runs.div_ceil(2)
    } else {
        runs
    };
    let mut totals = Totals {
        images: 0,
        damaged_ops: 0,
        cut_flushes: 0,
    };
    let only = std::env::var("WALCRYPT_CRASH_MODE").ok();
    for &mode in modes {
        if only.as_deref().is_some_and(|m| m != mode.name()) {
            continue;
        }
        for run in 0..runs {
            let run_seed = seed.wrapping_add(run as u64 * 7919);
            if let Err(e) = one_run(mode, sync, tear, page, run_seed, &mut totals) {
                panic!("{e}\nreplay with WALCRYPT_CRASH_SEED={seed} (run {run}, seed {run_seed})");
            }
        }
    }
    println!(
        "{sync:?} {tear:?} {page} B pages: {} crash images, {} unsynced writes dropped or \
         torn, {} runs cut inside a flush, seed {seed}",
        totals.images, totals.damaged_ops, totals.cut_flushes
    );
}

/// The default page size.
const DEFAULT_PAGE: u64 = 8192;
/// A small page size: more rewrites and segment rolls per record.
const SMALL_PAGE: u64 = 1024;

#[test]
fn durable_crash_images_keep_every_flushed_record() {
    sweep(&Mode::ALL, SyncMode::Durable, Tear::Whole, SMALL_PAGE);
}

#[test]
fn durable_crash_images_with_torn_writes_keep_every_flushed_record() {
    sweep(&Mode::ALL, SyncMode::Durable, Tear::Prefix, SMALL_PAGE);
}

#[test]
fn durable_crash_images_with_reordered_sectors_keep_every_flushed_record() {
    // Every mode rewrites a partial page with the same bytes for what it held (pagelevel
    // keeps the page's IV within an open), so sectors landing in any order never damage
    // earlier records.
    sweep(&Mode::ALL, SyncMode::Durable, Tear::AnySectors, SMALL_PAGE);
}

#[test]
fn durable_crash_images_at_the_default_page_size_keep_every_flushed_record() {
    // 8 KiB pages on a device that writes 4 KiB blocks atomically, in any order, and on one
    // that writes 512-byte sectors in any order.
    sweep(&Mode::ALL, SyncMode::Durable, Tear::Blocks4K, DEFAULT_PAGE);
    sweep(
        &[Mode::PageLevel],
        SyncMode::Durable,
        Tear::AnySectors,
        DEFAULT_PAGE,
    );
}

#[test]
fn buffered_crash_images_still_open_to_a_prefix() {
    sweep(&Mode::ALL, SyncMode::Buffered, Tear::Prefix, SMALL_PAGE);
    sweep(
        &[Mode::PageLevel],
        SyncMode::Buffered,
        Tear::AnySectors,
        DEFAULT_PAGE,
    );
}
