//! Group commit without a lock: a flusher becomes a round's leader by setting `leading`
//! (compare-and-swap) and flushes everything in the buffer for everyone; the others sleep on
//! `rounds` until the round ends, then find their record flushed or lead the next round.
//!
//! Ending a round clears `leading`, bumps `rounds` and, only when someone sleeps, wakes them
//! all with one call (a futex wake on Linux, through `atomic-wait`): a follower wakes without
//! a mutex to take again, where a condition variable would hand each woken follower a mutex
//! in turn. A follower announces itself in `sleepers` and then reads `rounds`; the leader
//! bumps `rounds` and then reads `sleepers`; a sequentially consistent fence between the two
//! steps on each side makes one of them see the other, and the sleep compares `rounds` in the
//! kernel, so a bump after the follower's last read makes it return at once. `loom_model`
//! checks this with every interleaving of two flushers.
//!
//! All three are written by every flusher, so they are shared-line wrappers
//! (line_ledger.rs), counted with the feature `line-ledger`; the futex wait and wake on
//! `rounds` are not counted.

use crate::line_ledger::{LineBool, LineU32};
use sync::{Ordering, fence};

pub(super) struct GroupCommit {
    leading: LineBool,
    rounds: LineU32,
    sleepers: LineU32,
    #[cfg(loom)]
    park: sync::Park,
}

impl Default for GroupCommit {
    fn default() -> GroupCommit {
        GroupCommit {
            leading: LineBool::named("group.leading", false),
            rounds: LineU32::named("group.rounds", 0),
            sleepers: LineU32::named("group.sleepers", 0),
            #[cfg(loom)]
            park: sync::Park::default(),
        }
    }
}

/// Ends a group-commit round when dropped (also when the leader unwinds): wakes every
/// follower to check its record. A leader may hand the lead on before that
/// ([`RoundEnd::hand_on`]): another flusher may then lead the next round while this one
/// finishes (a `Durable` leader's fdatasync), and the end still wakes the followers.
pub(super) struct RoundEnd<'a> {
    group: &'a GroupCommit,
    handed_on: bool,
}

impl RoundEnd<'_> {
    /// Lets another flusher become a leader now; this round still ends (and wakes its
    /// followers) when dropped.
    pub(super) fn hand_on(&mut self) {
        if !self.handed_on {
            self.handed_on = true;
            self.group.leading.store(false, Ordering::SeqCst);
        }
    }
}

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        let group = self.group;
        if !self.handed_on {
            group.leading.store(false, Ordering::SeqCst);
        }
        group.rounds.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if group.sleepers.load(Ordering::SeqCst) > 0 {
            group.wake_all();
        }
    }
}

impl GroupCommit {
    /// The number of rounds ended so far: read before trying to lead, passed to
    /// [`GroupCommit::wait_after`] if another thread leads.
    pub(super) fn rounds(&self) -> u32 {
        self.rounds.load(Ordering::SeqCst)
    }

    /// Makes the caller the leader of a round, if no round is under way.
    pub(super) fn lead(&self) -> Option<RoundEnd<'_>> {
        self.leading
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .ok()
            .map(|_| RoundEnd {
                group: self,
                handed_on: false,
            })
    }

    /// Sleeps until a round ends after `seen` rounds had ended (at once if one has). Called
    /// after [`GroupCommit::lead`] failed: a round that had not ended when `seen` was read,
    /// or a later one, was under way then, and its end bumps `rounds`.
    pub(super) fn wait_after(&self, seen: u32) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        while self.rounds.load(Ordering::SeqCst) == seen {
            self.sleep(seen);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    #[cfg(not(loom))]
    fn sleep(&self, seen: u32) {
        atomic_wait::wait(self.rounds.raw(), seen);
    }

    #[cfg(not(loom))]
    fn wake_all(&self) {
        atomic_wait::wake_all(self.rounds.raw());
    }

    #[cfg(loom)]
    fn sleep(&self, seen: u32) {
        self.park.sleep(self.rounds.raw(), seen);
    }

    #[cfg(loom)]
    fn wake_all(&self) {
        self.park.wake_all();
    }
}

#[cfg(not(loom))]
mod sync {
    pub(super) use std::sync::atomic::{Ordering, fence};
}

