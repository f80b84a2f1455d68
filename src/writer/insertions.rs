//! Insertions in progress: which appenders have reserved bytes of the log and are still
//! sealing or copying them, so that a write-out takes only bytes every insertion below it
//! has finished (PostgreSQL's insertion locks and `WaitXLogInsertionsToFinish`, in a few
//! lines).
//!
//! An appender claims a **lane** (one of a fixed set, each on a cache line of its own, so
//! appenders on different lanes write no shared line here), stores in it the insert position
//! it read ([`InLane::begin`]) and then reserves its bytes from there with a compare-and-swap
//! of that position (reserve.rs); a lost swap stores the newer position and tries again. It
//! seals and copies with no lock of the log held, then leaves the lane idle ([`InLane`]'s
//! drop). So:
//!
//! - every reservation below an insert position a thread read is either finished or visible
//!   in its lane with its start (or with a lower one: a lost swap's, never a higher);
//! - a reservation made later starts at or after that position.
//!
//! [`Insertions::wait_finished`]`(upto)` waits until no lane holds a start below `upto`;
//! after it, every byte below `upto` that was reserved when `upto` was read is copied. A
//! waiter only ever waits for reservations that start before its own (it passes its own lane
//! as `except`, and asks only for positions below its own reservation's end), so waits follow
//! the order of the log and never form a cycle.
//!
//! A lane is waited on through its gate lock and condition variable: a waiter counts itself in
//! the lane's `waiters` and then checks the lane, under the gate, before it sleeps; the
//! inserter that leaves a lane marks it idle and then reads `waiters`, and only when it counts
//! any takes the gate and wakes them. Each side puts a sequentially consistent fence between its
//! two steps, so one of the two sees the other (the waiter the idle lane, or the inserter the
//! waiter), and the wake, under
//! the gate, cannot fall between a waiter's check and its sleep: no wake-up is lost, and an
//! uncontended finish takes no lock. The gate is on the
//! lane's own cache line, so an uncontended append writes no line another appender writes
//! beyond the insert position's. `loom_model` below checks the protocol with every interleaving
//! of two inserters and a waiter, and of an inserter whose start rises and two waiters.
//!
//! In the writer's lock order (writer/mod.rs, checked in debug builds by lock_order.rs) a
//! lane's owner lock is level [`LANE`], claimed before the insert lock, one per thread; its
//! gate is [`LANE_GATE`], taken with no lock held but the thread's own lane or the insert lock.

use crate::Lsn;
use crate::line_ledger::{LineU32, LineU64};
use crate::lock_order::{Domain, LANE, LANE_GATE};
use crossbeam::utils::CachePadded;
use sync::{Condvar, Mutex, MutexGuard, Ordering};

/// A lane with no insertion in progress.
pub(super) const IDLE: Lsn = Lsn(u64::MAX);

struct Lane {
    /// Start of the insertion in progress on this lane (the insert position its reservation
    /// began at: the end of the record before it), or `IDLE`. A shared-line wrapper
    /// (line_ledger.rs): its appender writes it twice per insertion, and a waiter reads it.
    start: LineU64,
    /// Held by the appender using this lane, from its claim to its finish.
    owner: Mutex<(), LANE>,
    /// The number of threads waiting on `changed`, raised and lowered under `gate`.
    waiters: LineU32,
    /// Held by a waiter from counting itself to its sleep, and by a thread waking waiters.
    gate: Mutex<(), LANE_GATE>,
    changed: Condvar,
}

/// The lanes of one log.
pub(super) struct Insertions {
    lanes: Box<[CachePadded<Lane>]>,
}

/// A claimed lane. Dropping it ends the insertion: the lane is idle again and its waiters
/// are woken. The writer poisons the log before dropping it on a failed insertion, so a
/// waiter never writes out a record that was not copied whole.
pub(super) struct InLane<'a> {
    insertions: &'a Insertions,
    index: usize,
    _owner: MutexGuard<'a, (), LANE>,
}

impl Insertions {
    /// `count` lanes (at least one): as many appenders as lanes seal and copy at once; more
    /// wait for a lane.
    pub(super) fn new(count: usize, domain: Domain) -> Insertions {
        let lanes = (0..count.max(1))
            .map(|_| {
                CachePadded::new(Lane {
                    start: LineU64::named("lane.start", IDLE.0),
                    owner: Mutex::new((), domain),
                    waiters: LineU32::named("lane.waiters", 0),
                    gate: Mutex::new((), domain),
                    changed: Condvar::new(),
                })
            })
            .collect();
        Insertions { lanes }
    }

