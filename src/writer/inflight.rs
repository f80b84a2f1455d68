//! Write-outs in flight: ranges of the log reserved under the write lock and written after
//! it is released, and `written_to`, the position below which every range has landed.
//!
//! A range is registered under the write lock (so ranges are registered in LSN order, each
//! starting where the one before ended) in the [`Registry`] the write lock's state keeps, with
//! the stretch of the files its writes cover, from its first written byte to the end of its
//! last page image (a pagelevel page image writes zeros after its valid part, and so does the
//! first image of a page of a reused file; in the other cases an image ends with the range, so
//! ranges share bytes only where a page is written again from its header or has such an
//! image). A range that covers bytes of an earlier range still in flight is written only once
//! `written_to` has passed that range ([`InFlight::wait_clear`]): a page's image lands before
//! any later append to that page is issued, and a shorter image of a page never lands after a
//! longer one. Ranges that share no bytes are written in parallel.
//!
//! Landing takes no lock. `written_to` moves over a range only when it and every range before
//! it have landed: a range whose start `written_to` has reached moves it to its end with one
//! compare-and-swap (the usual case, one range in flight: the write-out's only write to a line
//! other threads write). A range that lands before an earlier one **parks**: it publishes its
//! end in the slot of its id and leaves; whoever then moves `written_to` to that range's start
//! carries it over, and the ranges parked after it. Each side writes first and reads the
//! other's word after a sequentially consistent fence (the carrier `written_to`, then the
//! slot; the parked range its slot, then `written_to`), so at least one of them sees the other
//! and no landed range is left behind. A carrier moves `written_to` only from the exact
//! position it set or read (a compare-and-swap from the parked range's start), so a slot
//! reused by a later range can never be read as this one's: a range `PARK_SLOTS` ids later is
//! registered only once `written_to` has passed this one, after which that compare-and-swap
//! fails. That argument needs every write to `written_to` after it is made to be a
//! read-modify-write (a compare-and-swap or `fetch_max`, never a plain store), so that each
//! continues the release sequence the registrant's read synchronises with. A range that fails never lands, and the log is poisoned, so `written_to` stops below
//! it for good ([`InFlight::abandon`] wakes the waiters).
//!
//! Threads that must wait for `written_to` announce themselves in `sleepers` and sleep on a
//! condition variable; a thread that moves `written_to` reads `sleepers` after a fence and
//! wakes them only when someone sleeps, so the usual landing writes nothing else.
//! `loom_model` checks the protocol: three ranges landing in every order, slots reused by later
//! ranges, and a range that never lands in a poisoned log.
//!
//! In the shared-line ledger (line_ledger.rs) `written_to`, the slots and `sleepers` are
//! counted wrappers, and the sleepers' lock is an `OrderedMutex` (its holds count as
//! "in-flight").

use std::collections::VecDeque;

use crossbeam::utils::CachePadded;

use super::insertions::sync::{Condvar, Mutex, Ordering, fence};
use crate::Lsn;
use crate::line_ledger::{LineBool, LineU32, LineU64};
use crate::lock_order::{self, Domain};

/// Slots for parked ranges, indexed by range id (a power of two). At most this many ranges are
/// registered and not yet passed by `written_to` (a registration beyond it waits under the
/// write lock for the oldest to be passed): at most one per thread writing (a `Buffered`
/// flush writes its own range, so one per committing thread), so past 64 such threads a
/// registration can wait under the write lock for the oldest range's pwrite; the wait is a
/// bound, not a queue.
const PARK_SLOTS: usize = 64;

/// A range registered and not yet known to be passed by `written_to`.
struct Entry {
    id: u64,
    end: Lsn,
    /// The stretch of the log its writes cover, `[lo, hi)` in LSNs (file offsets are LSNs
    /// less the segment's start, so LSN order is file order within a segment).
    lo: Lsn,
    hi: Lsn,
}

/// The ranges registered, kept in the write lock's state (so registration takes no lock of its
/// own): pruned at each registration of those `written_to` has passed.
#[derive(Default)]
pub(super) struct Registry {
    next_id: u64,
    ranges: VecDeque<Entry>,
}

/// A registered range, handed to [`InFlight::land`] once its bytes are written.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ticket {
    id: u64,
    start: Lsn,
    end: Lsn,
    /// The end of the last earlier range still in flight that covers some of this range's
    /// bytes, when it was registered: `written_to` must pass it before this range is written.
    after: Option<Lsn>,
}

