//! A key rotation replaces the segment prepared under the old key without creating a segment
//! under the log's locks. Driven step by step (background preparation off, the next segment
//! prepared with `Wal::prepare_next_segment`), with the rotation held at two points by a hooked
//! storage, in both encrypted CTR modes:
//!
//! * held while it makes the replacement (under a temporary name), the log takes appends and
//!   durable flushes from another thread: the rotation holds neither the insert nor the write
//!   lock then;
//! * held after renaming the replacement into place but before the directory sync, a record
//!   appended into the new segment is not acknowledged: its flush waits until the replacement's
//!   directory entry is durable;
//! * the only segment file created during and after the rotation is the replacement, on the
//!   rotating thread; crossing into the new segment creates nothing;
//! * when the appenders carry the log into the expected segment while the replacement is being
//!   made, the switch goes to the segment after it and the replacement's header is rewritten
//!   for that one.
//!
//! Every record reads back with both keys, and each segment lists the key its records use.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use support::hooked::{Hooked, Hooks};
use support::payload;
use walcrypt::{Config, Key, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const SEGMENT: u64 = 64 * 1024;
/// Long enough for a deadlock to be a failure rather than a hang; never reached otherwise.
const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Default)]
struct State {
    hold_making: bool,
    hold_renamed: bool,
    /// Where the rotation is held: "making" or "renamed".
    held_at: Option<&'static str>,
    /// Files created (opened under a temporary name), with the creating thread's name.
    created: Vec<(String, PathBuf)>,
    /// Writes of a replacement's header page.
    header_writes: usize,
}

#[derive(Default)]
struct Gates {
    state: Mutex<State>,
    changed: Condvar,
}

fn is_replacement(path: &Path) -> bool {
    path.to_string_lossy().ends_with(".rekey.tmp")
}

impl Gates {
    fn hold(&self, at: &'static str) {
        let mut state = self.state.lock().unwrap();
        state.held_at = Some(at);
        self.changed.notify_all();
        while match at {
            "making" => state.hold_making,
            _ => state.hold_renamed,
        } {
            state = self.changed.wait(state).unwrap();
        }
        state.held_at = None;
    }

    fn wait_held(&self, at: &'static str) {
        let state = self.state.lock().unwrap();
        let (state, timeout) = self
            .changed
            .wait_timeout_while(state, PATIENCE, |s| s.held_at != Some(at))
            .unwrap();
        assert!(!timeout.timed_out(), "the rotation never reached {at}");
        drop(state);
    }

    fn set(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.state.lock().unwrap());
        self.changed.notify_all();
    }
}

impl Hooks for Gates {
    fn opened(&self, path: &Path) {
        if path.to_string_lossy().ends_with(".tmp") {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            self.set(|s| s.created.push((thread, path.to_path_buf())));
        }
    }

    fn write(&self, path: &Path, offset: u64, _buf: &[u8]) {
        if is_replacement(path) && offset == 0 {
            let hold = {
                let mut state = self.state.lock().unwrap();
                state.header_writes += 1;
                state.hold_making
            };
            if hold {
                self.hold("making");
            }
        }
    }

    fn renamed(&self, from: &Path, _to: &Path) {
        if is_replacement(from) && self.state.lock().unwrap().hold_renamed {
            self.hold("renamed");
        }
    }
}

fn config(mode: Mode, keys: &KeyRing, gates: &Arc<Gates>) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(SEGMENT)
        .prepare_segments(false)
        .storage(Arc::new(Hooked(gates.clone())))
}

/// Appends and flushes record `seed` on another thread; returns (lsn, payload), or fails the
/// test if that does not finish (the rotation holds a lock it should not).
fn append_elsewhere(wal: &Arc<Wal>, seed: u64) -> (Lsn, Vec<u8>) {
    let (tx, rx) = mpsc::channel();
    let wal = wal.clone();
    std::thread::spawn(move || {
        let p = payload(seed, 300);
        let lsn = wal.append(1, &p).unwrap();
        wal.flush(lsn).unwrap();
        drop(wal);
        let _ = tx.send((lsn, p));
    });
    rx.recv_timeout(PATIENCE)
        .expect("an append and flush waited for the rotation's segment making")
}

/// The key ids each segment lists, by start.
fn listed_keys(dir: &Path, keys: &KeyRing) -> Vec<(u64, Vec<u32>)> {
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    reader
        .segments()
        .iter()
        .map(|s| {
            let ids = s.header.key_checks.iter().map(|(id, _)| *id).collect();
            (u64::from(s.header.start), ids)
        })
        .collect()
}

fn read_back(dir: &Path, keys: &KeyRing) -> Vec<(Lsn, Vec<u8>)> {
    support::read_all(dir, Some(keys.clone()))
        .into_iter()
        .map(|(lsn, _, p)| (lsn, p))
        .collect()
}

/// Activates `key` as key 2 on a thread named "rotating" (the name the hooks record).
fn spawn_rotation(wal: &Arc<Wal>, key: &Key) -> std::thread::JoinHandle<walcrypt::Result<()>> {
    let (wal, key) = (wal.clone(), key.clone());
    std::thread::Builder::new()
        .name("rotating".into())
        .spawn(move || wal.activate_key(2, key))
        .unwrap()
}