    /// Claims a lane, trying `hint` first (a per-thread number, so a thread keeps finding the
    /// lane it used last free), then the others; when all are busy, waits for `hint`'s.
    pub(super) fn claim(&self, hint: usize) -> InLane<'_> {
        let n = self.lanes.len();
        for k in 0..n {
            let index = (hint + k) % n;
            if let Some(owner) = self.lanes[index].owner.try_lock() {
                return InLane {
                    insertions: self,
                    index,
                    _owner: owner,
                };
            }
        }
        let index = hint % n;
        InLane {
            insertions: self,
            index,
            _owner: self.lanes[index].owner.lock(),
        }
    }

    /// The lowest start of an insertion in progress, or `IDLE`: everything below it that was
    /// reserved when the caller read the insert position is copied. Reads each lane once.
    pub(super) fn lowest_in_progress(&self) -> Lsn {
        self.lanes
            .iter()
            .map(|lane| lane.start.load(Ordering::Acquire))
            .min()
            .map_or(IDLE, Lsn)
    }

    /// Waits until no lane but `except` holds an insertion that started below `upto`.
    /// `upto` must not exceed the insert position as the caller last read it (after its own
    /// reservation, if it made one): later reservations start at or after it, so a lane that
    /// goes idle and is claimed again never holds a start below `upto`.
    pub(super) fn wait_finished(&self, upto: Lsn, except: Option<usize>) {
        for (index, lane) in self.lanes.iter().enumerate() {
            if Some(index) != except {
                lane.wait_at_least(upto.0);
            }
        }
    }
}

impl Lane {
    fn wait_at_least(&self, upto: u64) {
        // Idle (or a later insertion) already: the copy that ended before the store of
        // `IDLE` happened before this load.
        if self.start.load(Ordering::Acquire) >= upto {
            return;
        }
        let mut gate = self.gate.lock();
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // Between the count and the check, as `publish` has one between its store and its
        // read of the count: of the two, one sees the other.
        sync::fence(Ordering::SeqCst);
        while self.start.load(Ordering::Acquire) < upto {
            gate = self.changed.wait(gate);
        }
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        drop(gate);
    }

    /// Stores `start` (a rise while busy, or `IDLE`) and wakes the lane's waiters if any count
    /// themselves.
    fn publish(&self, start: u64) {
        self.start.store(start, Ordering::Release);
        sync::fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) > 0 {
            let _gate = self.gate.lock();
            self.changed.notify_all();
        }
    }

    /// Marks the lane idle and wakes its waiters, if there are any.
    fn finish(&self) {
        self.publish(IDLE.0);
    }
}

impl InLane<'_> {
    /// Publishes the start of the reservation this lane's appender is about to make: the insert
    /// position it read, stored before its compare-and-swap moves the position on from there
    /// (`Reservations::reserve`), so a thread that reads the insert position after that swap
    /// also sees the start here. An attempt that lost the swap to another appender publishes
    /// the newer position it read instead: a start only rises while the lane is busy, and a
    /// rise wakes the lane's waiters (under its gate, as `finish` does), since one whose bound
    /// the new start passes must not sleep until the insertion ends (it may be what that
    /// insertion waits for).
    pub(super) fn begin(&self, start: Lsn) {
        let lane = self.lane();
        if lane.start.load(Ordering::Relaxed) == IDLE.0 {
            // Nobody sleeps on an idle lane. Release: a thread that reads the insert position
            // the swap stores after this (Acquire) sees it.
            lane.start.store(start.0, Ordering::Release);
            return;
        }
        lane.publish(start.0);
    }

    /// Leaves the lane idle, waking its waiters, but keeps it claimed: an appender that found
    /// the log closed to reservations (an exclusive holder waits for every insertion in
    /// progress) waits for it with no insertion in progress.
    pub(super) fn retract(&self) {
        let lane = self.lane();
        if lane.start.load(Ordering::Relaxed) != IDLE.0 {
            lane.finish();
        }
    }

    /// This lane's index, for [`Insertions::wait_finished`]'s `except`.
    pub(super) fn index(&self) -> usize {
        self.index
    }

    fn lane(&self) -> &Lane {
        &self.insertions.lanes[self.index]
    }
}

impl Drop for InLane<'_> {
    fn drop(&mut self) {
        let lane = self.lane();
        if lane.start.load(Ordering::Relaxed) != IDLE.0 {
            lane.finish();
        }
    }
}

