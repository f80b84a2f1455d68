//! Write-outs in flight: ranges of the log reserved under the write lock and written after
//! it is released, and the position below which every range has landed.
//!
//! A range is registered (under the write lock, so ranges are registered in LSN order, each
//! starting where the one before ended) with the stretch of the files its writes cover, from
//! its first written byte to the end of its last page image (a pagelevel page image writes
//! zeros after its valid part, and so does the first image of a page of a reused file; in the
//! other cases an image ends with the range, so ranges share bytes only where a page is written
//! again from its header or has such an image). Its writer then waits
//! until no earlier range that is still in flight covers any of the same bytes
//! ([`InFlight::wait_clear`]): a page's image lands before any later append to that page is
//! issued, and a shorter image of a page never lands after a longer one. Ranges that share no bytes are written in parallel. `landed_to` moves over a
//! range only when it and every range before it have landed; a range that failed never lands,
//! and the log is poisoned, so `landed_to` stops below it for good.
//!
//! In the shared-line ledger (line_ledger.rs) every thread that registers, lands or waits
//! writes the in-flight lock's line (its holds are counted as "in-flight"), and each landing
//! raises `written_to`, which this part owns (a wrapper: counted).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam::utils::CachePadded;
use parking_lot::Condvar;

use crate::Lsn;
use crate::line_ledger::{LineBool, LineU64};
use crate::lock_order::{self, Domain, OrderedMutex};

struct Range {
    id: u64,
    /// End of the reserved range (an LSN).
    end: Lsn,
    /// The stretch of the log its writes cover, `[lo, hi)` in LSNs (file offsets are LSNs
    /// less the segment's start, so LSN order is file order within a segment).
    lo: Lsn,
    hi: Lsn,
    landed: bool,
}

struct State {
    /// Everything before it has landed (been written to the files).
    landed_to: Lsn,
    next_id: u64,
    /// Ranges not yet passed by `landed_to`, oldest first.
    ranges: VecDeque<Range>,
}

/// Condition variables per range: range `id` signals `changed[id % WAKE_SLOTS]` when it lands
/// (for the writers that wait for it before writing) and when `landed_to` passes it (for the
/// flushers that wait for it), so a landing wakes the threads waiting for that range, not
/// every waiter (on 2 cores with 8 committing threads, waking all of them at each landing cost
/// more CPU than the writes). Two ranges sharing a slot only cause a spurious wake-up.
const WAKE_SLOTS: usize = 16;

/// The ranges in flight, with condition variables signalled when one lands or is abandoned.
/// Its lock is taken under the insert or write lock or none, and nothing is taken while it is
/// held.
pub(super) struct InFlight {
    state: OrderedMutex<State, { lock_order::INFLIGHT }>,
    changed: [Condvar; WAKE_SLOTS],
    /// `landed_to`, readable without the lock (the writer's `written_to`): stored under the
    /// lock, so it only grows.
    written: CachePadded<LineU64>,
}

fn slot(id: u64) -> usize {
    (id % WAKE_SLOTS as u64) as usize
}

impl InFlight {
    pub(super) fn new(landed_to: Lsn, domain: Domain) -> InFlight {
        InFlight {
            state: OrderedMutex::new(
                State {
                    landed_to,
                    next_id: 0,
                    ranges: VecDeque::new(),
                },
                domain,
            ),
            changed: std::array::from_fn(|_| Condvar::new()),
            written: CachePadded::new(LineU64::named("written_to", landed_to.0)),
        }
    }

    /// Everything before it has landed in the files.
    pub(super) fn written(&self) -> Lsn {
        Lsn(self.written.load(Ordering::Acquire))
    }

