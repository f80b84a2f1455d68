//! A partly filled page is rewritten when more records join it. Whatever part of that rewrite
//! reaches the disk before power fails — any subset of its 4 KiB blocks (in either order), any
//! subset of its 512-byte sectors, or a prefix of its bytes (a short write) — the records an
//! earlier flush made durable survive, in every mode, at the default 8 KiB page size: the log
//! opens (reader, replay, writer) to a prefix holding every one of them, and the writer
//! continues after it.
//!
//! This holds because every mode rewrites the durable part of a page with identical bytes;
//! pagelevel keeps a page's IV for all its rewrites within one open and encrypts only the
//! filled part of the body.

use crate::support;

use std::os::unix::fs::FileExt;
use std::path::Path;

use support::Rng;
use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

const PAGE: u64 = 8192;
const SECTOR: usize = 512;
const BLOCK: usize = 4096;
const SEGMENT_FILE: &str = "0000000000000000.wal";

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(8 * PAGE)
}

/// Payload length of the flushed records: 112 bytes with the record header in every mode.
fn small_len(mode: Mode) -> usize {
    match mode {
        Mode::PerRecord => 80,
        // 32-byte header and a 16-byte tag.
        Mode::PerRecordGcm => 64,
        _ => 100,
    }
}

fn payload(id: u64, len: usize) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.resize(len.max(8), (id as u8) ^ 0x5A);
    p
}

fn page1(dir: &Path) -> Vec<u8> {
    let mut page = vec![0u8; PAGE as usize];
    let file = std::fs::File::open(dir.join(SEGMENT_FILE)).unwrap();
    file.read_exact_at(&mut page, PAGE).unwrap();
    page
}

/// A log in `base` holding `flushed` records of 112 B (each flushed), and the two images of
/// page 1: before and after a flush of one more record of `next_len` bytes.
struct Story {
    base: tempfile::TempDir,
    old: Vec<u8>,
    new: Vec<u8>,
    flushed: u64,
    next_len: usize,
}

fn story(mode: Mode, keys: &KeyRing, flushed: u64, next_len: usize) -> Story {
    let live = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let wal = Wal::open(live.path(), config(mode, keys)).unwrap();
    for id in 1..=flushed {
        let lsn = wal.append(1, &payload(id, small_len(mode))).unwrap();
        wal.flush(lsn).unwrap();
    }
    support::copy_dir(live.path(), &base.path().join("log"));
    let old = page1(live.path());
    // The next record's write-out, as a crash during its flush finds it: the writer's drop
    // writes the page and stops there (a flush that returns goes on to write the page again
    // with a header vouching for the record).
    wal.append(1, &payload(flushed + 1, next_len)).unwrap();
    drop(wal);
    let new = page1(live.path());
    assert!(old != new, "{mode}: the flush rewrote page 1");
    Story {
        base,
        old,
        new,
        flushed,
        next_len,
    }
}

/// Puts `torn` as page 1 into a copy of the story's log, then checks the reader, replay and a
/// writer: records 1..=flushed (and perhaps the unacknowledged next one, whole) come back.
fn check(mode: Mode, keys: &KeyRing, s: &Story, torn: &[u8], what: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    support::copy_dir(&s.base.path().join("log"), &dir);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(SEGMENT_FILE))
        .unwrap();
    file.write_all_at(torn, PAGE).unwrap();
    drop(file);
    let what = format!("{mode} {} + {} B, {what}", s.flushed, s.next_len);
    let expect = |payloads: &[Vec<u8>], marker: bool| {
        let n = payloads.len() as u64 - marker as u64;
        assert!(
            n == s.flushed || n == s.flushed + 1,
            "{what}: {n} records back, {} were flushed",
            s.flushed
        );
        for (i, p) in payloads.iter().enumerate().take(n as usize) {
            let id = i as u64 + 1;
            let len = if id > s.flushed {
                s.next_len
            } else {
                small_len(mode)
            };
            assert_eq!(p, &payload(id, len), "{what}: record {id} altered");
        }
    };
    let read =
        support::try_read_records(&dir, keys).unwrap_or_else(|e| panic!("{what}: reader: {e}"));
    let read: Vec<Vec<u8>> = read.into_iter().map(|r| r.payload).collect();
    expect(&read, false);
    let mut replayed = Vec::new();
    let wal = Wal::open_and_replay(&dir, config(mode, keys), Lsn::default(), |r| {
        replayed.push(r.payload);
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{what}: open_and_replay: {e}"));
    assert_eq!(replayed, read, "{what}: replay and reader disagree");
    let marker = payload(1 << 40, 300);
    let lsn = wal.append(2, &marker).unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();
    let after = support::try_read_records(&dir, keys)
        .unwrap_or_else(|e| panic!("{what}: reader after the writer continued: {e}"));
    let after: Vec<Vec<u8>> = after.into_iter().map(|r| r.payload).collect();
    expect(&after, true);
    assert_eq!(
        after.last(),
        Some(&marker),
        "{what}: the new record follows"
    );
    assert_eq!(
        after[..after.len() - 1],
        read[..],
        "{what}: the prefix changed"
    );
}

/// Page 1 with the units of `unit` bytes chosen by `take_new` from the new image.
fn mix(s: &Story, unit: usize, take_new: impl Fn(usize) -> bool) -> Vec<u8> {
    let mut torn = s.old.clone();
    for (i, chunk) in torn.chunks_mut(unit).enumerate() {
        if take_new(i) {
            chunk.copy_from_slice(&s.new[i * unit..i * unit + chunk.len()]);
        }
    }
    torn
}

fn every_tear(mode: Mode, flushed: u64, next_len: usize) {
    let keys = KeyRing::generate().unwrap();
    let s = story(mode, &keys, flushed, next_len);
    for blocks in 0..4usize {
        let torn = mix(&s, BLOCK, |i| blocks & (1 << i) != 0);
        check(
            mode,
            &keys,
            &s,
            &torn,
            &format!("4 KiB blocks from new {blocks:02b}"),
        );
    }
    let sectors = PAGE as usize / SECTOR;
    for k in 0..=sectors {
        let torn = mix(&s, SECTOR, |i| i < k);
        check(mode, &keys, &s, &torn, &format!("first {k} sectors new"));
        let torn = mix(&s, SECTOR, |i| i >= k);
        check(mode, &keys, &s, &torn, &format!("sectors from {k} on new"));
    }
    let mut rng = Rng::new(flushed * 1000 + next_len as u64);
    for _ in 0..24 {
        let mask = rng.next_u64();
        let torn = mix(&s, SECTOR, |i| mask & (1 << i) != 0);
        check(mode, &keys, &s, &torn, &format!("sectors {mask:016b} new"));
    }
    // A short write: a prefix of the new image's bytes, then nothing (as before ENOSPC).
    for cut in [
        1, 47, 48, 100, 511, 512, 3000, 4095, 4096, 5000, 7888, 8000, 8191,
    ] {
        let mut torn = s.old.clone();
        torn[..cut].copy_from_slice(&s.new[..cut]);
        check(
            mode,
            &keys,
            &s,
            &torn,
            &format!("short write of {cut} bytes"),
        );
    }
}

#[test]
fn flushed_records_survive_every_torn_or_short_rewrite_of_their_page() {
    for mode in Mode::ALL {
        // Durable part ending in the second 4 KiB block; the new record lands there.
        every_tear(mode, 70, 100);
        // Durable part ending in the first block; the new record spans both blocks.
        every_tear(mode, 30, 2000);
    }
}