/// The synchronisation primitives, from loom when the crate is built for the model checker
/// (`RUSTFLAGS="--cfg loom"`), otherwise parking_lot's and the standard library's. One API for
/// both: `lock` returns the guard, `wait` takes and returns it.
#[cfg(not(loom))]
pub(super) mod sync {
    pub(in crate::writer) use crate::lock_order::{
        OrderedGuard as MutexGuard, OrderedMutex as Mutex,
    };
    pub(in crate::writer) use std::sync::atomic::{Ordering, fence};

    pub(in crate::writer) struct Condvar(parking_lot::Condvar);

    impl Condvar {
        pub(in crate::writer) fn new() -> Self {
            Condvar(parking_lot::Condvar::new())
        }
        pub(in crate::writer) fn wait<'a, T, const LEVEL: u8>(
            &self,
            mut guard: MutexGuard<'a, T, LEVEL>,
        ) -> MutexGuard<'a, T, LEVEL> {
            guard.wait(&self.0);
            guard
        }
        pub(in crate::writer) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

#[cfg(loom)]
pub(super) mod sync {
    pub(in crate::writer) use loom::sync::atomic::{Ordering, fence};
    use std::ops::{Deref, DerefMut};

    /// loom's mutex, with the level of the lock order as the writer's mutexes carry it (the
    /// model checks interleavings, not the order).
    pub(in crate::writer) struct Mutex<T, const LEVEL: u8>(loom::sync::Mutex<T>);

    pub(in crate::writer) struct MutexGuard<'a, T, const LEVEL: u8>(loom::sync::MutexGuard<'a, T>);

    impl<T, const LEVEL: u8> Deref for MutexGuard<'_, T, LEVEL> {
        type Target = T;
        fn deref(&self) -> &T {
            &self.0
        }
    }

    impl<T, const LEVEL: u8> DerefMut for MutexGuard<'_, T, LEVEL> {
        fn deref_mut(&mut self) -> &mut T {
            &mut self.0
        }
    }

    // Lock poisoning cannot happen in the model (no code here panics while holding a lock),
    // so a poisoned lock is a failed model run.
    impl<T, const LEVEL: u8> Mutex<T, LEVEL> {
        pub(in crate::writer) fn new(value: T, _domain: crate::lock_order::Domain) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }
        pub(in crate::writer) fn lock(&self) -> MutexGuard<'_, T, LEVEL> {
            MutexGuard(self.0.lock().expect("loom model: lock poisoned"))
        }
        pub(in crate::writer) fn try_lock(&self) -> Option<MutexGuard<'_, T, LEVEL>> {
            self.0.try_lock().ok().map(MutexGuard)
        }
    }

    pub(in crate::writer) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(in crate::writer) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }
        pub(in crate::writer) fn wait<'a, T, const LEVEL: u8>(
            &self,
            guard: MutexGuard<'a, T, LEVEL>,
        ) -> MutexGuard<'a, T, LEVEL> {
            MutexGuard(self.0.wait(guard.0).expect("loom model: lock poisoned"))
        }
        pub(in crate::writer) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

