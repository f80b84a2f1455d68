//! The writer's mutexes, each with a fixed level, and the check of the order they are taken
//! in. The order itself, and why it holds, is documented once, in the header comment of
//! writer/mod.rs; the levels below are its numbers.
//!
//! In debug builds every acquisition (`lock`, and a successful `try_lock`) checks the order
//! against a thread-local stack of the levels this thread holds: it panics if the thread holds
//! a lock that may not be held when this one is taken (by default, one of the same or a later
//! level), then pushes its level; the guard's drop removes it. So every test that writes a log
//! checks the order as a side effect. In release builds [`OrderedMutex`] and [`OrderedGuard`]
//! are parking_lot's `Mutex` and `MutexGuard` in a newtype, and the check is compiled out.
//!
//! The order is one log's: each `Wal` puts its mutexes in a [`Domain`] of their own, and the
//! check compares a lock only with the locks this thread holds in the same domain. A thread
//! that works on two logs at once (a `Storage` whose writes append to another log) holds the
//! write lock of one while it takes the insert lock of the other, which is no deadlock.
//!
//! With the cargo feature `line-ledger`, every hold is counted in the shared-line ledger
//! (line_ledger.rs): two writes to the lock word (acquisition and release, both counted when
//! the hold begins), two more per condition-variable wait, and a line transfer when another
//! thread took it last.
//!
//! Condition variables wait on the guard itself ([`OrderedGuard::wait`]): the mutex is
//! released while the thread sleeps, and retaken in the same place of the order, so the level
//! stays on the stack.

use std::ops::{Deref, DerefMut};

use parking_lot::{Condvar, Mutex, MutexGuard};

/// An insertion lane's owner lock (writer/insertions.rs): claimed before the insert lock and
/// held until the copy ends. A thread holds one lane at a time.
pub(crate) const LANE: u8 = 0;
/// The insert lock (`Reservations`, writer/reserve.rs).
pub(crate) const INSERT: u8 = 1;
/// The sync turn (`Syncs`, writer/durable.rs), held across a round of fdatasyncs, and taken
/// before the write lock by whoever fdatasyncs under the write lock.
pub(crate) const SYNC_TURN: u8 = 2;
/// The write lock (`Wal::write`).
pub(crate) const WRITE: u8 = 3;
/// The in-flight lock (`InFlight::state`, writer/inflight.rs).
pub(crate) const INFLIGHT: u8 = 4;
/// A buffer page's slot lock (`PageBuffer`, writer/buffer.rs): the page's `rem_len` and
/// pagelevel IV, set once per page by the appender entering it and read by the write-out (the
/// copies into the page take no lock). A thread holds one slot at a time.
pub(crate) const SLOT: u8 = 5;
/// The IV source's prefix table (`IvSource::later`, crypto.rs).
pub(crate) const IV_PREFIX: u8 = 6;
/// The poison cause (`Poison`, writer/poison.rs): taken under any of the above but the
/// in-flight lock, and nothing is taken while it is held.
pub(crate) const POISON: u8 = 7;
/// An insertion lane's gate lock, which its condition variable waits on: taken with no lock
/// of the log held but the thread's own lane (an inserter leaving it, an appender waiting to
/// make room) or the insert lock (the exclusive paths waiting for the insertions in
/// progress); nothing is taken while it is held.
pub(crate) const LANE_GATE: u8 = 8;
/// The preparer's state (writer/prepare.rs), outside the order: taken with no lock held but
/// the thread's own lane, the insert lock, the sync turn and the write lock; nothing is taken
/// while it is held.
pub(crate) const PREPARER: u8 = 9;
/// The list of segments written since their last fdatasync (writer/durable.rs): taken where a
/// range lands (with no lock held but the thread's own lane, the insert lock, the sync turn
/// and the write lock), under the sync turn or the write lock; nothing is taken while it is
/// held.
pub(crate) const DIRTY: u8 = 10;

/// The levels a thread may hold when it takes a lock of `level`, one bit each.
#[cfg(debug_assertions)]
fn may_hold(level: u8) -> u32 {
    let bit = |l: u8| 1u32 << l;
    match level {
        POISON => (bit(POISON) - 1) & !bit(INFLIGHT),
        LANE_GATE => bit(LANE) | bit(INSERT),
        PREPARER => bit(LANE) | bit(INSERT) | bit(SYNC_TURN) | bit(WRITE),
        DIRTY => bit(LANE) | bit(INSERT) | bit(SYNC_TURN) | bit(WRITE),
        _ => bit(level) - 1,
    }
}