impl Ticket {
    /// No earlier range in flight covered its bytes when it was registered: it may be written
    /// at once.
    pub(super) fn clear(&self) -> bool {
        self.after.is_none()
    }
}

/// A range that landed before an earlier one: `tag` is its id plus one (0: none yet), stored
/// after `end` and read before it.
struct Parked {
    tag: LineU64,
    end: LineU64,
}

/// `written_to`, the slots of parked ranges, and the threads waiting for `written_to`.
pub(super) struct InFlight {
    /// Everything before it has landed (been written to the files). Only grows.
    written: CachePadded<LineU64>,
    parked: Box<[CachePadded<Parked>]>,
    /// `parked.len() - 1`: a range's slot is its id masked with it.
    mask: u64,
    /// How many threads are about to sleep or asleep on `woken`.
    sleepers: CachePadded<LineU32>,
    /// Taken by sleepers to check and sleep, and by a waker to notify: nothing else is under
    /// it, and nothing is taken while it is held.
    sleep: Mutex<(), { lock_order::INFLIGHT }>,
    woken: Condvar,
}

impl InFlight {
    pub(super) fn new(landed_to: Lsn, domain: Domain) -> InFlight {
        InFlight::with_slots(landed_to, domain, PARK_SLOTS)
    }

    /// With `slots` slots for parked ranges (a power of two; fewer in the model checker's
    /// runs, so that slots are reused there).
    fn with_slots(landed_to: Lsn, domain: Domain, slots: usize) -> InFlight {
        debug_assert!(slots.is_power_of_two());
        InFlight {
            written: CachePadded::new(LineU64::named("written_to", landed_to.0)),
            mask: slots as u64 - 1,
            parked: (0..slots)
                .map(|_| {
                    CachePadded::new(Parked {
                        tag: LineU64::named("in-flight.parked", 0),
                        end: LineU64::named("in-flight.parked", 0),
                    })
                })
                .collect(),
            sleepers: CachePadded::new(LineU32::named("in-flight.sleepers", 0)),
            sleep: Mutex::new((), domain),
            woken: Condvar::new(),
        }
    }

    /// Everything before it has landed in the files.
    pub(super) fn written(&self) -> Lsn {
        Lsn(self.written.load(Ordering::Acquire))
    }

    /// Registers the range `[start, end)` whose writes cover `[lo, hi)`. Under the write lock
    /// (`registry` is its state's), right after the range was reserved. `None` when the log
    /// was poisoned while a registration beyond `PARK_SLOTS` ranges waited for the oldest.
    pub(super) fn register(
        &self,
        registry: &mut Registry,
        (start, end): (Lsn, Lsn),
        (lo, hi): (Lsn, Lsn),
        poisoned: &LineBool,
    ) -> Option<Ticket> {
        let id = registry.next_id;
        loop {
            let written = self.written();
            while registry.ranges.front().is_some_and(|r| r.end <= written) {
                registry.ranges.pop_front();
            }
            match registry.ranges.front() {
                Some(oldest) if id - oldest.id > self.mask => {
                    if !self.wait_landed(oldest.end, poisoned) {
                        return None;
                    }
                }
                _ => break,
            }
        }
        // A carrier moves `written_to` from a range's predecessor's end to its own end, never
        // reading its start: ranges in flight must follow each other without a gap. (A jump
        // over unused log, or the rewrite of the tail page at open, has none in flight.)
        debug_assert!(
            registry.ranges.back().is_none_or(|last| last.end == start),
            "range [{start}, {end}) registered after one in flight ending elsewhere"
        );
        debug_assert!(start < end, "an empty range [{start}, {end}) registered");
        registry.next_id += 1;
        // Conservative: a range that has landed but is parked still counts, and waiting for
        // `written_to` to pass it waits for every range before it too.
        let after = registry
            .ranges
            .iter()
            .filter(|r| r.lo < hi && lo < r.hi)
            .map(|r| r.end)
            .max();
        registry.ranges.push_back(Entry { id, end, lo, hi });
        Some(Ticket {
            id,
            start,
            end,
            after,
        })
    }

    /// Waits until every earlier range that covers bytes of `ticket`'s has landed. False when
    /// the log was poisoned meanwhile: the range must not be written.
    pub(super) fn wait_clear(&self, ticket: &Ticket, poisoned: &LineBool) -> bool {
        match ticket.after {
            Some(after) => self.wait_landed(after, poisoned),
            None => true,
        }
    }