/// The protocol under the model checker: `RUSTFLAGS="--cfg loom" cargo test --release --lib
/// writer::insertions` (`.ci/run` runs it). Two appenders reserve a record each (a position
/// counter under a mutex stands in for the insert lock) and mark it copied; a third thread
/// reads the insert position, waits for the insertions below it, and must then find every
/// record below that position copied. Loom explores every interleaving, so a lost wake-up
/// (the waiter sleeping forever) or a missed insertion fails the test.
#[cfg(all(test, loom))]
mod loom_model {
    use super::Insertions;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicBool, Ordering};

    struct Log {
        insertions: Insertions,
        /// The insert position: the next record starts here.
        pos: loom::sync::Mutex<u64>,
        /// Whether the record at position 0, 1 was copied.
        copied: [AtomicBool; 2],
    }

    fn append(log: &Log, hint: usize) {
        let lane = log.insertions.claim(hint);
        let start = {
            let mut pos = log.pos.lock().expect("model lock");
            let start = *pos;
            *pos += 1;
            lane.begin(crate::Lsn(start));
            start
        };
        log.copied[start as usize].store(true, Ordering::Relaxed);
        drop(lane);
    }

    fn check(lanes: usize) {
        loom::model(move || {
            let log = Arc::new(Log {
                insertions: Insertions::new(lanes, crate::lock_order::Domain::new()),
                pos: loom::sync::Mutex::new(0),
                copied: [AtomicBool::new(false), AtomicBool::new(false)],
            });
            let appenders: Vec<_> = (0..2)
                .map(|hint| {
                    let log = log.clone();
                    loom::thread::spawn(move || append(&log, hint))
                })
                .collect();
            let upto = *log.pos.lock().expect("model lock");
            log.insertions.wait_finished(crate::Lsn(upto), None);
            for at in 0..upto {
                assert!(
                    log.copied[at as usize].load(Ordering::Relaxed),
                    "record {at} below {upto} not copied after the wait"
                );
            }
            assert!(log.insertions.lowest_in_progress() >= crate::Lsn(upto));
            for appender in appenders {
                appender.join().expect("appender");
            }
        });
    }

    /// Two threads wait on one lane while its appender raises its start (a lost swap's newer
    /// position) and then finishes: the lane's waiter count and gate must wake both, with the
    /// copy visible, whatever the order.
    #[test]
    fn two_waiters_on_one_lane_both_wake_across_a_rise() {
        // Up to three preemptions: unbounded, the four threads' interleavings ran for more than
        // ten minutes.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let insertions = Arc::new(Insertions::new(1, crate::lock_order::Domain::new()));
            let copied = Arc::new(AtomicBool::new(false));
            let lane = insertions.claim(0);
            lane.begin(crate::Lsn(1));
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    let (insertions, copied) = (insertions.clone(), copied.clone());
                    loom::thread::spawn(move || {
                        insertions.wait_finished(crate::Lsn(3), None);
                        assert!(copied.load(Ordering::Relaxed), "woken before the copy");
                    })
                })
                .collect();
            lane.begin(crate::Lsn(2));
            copied.store(true, Ordering::Relaxed);
            drop(lane);
            for waiter in waiters {
                waiter.join().expect("waiter");
            }
        });
    }

    #[test]
    fn a_waiter_sees_every_insertion_below_the_position_it_read_one_lane_each() {
        check(2);
    }

    #[test]
    fn a_waiter_sees_every_insertion_below_the_position_it_read_sharing_one_lane() {
        check(1);
    }
}

#[cfg(test)]
mod tests {
    use super::{IDLE, Insertions};
    use crate::Lsn;
    use crate::lock_order::Domain;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};

    #[test]
    fn an_idle_log_has_nothing_in_progress_and_never_waits() {
        let insertions = Insertions::new(4, Domain::new());
        assert_eq!(insertions.lowest_in_progress(), IDLE);
        insertions.wait_finished(Lsn(u64::MAX - 1), None);
    }

    #[test]
    fn the_lowest_start_in_progress_is_what_bounds_a_write_out() {
        let insertions = Insertions::new(4, Domain::new());
        let a = insertions.claim(0);
        a.begin(Lsn(100));
        // The second appender on a thread of its own: a thread holds one lane at a time (the
        // lock order, checked in debug builds).
        let (begun, done) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            let a_index = a.index();
            let (insertions, begun, done) = (&insertions, &begun, &done);
            s.spawn(move || {
                let b = insertions.claim(0);
                assert_ne!(a_index, b.index(), "a busy lane is not claimed twice");
                b.begin(Lsn(40));
                begun.wait();
                done.wait();
            });
            begun.wait();
            assert_eq!(insertions.lowest_in_progress(), Lsn(40));
            // Nothing starts below 40: no wait.
            insertions.wait_finished(Lsn(40), None);
            done.wait();
        });
        // Its own lane is skipped: an appender making room never waits for itself.
        assert_eq!(insertions.lowest_in_progress(), Lsn(100));
        insertions.wait_finished(Lsn(100), None);
        insertions.wait_finished(Lsn(200), Some(a.index()));
        drop(a);
        assert_eq!(insertions.lowest_in_progress(), IDLE);
    }

    #[test]
    fn a_waiter_wakes_when_the_insertion_below_it_finishes() {
        let insertions = Arc::new(Insertions::new(2, Domain::new()));
        let copied = Arc::new(AtomicU64::new(0));
        let lane = insertions.claim(0);
        lane.begin(Lsn(10));
        let waiter = {
            let (insertions, copied) = (insertions.clone(), copied.clone());
            std::thread::spawn(move || {
                insertions.wait_finished(Lsn(11), None);
                copied.load(Ordering::SeqCst)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        copied.store(1, Ordering::SeqCst);
        drop(lane);
        assert_eq!(
            waiter.join().unwrap(),
            1,
            "the waiter returned before the copy"
        );
    }
}
