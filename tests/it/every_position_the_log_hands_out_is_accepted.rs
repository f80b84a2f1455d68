//! Every position the library hands out — `append`'s LSNs, `end_lsn()`, `flushed_lsn()`, a
//! record's `end_lsn`, the end a reopen's recovery summary reports — is accepted by every call
//! that takes one: `Reader::records_from`, `Follower::open`, `Wal::open_and_replay`,
//! `purge_before` and `flush`, in every mode, also where it falls on a page or segment boundary
//! (records are sized here to end exactly on page boundaries, and so on segment boundaries).
//! Each call yields exactly the records from that position on. A checkpoint past the end of
//! the log, or on a log that does not exist, is an error naming both positions, never a new
//! log below the checkpoint.
//!
//! WALCRYPT_POSITION_SEED sets the seed.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;

use support::{Rng, seed_from_env};
use walcrypt::{Config, Error, Follower, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .prepare_segments(false)
        .recycle_segments(0)
}

fn payload(id: u64, len: usize) -> Vec<u8> {
    let mut p = vec![(id % 251) as u8; len.max(8)];
    p[..8].copy_from_slice(&id.to_le_bytes());
    p.truncate(len.max(8));
    p
}

/// Writes a log in `dir` whose records often end exactly on page (and segment) boundaries,
/// with reopens in between (one life appending nothing), and returns every position the API
/// handed out.
fn build(mode: Mode, keys: &KeyRing, dir: &Path, seed: u64) -> BTreeSet<Lsn> {
    let mut rng = Rng::new(seed);
    let mut handed = BTreeSet::new();
    let mut id = 0u64;
    for life in 0..4 {
        let wal = Wal::open(dir, config(mode, keys)).unwrap();
        if let Some(summary) = wal.recovery_summary() {
            handed.insert(summary.end);
        }
        handed.insert(wal.end_lsn());
        // The bytes a record adds beyond its payload, measured on one that stays in its page.
        let mut overhead = None;
        // One life appends nothing: a pagelevel writer's open puts a resume record on a fresh
        // page, and the end it hands out, right after that record, is where the next open
        // resumes from, on the page after.
        let appends = if life == 1 { 0 } else { 40 + life * 10 };
        for _ in 0..appends {
            id += 1;
            let end = u64::from(wal.end_lsn());
            let room = PAGE - end % PAGE;
            let len = match overhead {
                Some(o) if room > o + 8 && rng.chance(35) => (room - o) as usize,
                _ => rng.range(8, 700) as usize,
            };
            let lsn = wal.append((id % 200) as u8, &payload(id, len)).unwrap();
            let after = u64::from(wal.end_lsn());
            if overhead.is_none()
                && after - u64::from(lsn) < PAGE / 2
                && lsn.0 / PAGE == after / PAGE
            {
                overhead = Some(after - u64::from(lsn) - len as u64);
            }
            handed.insert(lsn);
            handed.insert(wal.end_lsn());
            if rng.chance(30) {
                wal.flush(wal.end_lsn()).unwrap();
                handed.insert(wal.flushed_lsn());
            }
        }
        wal.flush(wal.end_lsn()).unwrap();
        handed.insert(wal.flushed_lsn());
        handed.insert(wal.end_lsn());
        wal.close().unwrap();
    }
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    for r in reader.records_from(Lsn::default()) {
        let r = r.unwrap();
        handed.insert(r.lsn);
        handed.insert(r.end_lsn);
    }
    handed
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Reads and follows from `p`; with `reopen`, also replays a copy of the log from `p`, then
/// flushes, purges and writes on there.
fn check_position(
    mode: Mode,
    keys: &KeyRing,
    dir: &Path,
    all: &[Lsn],
    p: Lsn,
    scratch: &Path,
    reopen: bool,
) {
    let what = format!("{mode}: position {p}");
    let expected: Vec<Lsn> = all.iter().copied().filter(|l| *l >= p).collect();

    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    let read: Vec<Lsn> = reader
        .records_from(p)
        .map(|r| r.map(|r| r.lsn))
        .collect::<walcrypt::Result<_>>()
        .unwrap_or_else(|e| panic!("{what}: Reader::records_from: {e}"));
    assert_eq!(read, expected, "{what}: Reader::records_from");

    let mut follower = Follower::open(dir, Some(keys.clone()), p)
        .unwrap_or_else(|e| panic!("{what}: Follower::open: {e}"));
    let mut followed = Vec::new();
    while let Some(r) = follower
        .poll()
        .unwrap_or_else(|e| panic!("{what}: Follower::next: {e}"))
    {
        followed.push(r.lsn);
    }
    assert_eq!(followed, expected, "{what}: Follower from the files");
    if !reopen {
        return;
    }

    let copy = scratch.join(format!("{:x}", u64::from(p)));
    copy_dir(dir, &copy);
    let mut replayed = Vec::new();
    let wal = Wal::open_and_replay(&copy, config(mode, keys), p, |r| {
        replayed.push(r.lsn);
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{what}: open_and_replay: {e}"));
    assert_eq!(replayed, expected, "{what}: open_and_replay");
    wal.flush(p)
        .unwrap_or_else(|e| panic!("{what}: flush: {e}"));
    wal.purge_before(p)
        .unwrap_or_else(|e| panic!("{what}: purge_before: {e}"));
    let lsn = wal.append(1, b"after").unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();
    std::fs::remove_dir_all(&copy).unwrap();
}

fn every_position_accepted(mode: Mode) {
    let seed = seed_from_env("WALCRYPT_POSITION_SEED");
    println!("{mode}: seed {seed}");
    {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wal");
        let handed = build(mode, &keys, &dir, seed);
        let reader = Reader::open(&dir, Some(keys.clone())).unwrap();
        let all: Vec<Lsn> = reader
            .records_from(Lsn::default())
            .map(|r| r.unwrap().lsn)
            .collect();
        let on_boundary = handed.iter().filter(|l| l.0 % PAGE == 0).count();
        assert!(
            on_boundary >= 3,
            "{mode}: only {on_boundary} positions on a page boundary: the log did not test them"
        );
        // Every position is read and followed from; a copy of the log is replayed from every
        // one on a page boundary, from the first and the last, and from a sample of the others.
        let mut rng = Rng::new(seed ^ 0xb0);
        let first = handed.first().copied();
        let last = handed.last().copied();
        let mut reopened = 0;
        for &p in &handed {
            let reopen = p.0 % PAGE == 0 || Some(p) == first || Some(p) == last || rng.chance(2);
            reopened += usize::from(reopen);
            check_position(mode, &keys, &dir, &all, p, tmp.path(), reopen);
        }
        println!(
            "{mode}: {} positions handed out, {reopened} replayed from",
            handed.len()
        );
    }
}

#[test]
fn every_position_plaintext_hands_out_is_accepted_by_every_call_that_takes_one() {
    every_position_accepted(Mode::Plaintext);
}

#[test]
fn every_position_perrecord_hands_out_is_accepted_by_every_call_that_takes_one() {
    every_position_accepted(Mode::PerRecord);
}

#[test]
fn every_position_pagelevel_hands_out_is_accepted_by_every_call_that_takes_one() {
    every_position_accepted(Mode::PageLevel);
}

#[test]
fn every_position_perrecord_gcm_hands_out_is_accepted_by_every_call_that_takes_one() {
    every_position_accepted(Mode::PerRecordGcm);
}

#[test]
fn checkpoint_past_the_end_is_an_error_naming_both_positions() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        // No log at all: a checkpoint says there was one.
        let missing = tmp.path().join("missing");
        match Wal::open_and_replay(&missing, config(mode, &keys), Lsn(0x100000), |_| Ok(())) {
            Err(e @ Error::CheckpointBeyondEnd { .. }) => {
                let text = e.to_string();
                assert!(text.contains("0/100000"), "{mode}: {text}");
            }
            other => panic!("{mode}: a checkpoint on a missing log opened: {other:?}"),
        }
        assert!(
            !missing.join("0000000000000000.wal").exists(),
            "{mode}: a new log was made below the checkpoint"
        );
        // A log shorter than the checkpoint.
        let dir = tmp.path().join("wal");
        let wal = Wal::open(&dir, config(mode, &keys)).unwrap();
        let lsn = wal.append(1, b"one").unwrap();
        wal.flush(lsn).unwrap();
        let end = wal.end_lsn();
        wal.close().unwrap();
        for beyond in [Lsn(end.0 + 1), Lsn(end.0 + SEGMENT), Lsn(0x100000)] {
            match Wal::open_and_replay(&dir, config(mode, &keys), beyond, |_| Ok(())) {
                Err(e @ Error::CheckpointBeyondEnd { .. }) => {
                    let text = e.to_string();
                    assert!(
                        text.contains(&beyond.to_string()) && text.contains(&end.to_string()),
                        "{mode}: {text} names {beyond} and {end}?"
                    );
                }
                other => panic!("{mode}: checkpoint {beyond} past the end {end}: {other:?}"),
            }
        }
    }
}

/// Appends records sized to fill pages exactly until the log ends `before` bytes before a
/// segment boundary (a multiple of the page size).
fn fill_to_segment_end(wal: &Wal, id: &mut u64, before: u64) {
    let probe = wal.append(1, &payload(0, 8)).unwrap();
    let overhead = u64::from(wal.end_lsn()) - u64::from(probe) - 8;
    while u64::from(wal.end_lsn()) % SEGMENT != (SEGMENT - before) % SEGMENT {
        *id += 1;
        let room = PAGE - u64::from(wal.end_lsn()) % PAGE;
        let len = if room > overhead + 8 {
            room - overhead
        } else {
            8
        };
        wal.append(1, &payload(*id, len as usize)).unwrap();
    }
    wal.flush(wal.end_lsn()).unwrap();
}

/// Readers and followers started at `end` of a live log whose next segment does not exist yet:
/// the reader yields nothing, the follower waits and then yields what comes next.
fn start_at_the_end_of_a_live_log(mode: Mode, wal: &Wal, dir: &Path, keys: &KeyRing, what: &str) {
    let end = wal.end_lsn();
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    let read: Vec<_> = reader.records_from(end).collect();
    assert!(
        read.is_empty(),
        "{mode} {what}: reader from the end {end} yielded {read:?}"
    );
    let mut follower = Follower::open(dir, Some(keys.clone()), end)
        .unwrap_or_else(|e| panic!("{mode} {what}: follower from the end {end}: {e}"));
    assert!(follower.poll().unwrap().is_none());
    let next = wal.append(2, b"next").unwrap();
    wal.flush(next).unwrap();
    let got = follower
        .next_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{mode} {what}: following from {end}: {e}"));
    assert_eq!(
        got.map(|r| (r.lsn, r.payload)),
        Some((next, b"next".to_vec())),
        "{mode} {what}: the follower from the end"
    );
}

#[test]
fn readers_and_followers_start_at_an_end_in_a_segment_not_made_yet() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wal");
        let mut id = 0;
        // A log ending exactly on a segment boundary.
        let wal = Wal::open(&dir, config(mode, &keys)).unwrap();
        fill_to_segment_end(&wal, &mut id, 0);
        start_at_the_end_of_a_live_log(mode, &wal, &dir, &keys, "segment boundary");
        // A log ending in a segment's last page, reopened: pagelevel goes on in a fresh page,
        // in the next segment.
        fill_to_segment_end(&wal, &mut id, PAGE);
        let lsn = wal.append(3, &payload(id, 40)).unwrap();
        wal.flush(lsn).unwrap();
        wal.close().unwrap();
        let wal = Wal::open(&dir, config(mode, &keys)).unwrap();
        start_at_the_end_of_a_live_log(mode, &wal, &dir, &keys, "reopen in a last page");
        wal.close().unwrap();
    }
}