/// The name of a level, for the check's message and the shared-line ledger's label.
#[cfg(any(debug_assertions, feature = "line-ledger"))]
const fn name(level: u8) -> &'static str {
    match level {
        LANE => "lane",
        INSERT => "insert",
        WRITE => "write",
        INFLIGHT => "in-flight",
        SLOT => "slot",
        IV_PREFIX => "IV prefix",
        POISON => "poison cause",
        LANE_GATE => "lane gate",
        PREPARER => "preparer",
        SYNC_TURN => "sync turn",
        DIRTY => "dirty list",
        _ => "unknown",
    }
}

/// The mutexes one order applies to: one log's. In release builds it is empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Domain {
    #[cfg(debug_assertions)]
    id: u64,
}

impl Domain {
    /// A domain no other mutex is in yet.
    pub(crate) fn new() -> Domain {
        #[cfg(debug_assertions)]
        {
            use std::sync::atomic::{AtomicU64, Ordering};
            static NEXT: AtomicU64 = AtomicU64::new(1);
            Domain {
                id: NEXT.fetch_add(1, Ordering::Relaxed),
            }
        }
        #[cfg(not(debug_assertions))]
        Domain {}
    }
}

/// A mutex at level `LEVEL` of the writer's lock order.
pub(crate) struct OrderedMutex<T, const LEVEL: u8> {
    mutex: Mutex<T>,
    #[cfg(debug_assertions)]
    domain: u64,
    /// The thread that last took it, for the shared-line ledger (line_ledger.rs).
    #[cfg(feature = "line-ledger")]
    line: crate::line_ledger::LastWriter,
}

impl<T, const LEVEL: u8> OrderedMutex<T, LEVEL> {
    /// A mutex of `domain`: checked against the locks of that domain only.
    pub(crate) fn new(value: T, domain: Domain) -> Self {
        #[cfg(not(debug_assertions))]
        let _ = domain;
        OrderedMutex {
            mutex: Mutex::new(value),
            #[cfg(debug_assertions)]
            domain: domain.id,
            #[cfg(feature = "line-ledger")]
            line: crate::line_ledger::LastWriter::new(),
        }
    }

    /// Takes the lock; in debug builds, first panics if this thread holds a lock that may not
    /// be held when this one is taken.
    #[inline]
    pub(crate) fn lock(&self) -> OrderedGuard<'_, T, LEVEL> {
        #[cfg(debug_assertions)]
        held::check(self.domain, LEVEL);
        // The hold's acquisition and release, counted before it so that its timing does not
        // hold the counting.
        #[cfg(feature = "line-ledger")]
        self.line.wrote_n(name(LEVEL), 2);
        let guard = self.mutex.lock();
        #[cfg(debug_assertions)]
        held::push(self.domain, LEVEL);
        OrderedGuard {
            guard,
            #[cfg(debug_assertions)]
            domain: self.domain,
            #[cfg(feature = "line-ledger")]
            line: &self.line,
        }
    }

    /// Takes the lock if it is free; in debug builds, checked as [`OrderedMutex::lock`] is
    /// (a `try_lock` out of order cannot deadlock, but it says the order is not the one
    /// documented).
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<OrderedGuard<'_, T, LEVEL>> {
        #[cfg(debug_assertions)]
        held::check(self.domain, LEVEL);
        let guard = self.mutex.try_lock()?;
        #[cfg(debug_assertions)]
        held::push(self.domain, LEVEL);
        // A failed attempt only reads the lock word; a hold writes it twice.
        #[cfg(feature = "line-ledger")]
        self.line.wrote_n(name(LEVEL), 2);
        Some(OrderedGuard {
            guard,
            #[cfg(debug_assertions)]
            domain: self.domain,
            #[cfg(feature = "line-ledger")]
            line: &self.line,
        })
    }
}

/// A held [`OrderedMutex`]; dropping it releases the lock (and, in debug builds, its level).
pub(crate) struct OrderedGuard<'a, T, const LEVEL: u8> {
    guard: MutexGuard<'a, T>,
    #[cfg(debug_assertions)]
    domain: u64,
    #[cfg(feature = "line-ledger")]
    line: &'a crate::line_ledger::LastWriter,
}

