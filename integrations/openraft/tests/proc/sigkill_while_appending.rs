//! Real crashes of a raft node's log store: this test binary re-executes itself (the test
//! `sigkill_while_appending::crash_child`) as a child that opens the store and appends entries (with votes, committed log ids, truncations and purges
//! mixed in), printing each entry after its flush callback fired, each vote after `save_vote`
//! returned, each purge after `purge` returned, and each committed log id once a later flush
//! (an append's callback, a vote, a purge) covered it. The parent SIGKILLs the child at a
//! random moment, reopens the store and checks that every reported entry is there with its
//! payload, that the vote, committed log id and purge point are at least the reported ones,
//! that the committed log id names an entry of the log (unless purged), and that the log has no
//! hole. The next child writes on top.
//!
//! As in raft, the child never truncates at or below the committed index, and its committed
//! log id is the log id of an entry it appended, never moving back.
//!
//! Environment: WALCRYPT_RAFT_CRASH_CYCLES (cycles per mode, default 6), WALCRYPT_RAFT_CRASH_SEED.

use crate::support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{LogId, RaftLogReader, Vote};
use support::{Rng, assert_entry, config, entry, log_id};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::kv::TypeConfig;
use walcrypt_openraft::{Error, WalLogStore};

type Store = WalLogStore<TypeConfig>;

const CHILD_ENV: &str = "WALCRYPT_RAFT_CRASH_CHILD";
/// A child stops after this many steps and waits to be killed.
const MAX_STEPS: u64 = 400;

/// Opens, retrying while the directory lock is held: a child forked while this process held the
/// lock keeps a copy of it until it execs.
fn open_store(dir: &Path, mode: Mode, keys: &KeyRing) -> Store {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match Store::open(dir, config(mode, keys)) {
            Err(Error::Wal(walcrypt::Error::Locked(_))) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other.unwrap(),
        }
    }
}

fn report(line: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

/// The child: `WALCRYPT_RAFT_CRASH_CHILD=dir|keyfile|mode|seed`.
#[test]
#[ignore = "the child process of the sigkill test; does nothing unless WALCRYPT_RAFT_CRASH_CHILD is set"]
fn crash_child() {
    let _serial = crate::support::serial();
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [dir, keyfile, mode, seed] = parts[..] else {
        panic!("bad {CHILD_ENV}={spec}");
    };
    let mode: Mode = mode.parse().unwrap();
    let keys = KeyRing::load(keyfile).unwrap();
    let mut rng = Rng(seed.parse::<u64>().unwrap() | 1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut store = open_store(Path::new(dir), mode, &keys);
        let state = store.get_log_state().await.unwrap();
        let vote_term = store
            .read_vote()
            .await
            .unwrap()
            .map_or(0, |v| v.leader_id.term);
        let mut term = vote_term.max(state.last_log_id.map_or(0, |l| l.leader_id.term)) + 1;
        let mut next = state.last_log_id.map_or(1, |l| l.index + 1);
        let mut last = state.last_log_id;
        let mut committed = store.read_committed().await.unwrap();
        // A committed log id saved but not yet covered by a flush.
        let mut pending: Option<LogId<u64>> = None;
        let committed_line = |pending: &mut Option<LogId<u64>>| {
            pending.take().map_or_else(String::new, |c| {
                format!("@C {} {}\n", c.leader_id.term, c.index)
            })
        };
        store.save_vote(&Vote::new(term, 1)).await.unwrap();
        report(&format!("@READY\n@V {term}\n"));
        for _ in 0..MAX_STEPS {
            let first = store
                .get_log_state()
                .await
                .unwrap()
                .last_purged_log_id
                .map_or(1, |l| l.index + 1);
            let roll = rng.below(100);
            let committed_index = committed.map_or(0, |c| c.index);
            if roll < 5 && next >= first + 4 && next - 3 > committed_index {
                let since = next - 3;
                report(&format!("@TRUNCATING {since}\n"));
                store.truncate(log_id(term, since)).await.unwrap();
                store.blocking_append([entry(term, since)]).await.unwrap();
                next = since + 1;
                last = Some(log_id(term, since));
                report(&format!(
                    "@E {term} {since}\n{}",
                    committed_line(&mut pending)
                ));
            } else if roll < 8 && next >= first + 20 {
                let upto = next - 10;
                let at = store.try_get_log_entries(upto..=upto).await.unwrap();
                store.purge(at[0].log_id).await.unwrap();
                report(&format!("@P {upto}\n{}", committed_line(&mut pending)));
            } else if roll < 12 {
                if last.is_some() && last != committed {
                    store.save_committed(last).await.unwrap();
                    committed = last;
                    pending = last;
                }
            } else if roll < 15 {
                term += 1;
                store.save_vote(&Vote::new(term, 1)).await.unwrap();
                report(&format!("@V {term}\n{}", committed_line(&mut pending)));
            } else {
                let n = 1 + rng.below(4);
                store
                    .blocking_append((next..next + n).map(|i| entry(term, i)))
                    .await
                    .unwrap();
                let mut lines: String = (next..next + n)
                    .map(|i| format!("@E {term} {i}\n"))
                    .collect();
                lines.push_str(&committed_line(&mut pending));
                next += n;
                last = Some(log_id(term, next - 1));
                report(&lines);
            }
        }
        // Everything done: wait to be killed, never closing cleanly.
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            report("");
        }
    });
}