    /// Registers a range ending at `end` whose writes cover `[lo, hi)`; returns its id and
    /// whether it is clear already: no range still in flight covers any of its bytes. Ranges
    /// in flight only land, never appear before it, so a range clear now stays clear, and its
    /// writer need not call [`InFlight::wait_clear`] (one hold of this lock less per
    /// write-out). Called under the write lock, right after the range was reserved.
    pub(super) fn register(&self, end: Lsn, lo: Lsn, hi: Lsn) -> (u64, bool) {
        let mut state = self.state.lock();
        let id = state.next_id;
        state.next_id += 1;
        let clear = !state
            .ranges
            .iter()
            .any(|r| !r.landed && r.lo < hi && lo < r.hi);
        state.ranges.push_back(Range {
            id,
            end,
            lo,
            hi,
            landed: false,
        });
        (id, clear)
    }

    /// Waits until no range registered before `id` that is still in flight covers any byte
    /// range `id` covers. False when the log was poisoned meanwhile: the range must not be
    /// written.
    pub(super) fn wait_clear(&self, id: u64, poisoned: &LineBool) -> bool {
        let mut state = self.state.lock();
        loop {
            if poisoned.load(Ordering::Acquire) {
                return false;
            }
            let Some(me) = state.ranges.iter().position(|r| r.id == id) else {
                return true;
            };
            let (lo, hi) = (state.ranges[me].lo, state.ranges[me].hi);
            let blocker = state
                .ranges
                .iter()
                .take(me)
                .rev()
                .find(|r| !r.landed && r.lo < hi && lo < r.hi)
                .map(|r| r.id);
            let Some(blocker) = blocker else {
                return true;
            };
            state.wait(&self.changed[slot(blocker)]);
        }
    }

    /// Marks range `id` landed, moves `landed_to` over every landed range at the front and
    /// publishes it in `written` (inside this lock, so it only grows).
    pub(super) fn land(&self, id: u64) {
        let mut state = self.state.lock();
        if let Some(range) = state.ranges.iter_mut().find(|r| r.id == id) {
            range.landed = true;
        }
        let mut wake = 1u32 << slot(id);
        while state.ranges.front().is_some_and(|r| r.landed) {
            if let Some(range) = state.ranges.pop_front() {
                state.landed_to = state.landed_to.max(range.end);
                wake |= 1 << slot(range.id);
            }
        }
        self.written.fetch_max(state.landed_to.0, Ordering::AcqRel);
        drop(state);
        for (i, changed) in self.changed.iter().enumerate() {
            if wake & (1 << i) != 0 {
                changed.notify_all();
            }
        }
    }

    /// Wakes every waiter after a range failed (the log is poisoned already): the range stays
    /// in flight for good, so `landed_to` never passes it.
    pub(super) fn abandon(&self) {
        let _state = self.state.lock();
        for changed in &self.changed {
            changed.notify_all();
        }
    }

    /// Waits until everything before `target` has landed. False when the log was poisoned
    /// first.
    pub(super) fn wait_landed(&self, target: Lsn, poisoned: &LineBool) -> bool {
        let mut state = self.state.lock();
        loop {
            if state.landed_to >= target {
                return true;
            }
            if poisoned.load(Ordering::Acquire) {
                return false;
            }
            // The first range reaching `target`: `landed_to` passes `target` when it passes
            // that range, and that range signals then.
            match state.ranges.iter().find(|r| r.end >= target).map(|r| r.id) {
                Some(id) => state.wait(&self.changed[slot(id)]),
                // Not reserved yet (no caller waits for that): look again shortly rather
                // than wait for a signal that may never come.
                None => {
                    let _ = state.wait_for(&self.changed[0], Duration::from_millis(1));
                }
            }
        }
    }

    /// Moves `landed_to` (and `written`) to `to` over a part of the log left unused (a
    /// segment switch, a resume on a fresh page). Called under the write lock with nothing in
    /// flight; false, and nothing moved, if a range is still in flight (the caller poisons
    /// the log: moving past a range that has not landed would let a flush return early).
    #[must_use]
    pub(super) fn jump(&self, to: Lsn) -> bool {
        let mut state = self.state.lock();
        if !state.ranges.is_empty() {
            return false;
        }
        state.landed_to = state.landed_to.max(to);
        self.written.fetch_max(state.landed_to.0, Ordering::AcqRel);
        true
    }
}
