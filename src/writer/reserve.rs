//! Reservations: the insert position (`end`, the end of the log), the insertion lanes
//! (insertions.rs) that say which reservations are still being sealed and copied, and the
//! insert lock, which only the exclusive paths hold. An appender reserves its bytes with one
//! compare-and-swap of `end` ([`Reservations::reserve`]: a few lines of arithmetic, then the
//! swap; PostgreSQL's `ReserveXLogInsertLocation` does the same arithmetic under a spinlock);
//! the exclusive paths (segment switch, key rotation, the open's resume) take the insert lock
//! through [`Reservations::exclusive`], which closes `end` to swaps ([`CLOSED`]) and waits for
//! every insertion in progress. The lock is private here.
//!
//! Invariants this part keeps:
//! - `end` (less [`CLOSED`]) is the insert position and only grows; every value it takes is
//!   a record boundary;
//! - a reservation's start is published in its lane before the swap that moves `end` past
//!   it, so `inserted_to` (the lower of `end` and the lowest lane) never passes a record still
//!   being copied; a lane's start may be lower than its reservation's (a lost swap's), never
//!   higher;
//! - reservations are consecutive: each starts where the one before it ended;
//! - while [`CLOSED`] is set nothing is reserved, and the insert lock is held, or the log is
//!   shut down (`Wal::shutdown`, [`Reservations::shut`]): then it stays set, and nothing is
//!   reserved again. An append whose reservation succeeded did so before the shut, and the
//!   shutdown's final flush, which reads the end after it, covers that record.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam::utils::CachePadded;

use super::insertions::sync::{Mutex, MutexGuard};
use super::insertions::{InLane, Insertions};
use crate::Lsn;
use crate::format::Geometry;
use crate::line_ledger::LineU64;
use crate::lock_order::{self, Domain};

/// The bit of `end` an exclusive holder sets: no swap expects it, so no appender reserves
/// while it is set; an appender that reads it waits for the insert lock.
const CLOSED: u64 = 1 << 63;
/// The log was shut down ([`Reservations::shut`]): nothing was reserved.
#[derive(Debug)]
pub(super) struct Shut;

pub(super) struct Reservations {
    /// Held by an exclusive holder ([`Reservations::exclusive`]); an appender that finds
    /// `end` closed takes it only to wait for that holder to finish, and to read whether the
    /// log is shut down (what it holds: set once, under it, by [`Reservations::shut`]).
    lock: CachePadded<Mutex<bool, { lock_order::INSERT }>>,
    /// The insert position, the end of the last record whose bytes are reserved
    /// (`Wal::end_lsn`), with [`CLOSED`] while an exclusive holder holds the insert lock.
    end: CachePadded<LineU64>,
    lanes: Insertions,
}

impl Reservations {
    /// The log ends at `end`; `lanes` insertion lanes; the locks in `domain` (the log's).
    pub(super) fn new(end: Lsn, lanes: usize, domain: Domain) -> Reservations {
        Reservations {
            lock: CachePadded::new(Mutex::new(false, domain)),
            end: CachePadded::new(LineU64::named("insert_end", end.0)),
            lanes: Insertions::new(lanes, domain),
        }
    }

    /// The end of the log: the end of the last record whose bytes are reserved.
    pub(super) fn end(&self) -> Lsn {
        Lsn(self.end.load(Ordering::Acquire) & !CLOSED)
    }

    /// The end of the log, or `None` while an exclusive holder has the insert position closed:
    /// its control record may then be in the buffer, and reserved for writing, past the end
    /// shown (`Positions::check_order` compares with the end only when it is open).
    pub(super) fn end_if_open(&self) -> Option<Lsn> {
        let end = self.end.load(Ordering::Acquire);
        (end & CLOSED == 0).then_some(Lsn(end))
    }

