//! Reservations: the insert lock, the insert position it guards, the end of the log it
//! publishes (`end`), and the insertion lanes (insertions.rs) that say which reservations are
//! still being sealed and copied. The insert lock is private here: an appender takes it only
//! through [`Reservations::reserve`], for a few lines of arithmetic, and the exclusive paths
//! (segment switch, key rotation, the open's resume) only through
//! [`Reservations::exclusive`], which waits for every insertion in progress first.
//!
//! Invariants this part keeps:
//! - `end` equals the insert position whenever the insert lock is free, and only grows;
//! - a reservation's start is published in its lane inside the hold that made it, before
//!   `end` moves past it, so `inserted_to` (the lower of `end` and the lowest lane) never
//!   passes a record still being copied;
//! - reservations are consecutive: each starts where the one before it ended.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam::utils::CachePadded;

use super::insertions::{InLane, Insertions};
use crate::Lsn;
use crate::format::Geometry;
use crate::line_ledger::LineU64;
use crate::lock_order::{self, Domain, OrderedGuard, OrderedMutex};

/// The insert lock's state: the end of the last record whose bytes are reserved (the next
/// record starts at or after it).
struct InsertPosition(Lsn);

pub(super) struct Reservations {
    lock: CachePadded<OrderedMutex<InsertPosition, { lock_order::INSERT }>>,
    /// The insert position as the last hold of the insert lock left it: `Wal::end_lsn`.
    end: CachePadded<LineU64>,
    lanes: Insertions,
}

impl Reservations {
    /// The log ends at `end`; `lanes` insertion lanes; the locks in `domain` (the log's).
    pub(super) fn new(end: Lsn, lanes: usize, domain: Domain) -> Reservations {
        Reservations {
            lock: CachePadded::new(OrderedMutex::new(InsertPosition(end), domain)),
            end: CachePadded::new(LineU64::named("insert_end", end.0)),
            lanes: Insertions::new(lanes, domain),
        }
    }

    /// The end of the log: the end of the last record whose bytes are reserved.
    pub(super) fn end(&self) -> Lsn {
        Lsn(self.end.load(Ordering::Acquire))
    }

    /// Claims an insertion lane, trying `hint`'s first.
    pub(super) fn claim_lane(&self, hint: usize) -> InLane<'_> {
        self.lanes.claim(hint)
    }

    /// Reserves consecutive places for records of `lens` bytes (at least one record, each
    /// at least a byte) at the insert position, in one hold of the insert lock, and publishes
    /// the reservation's start in `lane` inside it. Pushes each record's LSN to `lsns`
    /// (allocated by the caller, before the lock). `timed`: measure the hold, and return how
    /// long it was, in nanoseconds.
    pub(super) fn reserve(
        &self,
        geo: &Geometry,
        lens: &[usize],
        lane: &InLane<'_>,
        lsns: &mut Vec<Lsn>,
        timed: bool,
    ) -> Option<u64> {
        let (mut ins, since) = match timed {
            true => {
                let (ins, since) = super::flush::timed_lock(&self.lock);
                (ins, Some(since))
            }
            false => (self.lock.lock(), None),
        };
        let start = ins.0;
        let mut pos = start;
        for &len in lens {
            let lsn = geo.skip_headers(pos);
            lsns.push(lsn);
            pos = super::record_end(geo, lsn, len);
        }
        debug_assert!(
            pos > start && lsns.iter().all(|&lsn| lsn >= start && lsn < pos),
            "a reservation from {start} to {pos} places records outside it"
        );
        ins.0 = pos;
        lane.begin(start);
        self.end.store(pos.0, Ordering::Release);
        let held_ns = since.map(|since: Instant| since.elapsed().as_nanos() as u64);
        drop(ins);
        held_ns
    }

    /// A position through which every record is in the buffer: the end of the log, or the
    /// start of the lowest insertion still in progress. A record boundary.
    pub(super) fn inserted_to(&self) -> Lsn {
        // The end first: every reservation below it has published its start in its lane
        // before storing it (`reserve`), so the lanes read next show it, or it is done.
        let end = self.end.load(Ordering::SeqCst);
        Lsn(end).min(self.lanes.lowest_in_progress())
    }

    /// Waits until the record holding `lsn` (or, with `lsn` the end of the log, every record
    /// reserved) is in the buffer, and returns a record boundary through which everything
    /// is. Called with no lock of the log held: the insertions it waits for may need the
    /// write lock to make room.
    pub(super) fn inserted_through(&self, lsn: Lsn) -> Lsn {
        let end = self.end.load(Ordering::SeqCst);
        let need = if lsn.0 < end { lsn.0 + 1 } else { end };
        let now = self.inserted_to();
        if now.0 >= need {
            return now;
        }
        self.lanes.wait_finished(Lsn(need), None);
        self.inserted_to()
    }

    /// Waits until no insertion but `own`'s that started below `upto` is in progress
    /// ([`Insertions::wait_finished`]).
    pub(super) fn wait_finished(&self, upto: Lsn, own: Option<usize>) {
        self.lanes.wait_finished(upto, own);
    }

    /// Takes the insert lock and waits until no insertion is in progress: nothing is reserved
    /// while the returned guard lives, and everything reserved is in the buffer.
    pub(super) fn exclusive(&self) -> Exclusive<'_> {
        let guard = self.lock.lock();
        // With the insert lock held nothing new is reserved; the insertions already reserved
        // finish (they never take the insert lock again).
        self.lanes.wait_finished(guard.0, None);
        Exclusive {
            guard,
            end: &self.end,
        }
    }
}

/// The insert lock held with no insertion in progress ([`Reservations::exclusive`]).
pub(super) struct Exclusive<'a> {
    guard: OrderedGuard<'a, InsertPosition, { lock_order::INSERT }>,
    end: &'a LineU64,
}

impl Exclusive<'_> {
    /// The insert position.
    pub(super) fn pos(&self) -> Lsn {
        self.guard.0
    }

    /// Moves the insert position (and the end of the log) forward to `to`, past a control
    /// record this holder placed or a part of the log left unused.
    pub(super) fn move_to(&mut self, to: Lsn) {
        debug_assert!(
            to >= self.guard.0,
            "the insert position moves back from {} to {to}",
            self.guard.0
        );
        self.guard.0 = to;
        self.end.store(to.0, Ordering::Release);
    }
}