impl<T, const LEVEL: u8> OrderedGuard<'_, T, LEVEL> {
    /// Counts a condition-variable wait in the shared-line ledger: a release of the lock
    /// word and its acquisition again.
    #[inline]
    fn waited(&self) {
        #[cfg(feature = "line-ledger")]
        self.line.wrote_n(name(LEVEL), 2);
    }
}

impl<T, const LEVEL: u8> OrderedGuard<'_, T, LEVEL> {
    /// Waits on `condvar`, releasing the lock while asleep.
    #[inline]
    pub(crate) fn wait(&mut self, condvar: &Condvar) {
        condvar.wait(&mut self.guard);
        self.waited();
    }

    /// Waits on `condvar` for at most `timeout`, releasing the lock while asleep (the order's
    /// tests: the writer's waits have no timeout).
    #[cfg(all(test, any(debug_assertions, feature = "line-ledger")))]
    pub(crate) fn wait_for(
        &mut self,
        condvar: &Condvar,
        timeout: std::time::Duration,
    ) -> parking_lot::WaitTimeoutResult {
        let result = condvar.wait_for(&mut self.guard, timeout);
        self.waited();
        result
    }
}

impl<T, const LEVEL: u8> Deref for OrderedGuard<'_, T, LEVEL> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T, const LEVEL: u8> DerefMut for OrderedGuard<'_, T, LEVEL> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(debug_assertions)]
impl<T, const LEVEL: u8> Drop for OrderedGuard<'_, T, LEVEL> {
    fn drop(&mut self) {
        held::pop(self.domain, LEVEL);
    }
}