    /// Claims an insertion lane, trying `hint`'s first.
    pub(super) fn claim_lane(&self, hint: usize) -> InLane<'_> {
        self.lanes.claim(hint)
    }

    /// Reserves consecutive places for records of `lens` bytes (at least one record, each
    /// at least a byte) at the insert position, with one compare-and-swap of `end` when no
    /// other appender swaps in between, and publishes the reservation's start in `lane`
    /// before the swap. Pushes each record's LSN to `lsns` (allocated by the caller, with
    /// room for them). `timed`: measure the reservation, and return how long it took, in
    /// nanoseconds. [`Shut`] once the log is shut down, with nothing reserved.
    pub(super) fn reserve(
        &self,
        geo: &Geometry,
        lens: &[usize],
        lane: &InLane<'_>,
        lsns: &mut super::Lsns,
        timed: bool,
    ) -> Result<Option<u64>, Shut> {
        let since = timed.then(Instant::now);
        let mut seen = self.end.load(Ordering::Acquire);
        loop {
            if seen & CLOSED != 0 {
                // An exclusive holder: wait for it with nothing in progress on this lane (it
                // waits for every insertion in progress), then read the position it left,
                // unless it shut the log down.
                lane.retract();
                if *self.lock.lock() {
                    return Err(Shut);
                }
                seen = self.end.load(Ordering::Acquire);
                continue;
            }
            let start = Lsn(seen);
            lsns.clear();
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
            lane.begin(start);
            // SeqCst, as `inserted_to`'s read of `end`: a thread that reads the new position
            // then reads the lanes, and sees this one's start (stored before) or its finish.
            match self
                .end
                .compare_exchange(seen, pos.0, Ordering::SeqCst, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        Ok(since.map(|since: Instant| since.elapsed().as_nanos() as u64))
    }

    /// A position through which every record is in the buffer: the end of the log, or the
    /// start of the lowest insertion still in progress. A record boundary.
    pub(super) fn inserted_to(&self) -> Lsn {
        // The end first: every reservation below it published its start in its lane before
        // its swap (`reserve`), so the lanes read next show it (or a lower start), or it is
        // done.
        let end = self.end.load(Ordering::SeqCst) & !CLOSED;
        Lsn(end).min(self.lanes.lowest_in_progress())
    }

    /// Waits until the record holding `lsn` (or, with `lsn` the end of the log, every record
    /// reserved) is in the buffer, and returns a record boundary through which everything
    /// is. Called with no lock of the log held: the insertions it waits for may need the
    /// write lock to make room.
    pub(super) fn inserted_through(&self, lsn: Lsn) -> Lsn {
        let end = self.end.load(Ordering::SeqCst) & !CLOSED;
        let need = if lsn.0 < end { lsn.0 + 1 } else { end };
        let mut now = self.inserted_to();
        // Again until it reaches `need`: a lane may show a start older than the position its
        // appender is about to swap from (it read the position before another appender's
        // swap, and raises its start only when its own swap fails), and a wait that began
        // before that lane's start was published does not cover it. Each round waits for the
        // lanes still below `need`; a stale start is raised or the lane goes idle, and either
        // wakes its waiters.
        while now.0 < need {
            self.lanes.wait_finished(Lsn(need), None);
            now = self.inserted_to();
        }
        now
    }

    /// Waits until no insertion but `own`'s that started below `upto` is in progress
    /// ([`Insertions::wait_finished`]).
    pub(super) fn wait_finished(&self, upto: Lsn, own: Option<usize>) {
        self.lanes.wait_finished(upto, own);
    }

    /// Takes the insert lock, closes `end` to reservations and waits until no insertion is in
    /// progress: nothing is reserved while the returned guard lives, and everything reserved
    /// is in the buffer.
    pub(super) fn exclusive(&self) -> Exclusive<'_> {
        let guard = self.lock.lock();
        let seen = match *guard {
            // Shut down: closed for good, nothing is swapped.
            true => self.end.load(Ordering::SeqCst),
            // An add, not a store: appenders may still be swapping `end` forward. The bit is
            // clear (only the insert lock's holder sets it, and clears it before releasing
            // the lock unless it shuts the log), so adding it sets it.
            false => self.end.fetch_add(CLOSED, Ordering::SeqCst),
        };
        debug_assert!(
            *guard == (seen & CLOSED != 0),
            "the insert lock's holder found end closed in a log not shut down"
        );
        let pos = Lsn(seen & !CLOSED);
        // Nothing new is reserved now; the insertions already reserved finish (an appender
        // that lost its swap to the close leaves its lane idle before it waits for the lock).
        self.lanes.wait_finished(pos, None);
        Exclusive {
            guard,
            end: &self.end,
            pos,
        }
    }

    /// Shuts the log to appends for good (`end` stays [`CLOSED`]) and returns once every
    /// insertion already reserved is in the buffer: a flush of the end read after this covers
    /// every append that ever succeeds. Appenders refused from then on get [`Shut`] without
    /// having reserved.
    pub(super) fn shut(&self) {
        let mut exclusive = self.exclusive();
        *exclusive.guard = true;
    }
}

