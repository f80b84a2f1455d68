//! Group commit without a lock: a flusher becomes a round's leader by setting the leading bit
//! of `state` (compare-and-swap) and flushes everything in the buffer for everyone; the others
//! sleep on `state` until the round count above that bit moves, then find their record
//! flushed or lead the next round.
//!
//! `state` is one word: bit 0 says a leader is under way, the bits above it count the rounds
//! ended. Ending a round adds one to it (which clears the leader's bit and carries into the
//! count: one write where a flag and a counter took two) and, only when someone sleeps, wakes
//! them all with one call (a futex wake on Linux, through `atomic-wait`): a follower wakes
//! without a mutex to take again, where a condition variable would hand each woken follower a
//! mutex in turn. A leader that hands the lead on before its round ends (a `Durable` leader,
//! before its fdatasync) clears its bit then, and its round's end adds a round alone, leaving
//! the bit to whoever leads meanwhile. A follower announces itself in `sleepers` and then reads
//! `state`; the leader adds to `state` and then reads `sleepers`; a sequentially consistent
//! fence between the two steps on each side makes one of them see the other, and the sleep
//! compares `state` in the kernel, so a change after the follower's last read makes it return
//! at once (a change of the leading bit alone sends it back to sleep: only a round's end wakes
//! sleepers). `loom_model` checks this with every interleaving of two flushers.
//!
//! Both are written by every flusher, so they are shared-line wrappers (line_ledger.rs),
//! counted with the feature `line-ledger`; the futex wait and wake on `state` are not counted.

use crate::line_ledger::LineU32;
use sync::{Ordering, fence};

/// `state`'s bit saying a leader is under way.
const LEADING: u32 = 1;
/// One round ended, in `state`.
const ROUND: u32 = 2;

pub(super) struct GroupCommit {
    state: LineU32,
    sleepers: LineU32,
    #[cfg(loom)]
    park: sync::Park,
}

impl Default for GroupCommit {
    fn default() -> GroupCommit {
        GroupCommit {
            state: LineU32::named("group.state", 0),
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
            // The bit is this leader's: nobody else clears it.
            self.group.state.fetch_sub(LEADING, Ordering::SeqCst);
        }
    }
}

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        let group = self.group;
        // This leader's bit, still set, plus one: the bit cleared and the count carried on.
        // Handed on, the bit is another leader's or clear: a round alone.
        let end = match self.handed_on {
            false => ROUND - LEADING,
            true => ROUND,
        };
        group.state.fetch_add(end, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if group.sleepers.load(Ordering::SeqCst) > 0 {
            group.wake_all();
        }
    }
}

impl GroupCommit {
    /// The number of rounds ended so far (modulo 2^31): read before trying to lead, passed to
    /// [`GroupCommit::wait_after`] if another thread leads.
    pub(super) fn rounds(&self) -> u32 {
        self.state.load(Ordering::SeqCst) / ROUND
    }

    /// Makes the caller the leader of a round, if no round is under way.
    pub(super) fn lead(&self) -> Option<RoundEnd<'_>> {
        let mut seen = self.state.load(Ordering::Relaxed);
        loop {
            if seen & LEADING != 0 {
                return None;
            }
            match self.state.compare_exchange(
                seen,
                seen | LEADING,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Some(RoundEnd {
                        group: self,
                        handed_on: false,
                    });
                }
                // A round ended meanwhile (its count moved), or another flusher leads now.
                Err(now) => seen = now,
            }
        }
    }

    /// Sleeps until a round ends after `seen` rounds had ended (at once if one has). Called
    /// after [`GroupCommit::lead`] failed: a round that had not ended when `seen` was read,
    /// or a later one, was under way then, and its end moves the count.
    pub(super) fn wait_after(&self, seen: u32) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        loop {
            let state = self.state.load(Ordering::SeqCst);
            if state / ROUND != seen {
                break;
            }
            self.sleep(state);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    #[cfg(not(loom))]
    fn sleep(&self, state: u32) {
        atomic_wait::wait(self.state.raw(), state);
    }

    #[cfg(not(loom))]
    fn wake_all(&self) {
        atomic_wait::wake_all(self.state.raw());
    }

    #[cfg(loom)]
    fn sleep(&self, state: u32) {
        self.park.sleep(self.state.raw(), state);
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

    /// A `Durable` log's flush: the leader writes, takes the sync turn, announces its target
    /// as pending, hands the lead on and fdatasyncs; a flusher whose record lies below the
    /// pending target waits for the round instead of leading (writer/flush.rs).
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
                    // The write-out, then the turn; holding it, the announcement and the
                    // hand-on, then the fdatasync.
                    let turn = log.turn.lock().expect("loom model: lock poisoned");
                    log.pending.fetch_max(appended, Ordering::SeqCst);
                    round.hand_on();
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