/// The domains and levels held by the current thread, in the order they were taken (debug
/// builds only).
#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;

    thread_local! {
        static HELD: RefCell<Vec<(u64, u8)>> = const { RefCell::new(Vec::new()) };
    }

    /// Panics if this thread holds a level of `domain` that may not be held when `level` is
    /// taken. Not while the thread unwinds: a guard dropped then may take a lock (a `Wal`
    /// dropped on the way out closes), and a second panic would abort the process.
    pub(super) fn check(domain: u64, level: u8) {
        if std::thread::panicking() {
            return;
        }
        let allowed = super::may_hold(level);
        // During thread-local destruction there is nothing left to check against.
        let _ = HELD.try_with(|held| {
            let held = held.borrow();
            let mut mine = held.iter().filter(|&&(d, _)| d == domain).map(|&(_, l)| l);
            if let Some(bad) = mine.find(|&l| allowed & (1u32 << l) == 0) {
                let names: Vec<&str> = held
                    .iter()
                    .filter(|&&(d, _)| d == domain)
                    .map(|&(_, l)| super::name(l))
                    .collect();
                let (bad, taking) = (super::name(bad), super::name(level));
                drop(held);
                panic!(
                    "lock order broken: taking the {taking} lock ({level}) while holding the \
                     {bad} lock (held, in order: {names:?}; see the header of writer/mod.rs)"
                );
            }
        });
    }

    pub(super) fn push(domain: u64, level: u8) {
        let _ = HELD.try_with(|held| held.borrow_mut().push((domain, level)));
    }

    /// Removes the most recent hold of `level` in `domain`: guards may be dropped in any order.
    pub(super) fn pop(domain: u64, level: u8) {
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(i) = held.iter().rposition(|&e| e == (domain, level)) {
                held.remove(i);
            }
        });
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn taking_the_locks_in_order_and_again_after_release_passes() {
        let log = Domain::new();
        let lane = OrderedMutex::<(), LANE>::new((), log);
        let insert = OrderedMutex::<u32, INSERT>::new(0, log);
        let write = OrderedMutex::<u32, WRITE>::new(0, log);
        let slot = OrderedMutex::<u32, SLOT>::new(0, log);
        let poison = OrderedMutex::<u32, POISON>::new(0, log);
        let gate = OrderedMutex::<u32, LANE_GATE>::new(0, log);
        let preparer = OrderedMutex::<u32, PREPARER>::new(0, log);
        {
            let _l = lane.lock();
            let i = insert.lock();
            drop(gate.lock());
            let w = write.lock();
            // Released out of order: the insert lock goes first.
            drop(i);
            drop(preparer.lock());
            let _s = slot.try_lock().expect("free");
            let _p = poison.lock();
            drop(w);
        }
        // Everything released: the insert lock may be taken again, after the write lock.
        let w = write.lock();
        drop(w);
        let _i = insert.lock();
    }

    #[test]
    #[should_panic(
        expected = "lock order broken: taking the insert lock (1) while holding the \
                               write lock"
    )]
    fn taking_the_insert_lock_while_holding_the_write_lock_panics_in_debug_builds() {
        let log = Domain::new();
        let insert = OrderedMutex::<u32, INSERT>::new(0, log);
        let write = OrderedMutex::<u32, WRITE>::new(0, log);
        let _w = write.lock();
        let _i = insert.lock();
    }

    #[test]
    #[should_panic(
        expected = "lock order broken: taking the slot lock (5) while holding the \
                               slot lock"
    )]
    fn holding_two_slot_locks_panics_in_debug_builds() {
        let log = Domain::new();
        let a = OrderedMutex::<u32, SLOT>::new(0, log);
        let b = OrderedMutex::<u32, SLOT>::new(0, log);
        let _a = a.lock();
        let _b = b.try_lock();
    }

    #[test]
    #[should_panic(
        expected = "lock order broken: taking the poison cause lock (7) while \
                               holding the in-flight lock"
    )]
    fn the_poison_cause_under_the_in_flight_lock_panics_in_debug_builds() {
        let log = Domain::new();
        let inflight = OrderedMutex::<u32, INFLIGHT>::new(0, log);
        let poison = OrderedMutex::<u32, POISON>::new(0, log);
        let _f = inflight.lock();
        let _p = poison.lock();
    }

    #[test]
    #[should_panic(
        expected = "lock order broken: taking the preparer lock (9) while holding \
                               the in-flight lock"
    )]
    fn the_preparer_under_the_in_flight_lock_panics_in_debug_builds() {
        let log = Domain::new();
        let inflight = OrderedMutex::<u32, INFLIGHT>::new(0, log);
        let preparer = OrderedMutex::<u32, PREPARER>::new(0, log);
        let _f = inflight.lock();
        let _p = preparer.lock();
    }

    #[test]
    fn a_condition_variable_wait_keeps_the_level_held() {
        let log = Domain::new();
        let write = OrderedMutex::<u32, WRITE>::new(0, log);
        let condvar = Condvar::new();
        let mut w = write.lock();
        let timed_out = w.wait_for(&condvar, std::time::Duration::from_millis(1));
        assert!(timed_out.timed_out());
        *w += 1;
        let result = std::panic::catch_unwind(|| {
            let insert = OrderedMutex::<u32, INSERT>::new(0, log);
            drop(insert.lock());
        });
        assert!(
            result.is_err(),
            "the write lock is still held after the wait"
        );
    }

    #[test]
    fn the_locks_of_two_logs_are_not_ordered_with_each_other() {
        let (one, two) = (Domain::new(), Domain::new());
        let write = OrderedMutex::<u32, WRITE>::new(0, one);
        let insert = OrderedMutex::<u32, INSERT>::new(0, two);
        let _w = write.lock();
        let _i = insert.lock();
    }
}

/// The shared-line ledger's count of mutex holds (line_ledger.rs).
#[cfg(all(test, feature = "line-ledger"))]
mod ledger_tests {
    use super::*;
    use crate::line_ledger::{LineCounts, take_thread_counts, take_thread_sites};

    #[test]
    fn a_mutex_hold_counts_two_writes_and_a_transfer_when_another_thread_held_it_last() {
        let lock = OrderedMutex::<u32, INSERT>::new(0, Domain::new());
        take_thread_counts();
        *lock.lock() += 1;
        assert_eq!(
            take_thread_counts(),
            LineCounts {
                writes: 2,
                transfers: 0
            }
        );
        std::thread::scope(|s| {
            s.spawn(|| *lock.lock() += 1);
        });
        *lock.lock() += 1;
        assert_eq!(
            take_thread_sites(),
            vec![(
                "insert",
                LineCounts {
                    writes: 2,
                    transfers: 1
                }
            )]
        );
    }

    #[test]
    fn a_condition_variable_wait_counts_a_release_and_an_acquisition_more() {
        let lock = OrderedMutex::<u32, WRITE>::new(0, Domain::new());
        let condvar = Condvar::new();
        take_thread_counts();
        let mut held = lock.lock();
        let _ = held.wait_for(&condvar, std::time::Duration::from_millis(1));
        drop(held);
        assert_eq!(take_thread_counts().writes, 4);
    }
}
