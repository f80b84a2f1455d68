//! Real crashes: this test binary re-executes itself as a child process that opens the log,
//! appends from several threads and reports on stdout every record whose flush returned Ok.
//! The parent SIGKILLs the child at a random moment (sometimes during open and recovery),
//! reopens the log and checks that every reported record is back, byte-identical and at its
//! LSN, that nothing appears that was never appended, and that nothing appears twice. The next
//! cycle writes on top.
//!
//! Environment: WALCRYPT_CRASH_CYCLES (cycles per mode, default 30), WALCRYPT_CRASH_SEED
//! (replay a run; the seed is printed on failure). Timing decides exactly where a kill lands,
//! so a seed replays the same plan (modes, sync modes, kill points) rather than the same bytes.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{Rng, check_payload, env_usize, payload_for, seed_from_env};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const CHILD_ENV: &str = "WALCRYPT_CRASH_CHILD";
const THREADS: u64 = 4;
/// Ids of cycle c are (c + 1) * CYCLE_IDS + thread * THREAD_IDS + n.
const CYCLE_IDS: u64 = 10_000_000;
const THREAD_IDS: u64 = 1_000_000;
/// Each child thread stops appending after this many records (and waits to be killed), so
/// the log grows by at most a few MB per cycle.
const MAX_PER_THREAD: u64 = 300;

fn config(mode: Mode, keys: &KeyRing, sync: SyncMode) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(4096)
        .segment_size(64 * 1024)
        .buffer_size(64 * 1024)
}

/// Opens, retrying while the directory lock is held. The three mode tests run as threads of one
/// process and spawn children: between fork and exec a child briefly holds copies of the
/// parent's descriptors, including a sibling test's lock file, so a lock can outlive its `Wal`
/// by the time an exec takes. The retry is bounded; a lock held longer is a real failure.
fn with_lock_retry<T>(mut open: impl FnMut() -> walcrypt::Result<T>) -> walcrypt::Result<T> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match open() {
            Err(walcrypt::Error::Locked(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// The child: `WALCRYPT_CRASH_CHILD=dir|keyfile|mode|sync|id_base|seed`.
#[test]
#[ignore = "the child process of the sigkill crash tests; does nothing unless WALCRYPT_CRASH_CHILD is set"]
fn crash_child() {
    let _serial = crate::support::serial();
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dir, keyfile, mode, sync, base, seed] = parts[..] else {
        panic!("bad {CHILD_ENV}={spec}");
    };
    let mode: Mode = mode.parse().unwrap();
    let sync = if sync == "durable" {
        SyncMode::Durable
    } else {
        SyncMode::Buffered
    };
    let base: u64 = base.parse().unwrap();
    let seed: u64 = seed.parse().unwrap();
    let keys = KeyRing::load(keyfile).unwrap();
    let wal = with_lock_retry(|| Wal::open(dir, config(mode, &keys, sync))).unwrap();
    report("READY\n");
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let wal = &wal;
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ ((t + 1) * 0x1234_5678));
                let mut pending: Vec<(u64, Lsn)> = Vec::new();
                for n in 0..MAX_PER_THREAD {
                    let id = base + t * THREAD_IDS + n;
                    let (kind, payload) = payload_for(id);
                    let lsn = wal.append(kind, &payload).unwrap();
                    pending.push((id, lsn));
                    if rng.chance(35) || pending.len() >= 6 {
                        wal.flush(lsn).unwrap();
                        let mut lines = String::new();
                        for (id, lsn) in pending.drain(..) {
                            lines.push_str(&format!("FLUSHED {id} {}\n", u64::from(lsn)));
                        }
                        report(&lines);
                    }
                }
            });
        }
    });
    // Every record appended: wait to be killed, never closing cleanly.
    loop {
        std::thread::sleep(Duration::from_millis(50));
        report("");
    }
}