#[cfg(loom)]
mod sync {
    pub(super) use loom::sync::atomic::{AtomicU32, Ordering, fence};

    /// The kernel's wait-on-address, as the model sees it: the comparison with the expected
    /// value and the sleep are one step under a lock the wake also takes.
    #[derive(Default)]
    pub(super) struct Park {
        lock: loom::sync::Mutex<()>,
        woken: loom::sync::Condvar,
    }

    impl Park {
        pub(super) fn sleep(&self, value: &AtomicU32, expected: u32) {
            let guard = self.lock.lock().expect("loom model: lock poisoned");
            if value.load(Ordering::SeqCst) == expected {
                drop(self.woken.wait(guard).expect("loom model: lock poisoned"));
            }
        }

        pub(super) fn wake_all(&self) {
            let _guard = self.lock.lock().expect("loom model: lock poisoned");
            self.woken.notify_all();
        }
    }
}

/// Group commit under the model checker: `RUSTFLAGS="--cfg loom" cargo test --release --lib
/// loom_model` (`.ci/run` runs it). Flushers each need their own record flushed; a leader
/// flushes everything appended. Loom explores every interleaving: a lost wake-up leaves a
/// follower asleep forever (a deadlock loom reports), and every flusher must return with its
/// record flushed.
#[cfg(all(test, loom))]
mod loom_model {
    use super::GroupCommit;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU32, Ordering};

    struct Log {
        group: GroupCommit,
        /// How many records are flushed (records 1..=flushed).
        flushed: AtomicU32,
    }

    fn flush(log: &Log, record: u32, appended: u32) {
        loop {
            if log.flushed.load(Ordering::SeqCst) >= record {
                return;
            }
            let seen = log.group.rounds();
            match log.group.lead() {
                Some(round) => {
                    log.flushed.fetch_max(appended, Ordering::SeqCst);
                    drop(round);
                    return;
                }
                None => log.group.wait_after(seen),
            }
        }
    }

    /// A `Durable` log's flush: the leader writes, announces its target as pending, hands the
    /// lead on and only then takes the sync turn and fdatasyncs; a flusher whose record lies
    /// below the pending target waits for the round instead of leading (writer/flush.rs).
    struct Pipelined {
        group: GroupCommit,
        /// The highest target written and waiting for its fdatasync.
        pending: AtomicU32,
        /// The sync turn.
        turn: loom::sync::Mutex<()>,
        flushed: AtomicU32,
    }

    fn flush_pipelined(log: &Pipelined, record: u32, appended: u32) {
        loop {
            let seen = log.group.rounds();
            if log.flushed.load(Ordering::SeqCst) >= record {
                return;
            }
            if log.pending.load(Ordering::SeqCst) >= record {
                log.group.wait_after(seen);
                continue;
            }
            match log.group.lead() {
                Some(mut round) => {
                    log.pending.fetch_max(appended, Ordering::SeqCst);
                    round.hand_on();
                    let turn = log.turn.lock().expect("loom model: lock poisoned");
                    log.flushed.fetch_max(appended, Ordering::SeqCst);
                    drop(turn);
                    drop(round);
                    return;
                }
                None => log.group.wait_after(seen),
            }
        }
    }

    #[test]
    fn every_flusher_returns_with_its_record_flushed_when_leaders_hand_on_before_syncing() {
        loom::model(|| {
            let log = Arc::new(Pipelined {
                group: GroupCommit::default(),
                pending: AtomicU32::new(0),
                turn: loom::sync::Mutex::new(()),
                flushed: AtomicU32::new(0),
            });
            let other = {
                let log = log.clone();
                loom::thread::spawn(move || flush_pipelined(&log, 1, 1))
            };
            flush_pipelined(&log, 2, 2);
            other.join().expect("flusher");
            assert_eq!(log.flushed.load(Ordering::SeqCst), 2);
        });
    }

    #[test]
    fn every_flusher_returns_with_its_record_flushed() {
        loom::model(|| {
            let log = Arc::new(Log {
                group: GroupCommit::default(),
                flushed: AtomicU32::new(0),
            });
            let other = {
                let log = log.clone();
                loom::thread::spawn(move || flush(&log, 1, 2))
            };
            flush(&log, 2, 2);
            other.join().expect("flusher");
            assert_eq!(log.flushed.load(Ordering::SeqCst), 2);
        });
    }
}