    /// Marks `ticket`'s range landed: moves `written_to` over it (and over the ranges parked
    /// after it) if every range before it has landed, otherwise parks it for the thread that
    /// lands the last of those.
    pub(super) fn land(&self, ticket: &Ticket) {
        if self.pass(ticket.start, ticket.end) {
            self.carry(ticket.id + 1, ticket.end);
            return;
        }
        let slot = &self.parked[(ticket.id & self.mask) as usize];
        slot.end.store(ticket.end.0, Ordering::Release);
        slot.tag.store(ticket.id + 1, Ordering::Release);
        fence(Ordering::SeqCst);
        // A range before it may have landed since, and its carrier not have seen the slot.
        if self.pass(ticket.start, ticket.end) {
            self.carry(ticket.id + 1, ticket.end);
        }
    }

    /// Moves `written_to` to `end` if it has reached `start` (true also when it is at or past
    /// `end` already, carried there). False when a range before `start` is still in flight.
    fn pass(&self, start: Lsn, end: Lsn) -> bool {
        let mut seen = self.written.load(Ordering::SeqCst);
        loop {
            if seen < start.0 {
                return false;
            }
            if seen >= end.0 {
                return true;
            }
            match self
                .written
                .compare_exchange(seen, end.0, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
    }

    /// With `written_to` moved to `at`, the end of range `next - 1`: moves it on over range
    /// `next` and those after it, as long as they are parked, then wakes the sleepers.
    fn carry(&self, mut next: u64, mut at: Lsn) {
        loop {
            fence(Ordering::SeqCst);
            let slot = &self.parked[(next & self.mask) as usize];
            if slot.tag.load(Ordering::Acquire) != next + 1 {
                break;
            }
            let end = Lsn(slot.end.load(Ordering::Acquire));
            // From `at` exactly: if `written_to` moved meanwhile, whoever moved it carries on,
            // and the slot may already hold a later range.
            if self
                .written
                .compare_exchange(at.0, end.0, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                break;
            }
            at = end;
            next += 1;
        }
        self.wake();
    }

    /// Wakes the sleepers, if any: after `written_to` moved (a fence first, so a sleeper that
    /// announced itself before is seen, and one that announces itself after sees the move).
    fn wake(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.sleep.lock();
            self.woken.notify_all();
        }
    }

    /// Wakes every waiter after a range failed (the log is poisoned already): the range never
    /// lands, so `written_to` never passes it.
    pub(super) fn abandon(&self) {
        let _guard = self.sleep.lock();
        self.woken.notify_all();
    }

    /// Waits until everything before `target` has landed. False when the log was poisoned
    /// first. Every caller waits for ranges registered already.
    pub(super) fn wait_landed(&self, target: Lsn, poisoned: &LineBool) -> bool {
        if self.written() >= target {
            return true;
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut guard = self.sleep.lock();
        let landed = loop {
            if self.written.load(Ordering::SeqCst) >= target.0 {
                break true;
            }
            if poisoned.load(Ordering::Acquire) {
                break false;
            }
            guard = self.woken.wait(guard);
        };
        drop(guard);
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        landed
    }

    /// Moves `written_to` to `to` over a part of the log left unused (a segment switch, a
    /// resume on a fresh page). Called under the write lock (`registry` is its state's) with
    /// nothing in flight; false, and nothing moved, if a range is still in flight (the caller
    /// poisons the log: moving past a range that has not landed would let a flush return
    /// early).
    #[must_use]
    pub(super) fn jump(&self, registry: &Registry, to: Lsn) -> bool {
        let written = self.written();
        if registry.ranges.iter().any(|r| r.end > written) {
            return false;
        }
        self.written.fetch_max(to.0, Ordering::AcqRel);
        true
    }
}

/// The landing protocol under the model checker: `RUSTFLAGS="--cfg loom" cargo test --release
/// --lib loom_model` (`.ci/run` runs it). Ranges are registered in order, as under the write
/// lock, and land on other threads in every order loom can make, while the main thread waits
/// for the last one's end. A landed range left behind (no one carrying it) leaves the waiter
/// asleep for good, which loom reports as a deadlock (it does when either fence after a write
/// that the other side must see is removed); `written_to` passing a range before it landed
/// fails a lander's check.
#[cfg(all(test, loom))]
mod loom_model {
    use super::{InFlight, Registry, Ticket};
    use crate::Lsn;
    use crate::line_ledger::LineBool;
    use loom::sync::Arc;

    fn register(inflight: &InFlight, registry: &mut Registry, i: u64) -> Ticket {
        let range = (Lsn(i * 10), Lsn(i * 10 + 10));
        let poisoned = LineBool::new(false);
        inflight
            .register(registry, range, range, &poisoned)
            .expect("registered")
    }

    /// Lands `ticket`'s range, after checking that `written_to` has not passed it yet.
    fn land(inflight: &InFlight, ticket: Ticket) {
        assert!(
            inflight.written() <= ticket.start,
            "written_to {} passed a range at {} before it landed",
            inflight.written(),
            ticket.start
        );
        inflight.land(&ticket);
    }

    /// Runs `f` in every interleaving loom makes within `preemptions`, on a fresh `InFlight`
    /// with `slots` slots for parked ranges and its registry.
    fn check(preemptions: usize, slots: usize, f: fn(Arc<InFlight>, Registry)) {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(preemptions);
        model.check(move || {
            let domain = crate::lock_order::Domain::new();
            f(
                Arc::new(InFlight::with_slots(Lsn(0), domain, slots)),
                Registry::default(),
            );
        });
    }

    fn spawn_lander(inflight: &Arc<InFlight>, ticket: Ticket) -> loom::thread::JoinHandle<()> {
        let inflight = inflight.clone();
        loom::thread::spawn(move || land(&inflight, ticket))
    }

    #[test]
    fn every_landed_range_is_passed_and_none_early() {
        check(3, 4, |inflight, mut registry| {
            let landers: Vec<_> = (0..3)
                .map(|i| register(&inflight, &mut registry, i))
                .map(|ticket| spawn_lander(&inflight, ticket))
                .collect();
            assert!(inflight.wait_landed(Lsn(30), &LineBool::new(false)));
            for lander in landers {
                lander.join().expect("lander");
            }
            assert_eq!(inflight.written(), Lsn(30));
        });
    }

    /// With two slots, ranges 2 and 3 reuse the slots of ranges 0 and 1 (each registered once
    /// `written_to` has passed the range two before it, as `register` waits for): a carrier
    /// that read a slot before its reuse must not move `written_to` by what the new range
    /// stored there.
    #[test]
    fn a_reused_slot_is_never_read_as_its_old_range() {
        check(2, 2, |inflight, mut registry| {
            let mut landers = Vec::new();
            for i in 0..3 {
                let ticket = register(&inflight, &mut registry, i);
                landers.push(spawn_lander(&inflight, ticket));
            }
            let last = register(&inflight, &mut registry, 3);
            land(&inflight, last);
            assert!(inflight.wait_landed(Lsn(40), &LineBool::new(false)));
            for lander in landers {
                lander.join().expect("lander");
            }
            assert_eq!(inflight.written(), Lsn(40));
        });
    }

    /// A range that never lands (its writer failed: the log is poisoned, then `abandon`), a
    /// range after it that lands, a thread waiting for both, and a registration beyond the two
    /// slots: the waiter and the registration both give up, and `written_to` stays below the
    /// failed range.
    #[test]
    fn a_range_that_never_lands_releases_every_waiter_once_poisoned() {
        check(3, 2, |inflight, mut registry| {
            let poisoned = Arc::new(LineBool::new(false));
            let _failed = register(&inflight, &mut registry, 0);
            let second = register(&inflight, &mut registry, 1);
            let failer = {
                let (inflight, poisoned) = (inflight.clone(), poisoned.clone());
                loom::thread::spawn(move || {
                    poisoned.store(true, loom::sync::atomic::Ordering::Release);
                    inflight.abandon();
                })
            };
            let lander = spawn_lander(&inflight, second);
            let waiter = {
                let (inflight, poisoned) = (inflight.clone(), poisoned.clone());
                loom::thread::spawn(move || assert!(!inflight.wait_landed(Lsn(20), &poisoned)))
            };
            let range = (Lsn(20), Lsn(30));
            assert!(
                inflight
                    .register(&mut registry, range, range, &poisoned)
                    .is_none()
            );
            failer.join().expect("failer");
            lander.join().expect("lander");
            waiter.join().expect("waiter");
            assert_eq!(inflight.written(), Lsn(0));
        });
    }
}