/// Writes to the parent; exits if the parent is gone.
fn report(lines: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(lines.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

fn take(line: String, flushed: &mut HashMap<u64, u64>, ready: &mut bool) {
    // libtest may print "test crash_child ... " before the child's first line.
    if line.ends_with("READY") {
        *ready = true;
    } else if let Some(rest) = line.split("FLUSHED ").nth(1) {
        let mut it = rest.split(' ');
        let id: u64 = it.next().unwrap().parse().unwrap();
        let lsn: u64 = it.next().unwrap().parse().unwrap();
        assert!(flushed.insert(id, lsn).is_none(), "id {id} reported twice");
    }
}

struct Cycle {
    /// Records reported flushed: id -> LSN.
    flushed: HashMap<u64, u64>,
    killed_during_open: bool,
}

/// Runs one child and kills it; returns what it reported.
fn run_child(
    dir: &Path,
    keyfile: &Path,
    mode: Mode,
    sync: SyncMode,
    base: u64,
    rng: &mut Rng,
) -> Cycle {
    let spec = format!(
        "{}|{}|{}|{}|{base}|{}",
        dir.display(),
        keyfile.display(),
        mode.name(),
        if sync == SyncMode::Durable {
            "durable"
        } else {
            "buffered"
        },
        rng.next_u64()
    );
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_crash_cycles::crash_child",
            "--nocapture",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let lines = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut flushed = HashMap::new();
    let mut ready = false;
    let during_open = rng.chance(10);
    if during_open {
        // Somewhere in start-up: exec, open, recovery, the first appends.
        std::thread::sleep(Duration::from_micros(rng.below(30_000)));
    } else {
        let want = rng.range(1, 250) as usize;
        while flushed.len() < want {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => take(line, &mut flushed, &mut ready),
                Err(_) => break, // the child ended or stalled: reported below
            }
        }
        if rng.chance(50) {
            std::thread::sleep(Duration::from_micros(rng.below(3000)));
        }
    }
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped child.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill failed");
    let status = child.wait().unwrap();
    lines.join().unwrap();
    while let Ok(line) = rx.try_recv() {
        take(line, &mut flushed, &mut ready);
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        !stderr.contains("panicked"),
        "the child failed before it was killed ({status}):\n{stderr}"
    );
    Cycle {
        flushed,
        killed_during_open: !ready,
    }
}

/// Checks the reopened log; returns its records as (lsn, id).
fn verify(
    dir: &Path,
    mode: Mode,
    keys: &KeyRing,
    before: &[(u64, u64)],
    base: u64,
    cycle: &Cycle,
    full: bool,
) -> Vec<(u64, u64)> {
    let reader = match Reader::open(dir, Some(keys.clone())) {
        Ok(reader) => reader,
        // Killed before the first segment (or even the directory) was in place: nothing can
        // have been flushed.
        Err(walcrypt::Error::NoLog(_)) if before.is_empty() && cycle.flushed.is_empty() => {
            return Vec::new();
        }
        Err(walcrypt::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound
                && before.is_empty()
                && cycle.flushed.is_empty() =>
        {
            return Vec::new();
        }
        Err(e) => panic!("reader: {e}"),
    };
    let prev_end = before.last().map(|&(lsn, _)| lsn);
    let mut records: Vec<(u64, u64)> = Vec::new();
    let mut seen = HashSet::new();
    let from = match prev_end {
        Some(lsn) if !full => Lsn(lsn),
        _ => Lsn::default(),
    };
    let mut kept = if from == Lsn::default() {
        0
    } else {
        before.len() - 1
    };
    records.extend_from_slice(&before[..kept]);
    seen.extend(before[..kept].iter().map(|&(_, id)| id));
    for rec in reader.records_from(from) {
        let rec = rec.unwrap_or_else(|e| panic!("reader: {e}"));
        let id = check_payload(rec.kind, &rec.payload).unwrap_or_else(|e| panic!("{e}"));
        let lsn = u64::from(rec.lsn);
        assert!(seen.insert(id), "id {id} appears twice (second at {lsn})");
        if kept < before.len() {
            assert_eq!(before[kept], (lsn, id), "earlier record {kept} changed");
            kept += 1;
        } else {
            assert!(
                (base..base + THREADS * THREAD_IDS).contains(&id),
                "id {id} at {lsn} was never appended by this cycle (base {base})"
            );
        }
        records.push((lsn, id));
    }
    assert_eq!(kept, before.len(), "records of earlier cycles are missing");
    let at: HashMap<u64, u64> = records.iter().map(|&(lsn, id)| (id, lsn)).collect();
    for (&id, &lsn) in &cycle.flushed {
        assert_eq!(
            at.get(&id),
            Some(&lsn),
            "flushed record {id} (lsn {lsn}) is not back at its lsn"
        );
    }
    // Recovery (the writer's view) agrees with the reader, record for record.
    let mut replayed = Vec::new();
    let start = Lsn(records
        .get(before.len().saturating_sub(1))
        .map_or(0, |r| r.0));
    let wal = with_lock_retry(|| {
        replayed.clear();
        Wal::open_and_replay(dir, config(mode, keys, SyncMode::Durable), start, |rec| {
            replayed.push((
                u64::from(rec.lsn),
                check_payload(rec.kind, &rec.payload).unwrap(),
            ));
            Ok(())
        })
    })
    .unwrap_or_else(|e| panic!("recovery: {e}"));
    wal.close().unwrap();
    let tail: Vec<_> = records.iter().filter(|r| r.0 >= start.0).cloned().collect();
    assert_eq!(replayed, tail, "recovery and reader disagree");
    records
}

fn crash_cycles(mode: Mode) {
    let seed = seed_from_env("WALCRYPT_CRASH_SEED");
    let cycles = env_usize("WALCRYPT_CRASH_CYCLES", 30);
    let index = Mode::ALL.iter().position(|m| *m == mode).unwrap() as u64;
    let mode_seed = seed ^ ((index + 1) * 0x51_7CC1_B727_220A);
    let result = std::panic::catch_unwind(|| run_cycles(mode, mode_seed, cycles));
    if let Err(e) = result {
        eprintln!("sigkill crash cycles failed in {mode}: replay with WALCRYPT_CRASH_SEED={seed}");
        std::panic::resume_unwind(e);
    }
}

fn run_cycles(mode: Mode, seed: u64, cycles: usize) {
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let keyfile = tmp.path().join("keys");
    let keys = KeyRing::generate().unwrap();
    keys.save(&keyfile).unwrap();
    let mut log: Vec<(u64, u64)> = Vec::new();
    let (mut flushed_total, mut during_open, mut appended_total) = (0, 0, 0);
    for c in 0..cycles {
        let sync = if rng.chance(50) {
            SyncMode::Durable
        } else {
            SyncMode::Buffered
        };
        let base = (c as u64 + 1) * CYCLE_IDS;
        let cycle = run_child(&dir, &keyfile, mode, sync, base, &mut rng);
        let full = c % 10 == 9 || c + 1 == cycles;
        let before = log.len();
        log = verify(&dir, mode, &keys, &log, base, &cycle, full);
        flushed_total += cycle.flushed.len();
        appended_total += log.len() - before;
        during_open += cycle.killed_during_open as usize;
    }
    println!(
        "{mode}: {cycles} SIGKILL cycles survived ({during_open} during start-up), \
         {flushed_total} flushed records all back, {appended_total} records in the log, \
         {} segments",
        log.last().map_or(0, |r| r.0 / (64 * 1024) + 1)
    );
}

#[test]
fn sigkill_crash_cycles_plaintext() {
    let _serial = crate::support::serial();
    crash_cycles(Mode::Plaintext);
}

#[test]
fn sigkill_crash_cycles_perrecord() {
    let _serial = crate::support::serial();
    crash_cycles(Mode::PerRecord);
}

#[test]
fn sigkill_crash_cycles_pagelevel() {
    let _serial = crate::support::serial();
    crash_cycles(Mode::PageLevel);
}