#[test]
fn a_rotation_holds_no_lock_while_it_makes_and_places_the_new_segment() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let gates = Arc::new(Gates::default());
        let wal = Arc::new(Wal::open(dir.path(), config(mode, &keys, &gates)).unwrap());
        let mut expected = Vec::new();
        for i in 0..3 {
            expected.push(append_elsewhere(&wal, i));
        }
        assert!(wal.prepare_next_segment().unwrap(), "{mode}: prepared");
        gates.set(|s| {
            s.created.clear();
            s.hold_making = true;
            s.hold_renamed = true;
        });

        let key = Key::generate().unwrap();
        let rotation = spawn_rotation(&wal, &key);
        gates.wait_held("making");
        expected.push(append_elsewhere(&wal, 10));
        assert!(
            expected.last().unwrap().0 < Lsn(SEGMENT),
            "{mode}: still in the first segment"
        );
        gates.set(|s| s.hold_making = false);

        gates.wait_held("renamed");
        // The switch is done: the next record goes to the new segment, whose directory entry
        // is not durable yet. Its append returns; its flush must wait.
        let (appended_tx, appended) = mpsc::channel();
        let (flushed_tx, flushed) = mpsc::channel();
        {
            let wal = wal.clone();
            std::thread::spawn(move || {
                let p = payload(11, 300);
                let lsn = wal.append(1, &p).unwrap();
                let _ = appended_tx.send((lsn, p));
                let flushed = wal.flush(lsn).map_err(|e| e.to_string());
                drop(wal);
                let _ = flushed_tx.send(flushed);
            });
        }
        let (lsn, p) = appended.recv_timeout(PATIENCE).unwrap();
        assert!(
            Lsn(SEGMENT) < lsn && lsn < Lsn(SEGMENT + 2 * 4096),
            "{mode}: {lsn} is at the start of the new segment"
        );
        assert!(
            flushed.recv_timeout(Duration::from_millis(200)).is_err(),
            "{mode}: a record was acknowledged before its segment's directory entry was durable"
        );
        gates.set(|s| s.hold_renamed = false);
        rotation.join().unwrap().unwrap();
        flushed.recv_timeout(PATIENCE).unwrap().unwrap();
        expected.push((lsn, p));
        for i in 12..20 {
            expected.push(append_elsewhere(&wal, i));
        }

        let created = gates.state.lock().unwrap().created.clone();
        assert_eq!(created.len(), 1, "{mode}: {created:?}");
        assert_eq!(created[0].0, "rotating", "{mode}: {created:?}");
        assert!(is_replacement(&created[0].1), "{mode}: {created:?}");
        Arc::into_inner(wal).unwrap().close().unwrap();

        let mut both = keys.clone();
        both.add(2, key).unwrap();
        assert_eq!(read_back(dir.path(), &both), expected, "{mode}");
        assert_eq!(
            listed_keys(dir.path(), &both),
            [(0, vec![1]), (SEGMENT, vec![2])],
            "{mode}"
        );
    }
}

#[test]
fn a_log_that_enters_the_expected_segment_first_gets_the_replacement_one_later() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let gates = Arc::new(Gates::default());
        let wal = Arc::new(Wal::open(dir.path(), config(mode, &keys, &gates)).unwrap());
        let mut expected = vec![append_elsewhere(&wal, 0)];
        assert!(wal.prepare_next_segment().unwrap(), "{mode}: prepared");
        gates.set(|s| {
            s.created.clear();
            s.hold_making = true;
        });
        let key = Key::generate().unwrap();
        let rotation = spawn_rotation(&wal, &key);
        gates.wait_held("making");
        // The appenders carry the log into the segment prepared under key 1.
        let mut seed = 1;
        while wal.end_lsn() <= Lsn(SEGMENT + 4096) {
            expected.push(append_elsewhere(&wal, seed));
            seed += 1;
        }
        gates.set(|s| s.hold_making = false);
        rotation.join().unwrap().unwrap();
        for i in 0..5 {
            expected.push(append_elsewhere(&wal, 1000 + i));
        }
        assert!(
            expected.last().unwrap().0 > Lsn(2 * SEGMENT),
            "{mode}: the switch went to the third segment"
        );
        let state = gates.state.lock().unwrap();
        assert_eq!(
            state.header_writes, 2,
            "{mode}: the replacement's header was written, then rewritten for the third segment"
        );
        assert_eq!(state.created.len(), 1, "{mode}: {:?}", state.created);
        assert_eq!(
            state.created[0].0, "rotating",
            "{mode}: {:?}",
            state.created
        );
        drop(state);
        Arc::into_inner(wal).unwrap().close().unwrap();

        let mut both = keys.clone();
        both.add(2, key).unwrap();
        assert_eq!(read_back(dir.path(), &both), expected, "{mode}");
        assert_eq!(
            listed_keys(dir.path(), &both),
            [(0, vec![1]), (SEGMENT, vec![1]), (2 * SEGMENT, vec![2])],
            "{mode}"
        );
    }
}