/// The insert lock held, `end` closed to reservations, with no insertion in progress
/// ([`Reservations::exclusive`]). Dropping it opens `end` again at the position it moved to,
/// unless the log is shut down.
pub(super) struct Exclusive<'a> {
    /// Whether the log is shut down: `end` then stays closed when this is dropped.
    guard: MutexGuard<'a, bool, { lock_order::INSERT }>,
    end: &'a LineU64,
    pos: Lsn,
}

impl Exclusive<'_> {
    /// The insert position.
    pub(super) fn pos(&self) -> Lsn {
        self.pos
    }

    /// Moves the insert position (and the end of the log) forward to `to`, past a control
    /// record this holder placed or a part of the log left unused.
    pub(super) fn move_to(&mut self, to: Lsn) {
        debug_assert!(
            to >= self.pos,
            "the insert position moves back from {} to {to}",
            self.pos
        );
        self.pos = to;
        self.end.store(to.0 | CLOSED, Ordering::Release);
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        // Opened before the lock is released (fields drop after this): an appender woken by
        // the lock finds `end` open, or the log shut down.
        let shut = match *self.guard {
            true => CLOSED,
            false => 0,
        };
        self.end.store(self.pos.0 | shut, Ordering::SeqCst);
    }
}

/// The reservation protocol under the model checker: `RUSTFLAGS="--cfg loom" cargo test
/// --release --lib loom_model` (`.ci/run` runs it). Two appenders each reserve a record with
/// [`Reservations::reserve`] (the swap), mark it copied and leave their lane, while a third
/// thread takes [`Reservations::exclusive`], moves the insert position on and drops it. Loom
/// explores every interleaving: the exclusive holder must find every reservation below its
/// position copied and none made while it holds the lock, and the reservations must be
/// consecutive, none overlapping another or the stretch the holder skipped.
#[cfg(all(test, loom))]
mod loom_model {
    use super::Reservations;
    use crate::Lsn;
    use crate::format::Geometry;
    use crate::lock_order::Domain;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU64, Ordering};

    const GEO: Geometry = Geometry {
        page_size: 512,
        segment_size: 2048,
    };
    const SKIP: u64 = 16;

    struct Log {
        reservations: Reservations,
        /// Each appender's reservation, `start << 32 | end`, once its record is copied.
        copied: [AtomicU64; 2],
    }

    fn append(log: &Log, t: usize) {
        let lane = log.reservations.claim_lane(t);
        let mut lsns = super::super::Lsns::new();
        if log
            .reservations
            .reserve(&GEO, &[40 + 8 * t], &lane, &mut lsns, false)
            .is_err()
        {
            // Shut down: nothing reserved, nothing to copy.
            return;
        }
        let end = super::super::record_end(&GEO, lsns[0], 40 + 8 * t);
        log.copied[t].store(lsns[0].0 << 32 | end.0, Ordering::Release);
        drop(lane);
    }

    /// A log of `lanes` lanes starting at its first record's place, and two appenders
    /// reserving a record each.
    fn start_appenders(lanes: usize) -> (Lsn, Arc<Log>, Vec<loom::thread::JoinHandle<()>>) {
        let first = GEO.skip_headers(Lsn(0));
        let log = Arc::new(Log {
            reservations: Reservations::new(first, lanes, Domain::new()),
            copied: [AtomicU64::new(0), AtomicU64::new(0)],
        });
        let appenders = (0..2)
            .map(|t| {
                let log = log.clone();
                loom::thread::spawn(move || append(&log, t))
            })
            .collect();
        (first, log, appenders)
    }

    fn check(lanes: usize) {
        // Interleavings with up to five preemptions (loom's advice for models of this size:
        // unbounded, this one ran for more than ten minutes without finishing).
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(5);
        model.check(move || {
            let (first, log, appenders) = start_appenders(lanes);
            let (pos, moved) = {
                let mut ins = log.reservations.exclusive();
                let pos = ins.pos();
                let done: Vec<(u64, u64)> = log
                    .copied
                    .iter()
                    .map(|c| c.load(Ordering::Acquire))
                    .filter(|&c| c != 0)
                    .map(|c| (c >> 32, c & 0xFFFF_FFFF))
                    .collect();
                // Every reservation below the position is copied, and none is above it.
                let below: u64 = done.iter().map(|(s, e)| e - s).sum();
                let reserved = pos.0 - first.0;
                assert!(
                    done.iter().all(|&(_, e)| e <= pos.0),
                    "a reservation past {pos} while the insert lock is held: {done:?}"
                );
                assert_eq!(
                    below, reserved,
                    "reserved up to {pos}, copied only {done:?}"
                );
                let moved = pos + SKIP;
                ins.move_to(moved);
                (pos, moved)
            };
            for appender in appenders {
                appender.join().expect("appender");
            }
            let mut all: Vec<(u64, u64)> = log
                .copied
                .iter()
                .map(|c| c.load(Ordering::Acquire))
                .map(|c| (c >> 32, c & 0xFFFF_FFFF))
                .collect();
            all.sort();
            let mut at = first.0;
            for (s, e) in all {
                if s >= pos.0 && at <= pos.0 {
                    at = moved.0;
                }
                assert_eq!(
                    s, at,
                    "reservations are consecutive and skip the moved stretch"
                );
                at = e;
            }
            // The end: after the last reservation, or the moved position if none followed it.
            let end = if at <= pos.0 { moved } else { Lsn(at) };
            assert_eq!(log.reservations.end(), end);
        });
    }

    #[test]
    fn reservations_are_consecutive_and_an_exclusive_holder_sees_them_all_copied() {
        check(2);
    }

    #[test]
    fn reservations_are_consecutive_sharing_one_lane() {
        check(1);
    }
    /// A flusher's `inserted_through(end)` beside two appenders reserving by swap: it must
    /// return a position at or past the end it was asked for, with every record below it
    /// copied. A flusher that read the end after one appender's swap may find the other's
    /// lane showing the position that appender read before that swap; a single wait then
    /// returned that stale start, below the flusher's own record, and the flush returned
    /// before its record was written. One yield before the read lets loom schedule it after
    /// a swap.
    #[test]
    fn inserted_through_reaches_the_end_it_was_asked_for() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(4);
        model.check(move || {
            let (first, log, appenders) = start_appenders(2);
            loom::thread::yield_now();
            let end = log.reservations.end();
            let got = log.reservations.inserted_through(end);
            assert!(got >= end, "inserted_through({end}) returned {got}");
            let copied: u64 = log
                .copied
                .iter()
                .map(|c| c.load(Ordering::Acquire))
                .filter(|&c| c != 0 && (c & 0xFFFF_FFFF) <= got.0)
                .map(|c| (c & 0xFFFF_FFFF) - (c >> 32))
                .sum();
            assert_eq!(
                copied,
                got.0 - first.0,
                "not everything below {got} is copied"
            );
            for appender in appenders {
                appender.join().expect("appender");
            }
        });
    }

    /// `Wal::shutdown` beside two appenders: it shuts the log to appends, then flushes
    /// through the end it reads. Every append that reserved must lie below that end and be
    /// copied by then (the flush covers it); every other append must have been refused with
    /// nothing reserved, and the end must never move after the shut.
    #[test]
    fn an_append_beside_a_shutdown_is_covered_by_its_flush_or_refused() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(4);
        model.check(move || {
            let (first, log, appenders) = start_appenders(2);
            log.reservations.shut();
            let end = log.reservations.end();
            let got = log.reservations.inserted_through(end);
            assert_eq!(got, end, "everything reserved is in the buffer");
            let copied_below: u64 = log
                .copied
                .iter()
                .map(|c| c.load(Ordering::Acquire))
                .filter(|&c| c != 0)
                .map(|c| {
                    assert!(c & 0xFFFF_FFFF <= end.0, "a record copied past {end}");
                    (c & 0xFFFF_FFFF) - (c >> 32)
                })
                .sum();
            assert_eq!(copied_below, end.0 - first.0, "a hole below {end}");
            for appender in appenders {
                appender.join().expect("appender");
            }
            // No append reserved after the shut: the end stayed, and no record lies past it.
            assert_eq!(log.reservations.end(), end);
            assert!(log.copied.iter().all(|c| {
                let c = c.load(Ordering::Acquire);
                c == 0 || c & 0xFFFF_FFFF <= end.0
            }));
        });
    }
}