/// What the parent learned from a child's reports.
#[derive(Default)]
struct Expected {
    /// index -> term of every entry reported flushed (and not since truncated).
    entries: BTreeMap<u64, u64>,
    /// A truncation begun but not yet followed by its reported entry.
    truncating: Option<u64>,
    vote: u64,
    purged: u64,
    /// (term, index) of the newest committed log id reported durable.
    committed: Option<(u64, u64)>,
}

impl Expected {
    fn take(&mut self, line: &str) {
        let Some(at) = line.find('@') else { return };
        let words: Vec<u64> = line[at..]
            .split(' ')
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        match line[at..].split(' ').next().unwrap() {
            "@E" => {
                let (term, index) = (words[0], words[1]);
                self.entries.split_off(&index);
                self.entries.insert(index, term);
                self.truncating = None;
            }
            "@TRUNCATING" => self.truncating = Some(words[0]),
            "@P" => {
                self.purged = self.purged.max(words[0]);
                self.entries = self.entries.split_off(&(words[0] + 1));
            }
            "@V" => self.vote = self.vote.max(words[0]),
            "@C" => self.committed = self.committed.max(Some((words[0], words[1]))),
            _ => {}
        }
    }
}

async fn verify(store: &mut Store, expected: &Expected, mode: Mode, cycle: u64, seed: u64) {
    let ctx = format!("{mode} cycle {cycle} seed {seed}");
    let vote = store
        .read_vote()
        .await
        .unwrap()
        .map_or(0, |v| v.leader_id.term);
    assert!(
        vote >= expected.vote,
        "{ctx}: vote {vote} older than reported {}",
        expected.vote
    );
    let state = store.get_log_state().await.unwrap();
    let purged = state.last_purged_log_id.map_or(0, |l| l.index);
    assert!(
        purged >= expected.purged,
        "{ctx}: purged to {purged}, reported {}",
        expected.purged
    );
    let entries = store.try_get_log_entries(0..).await.unwrap();
    for pair in entries.windows(2) {
        assert_eq!(
            pair[1].log_id.index,
            pair[0].log_id.index + 1,
            "{ctx}: hole in the log"
        );
    }
    if let (Some(first), Some(_)) = (entries.first(), state.last_purged_log_id) {
        assert_eq!(
            first.log_id.index,
            purged + 1,
            "{ctx}: entries do not follow the purge point"
        );
    }
    assert_eq!(
        state.last_log_id,
        entries
            .last()
            .map(|e| e.log_id)
            .or(state.last_purged_log_id)
    );
    let by_index: BTreeMap<u64, _> = entries.iter().map(|e| (e.log_id.index, e)).collect();
    let committed = store.read_committed().await.unwrap();
    let got = committed.map(|c| (c.leader_id.term, c.index));
    assert!(
        got >= expected.committed,
        "{ctx}: committed {got:?} older than reported {:?}",
        expected.committed
    );
    if let Some(c) = committed {
        let last = state.last_log_id.map_or(0, |l| l.index);
        assert!(
            c.index <= last,
            "{ctx}: committed {c} is past the last entry {last}"
        );
        if c.index > purged {
            let at = by_index
                .get(&c.index)
                .unwrap_or_else(|| panic!("{ctx}: committed entry {} is missing", c.index));
            assert_eq!(
                at.log_id, c,
                "{ctx}: the committed log id is not in the log"
            );
        }
    }
    for (&index, &term) in &expected.entries {
        if index <= purged || expected.truncating.is_some_and(|s| index >= s) {
            continue;
        }
        let got = by_index
            .get(&index)
            .unwrap_or_else(|| panic!("{ctx}: flushed entry {index} (term {term}) is missing"));
        assert_entry(got, term, index);
    }
}

fn run_child(dir: &Path, keyfile: &Path, mode: Mode, rng: &mut Rng) -> Expected {
    let spec = format!(
        "{}|{}|{}|{}",
        dir.display(),
        keyfile.display(),
        mode.name(),
        rng.next()
    );
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_while_appending::crash_child",
            "--nocapture",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
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
    let mut expected = Expected::default();
    if rng.below(10) == 0 {
        // Somewhere in start-up: exec, open and replay, the first writes.
        std::thread::sleep(Duration::from_micros(rng.below(30_000)));
    } else {
        let want = 5 + rng.below(200);
        let mut seen = 0;
        while seen < want {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    seen += u64::from(line.contains('@'));
                    expected.take(&line);
                }
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
    }
    // SIGKILL: no destructor, no flush, no close.
    child.kill().unwrap();
    child.wait().unwrap();
    lines.join().unwrap();
    // Lines printed before the kill are reports of work that completed.
    for line in rx.try_iter() {
        expected.take(&line);
    }
    expected
}

fn crash_cycles(mode: Mode) {
    let cycles: u64 = std::env::var("WALCRYPT_RAFT_CRASH_CYCLES").map_or(6, |v| v.parse().unwrap());
    let seed: u64 = std::env::var("WALCRYPT_RAFT_CRASH_SEED").map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        },
        |v| v.parse().unwrap(),
    );
    let mut rng = Rng(seed ^ (mode as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let dir = tempfile::tempdir().unwrap();
    let keyfile = dir.path().join("keys");
    let keys = KeyRing::generate().unwrap();
    keys.save(&keyfile).unwrap();
    let log = dir.path().join("raft-log");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut checked = 0;
    let mut committed = 0;
    for cycle in 0..cycles {
        let expected = run_child(&log, &keyfile, mode, &mut rng);
        checked += expected.entries.len();
        committed += u64::from(expected.committed.is_some());
        runtime.block_on(async {
            let mut store = open_store(&log, mode, &keys);
            verify(&mut store, &expected, mode, cycle, seed).await;
        });
    }
    eprintln!(
        "{mode}: {cycles} cycles, {checked} reported entries and {committed} committed log ids checked"
    );
    assert!(
        checked > 0 || cycles < 3,
        "{mode}: no child reported a flushed entry"
    );
}

#[test]
fn sigkill_while_appending_plaintext() {
    let _serial = crate::support::serial();
    crash_cycles(Mode::Plaintext);
}

#[test]
fn sigkill_while_appending_perrecord() {
    let _serial = crate::support::serial();
    crash_cycles(Mode::PerRecord);
}

#[test]
fn sigkill_while_appending_pagelevel() {
    let _serial = crate::support::serial();
    crash_cycles(Mode::PageLevel);
}
