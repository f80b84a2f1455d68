//! How far the log is flushed and synced: `flushed` (the record boundary through which
//! `flush`'s guarantee holds) and `synced` (through which the files are fdatasync'ed, the
//! durable hint page headers carry). The other positions belong to the parts that move them:
//! the end of the log and `inserted_to` to the reservations (reserve.rs), `written` to the
//! write-outs in flight (inflight.rs), `reserved_to` to the write lock's state.
//!
//! Both only grow: they are raised (`fetch_max`), never stored, so a thread that finishes an
//! older round after a newer one cannot move them back. The ordering of all positions
//! (writer/mod.rs) is checked by [`Positions::check_order`] in debug builds.

use std::sync::atomic::Ordering;

use crossbeam::utils::CachePadded;

use crate::Lsn;
use crate::line_ledger::LineU64;

pub(super) struct Positions {
    flushed: CachePadded<LineU64>,
    synced: CachePadded<LineU64>,
}

/// The positions of the whole log at one moment, as a thread holding the write lock sees
/// them, for [`Positions::check_order`].
pub(super) struct Seen {
    /// The end of the log, or `None` while an exclusive holder has the insert position closed
    /// (a segment switch copying its record may make room, and so reserve and write, past the
    /// end it has not moved yet): then nothing is compared with it.
    pub(super) end: Option<Lsn>,
    pub(super) written: Lsn,
    pub(super) reserved: Lsn,
}

impl Positions {
    /// A log flushed and synced through `end` (where the open left it).
    pub(super) fn new(end: Lsn) -> Positions {
        Positions {
            flushed: CachePadded::new(LineU64::named("flushed_to", end.0)),
            synced: CachePadded::new(LineU64::named("synced_to", end.0)),
        }
    }

    pub(super) fn flushed(&self) -> Lsn {
        Lsn(self.flushed.load(Ordering::Acquire))
    }

    pub(super) fn synced(&self) -> Lsn {
        Lsn(self.synced.load(Ordering::Acquire))
    }

    /// Raises the flushed position to `to` (a record boundary everything before which is
    /// written, and in `Durable` mode synced), if it is lower.
    pub(super) fn raise_flushed(&self, to: Lsn) {
        self.flushed.fetch_max(to.0, Ordering::AcqRel);
    }

    /// Raises the synced position to `to` (a record boundary everything before which an
    /// fdatasync that returned covers), if it is lower.
    pub(super) fn raise_synced(&self, to: Lsn) {
        self.synced.fetch_max(to.0, Ordering::AcqRel);
    }

    /// True when a flush of `lsn` has nothing left to do in a log that ends at `end`: the
    /// record at `lsn` is flushed, or `lsn` is the end and everything before it is.
    pub(super) fn flushed_through(&self, lsn: Lsn, end: impl FnOnce() -> Lsn) -> bool {
        let flushed = self.flushed();
        flushed > lsn || (flushed == lsn && end() == lsn)
    }

    /// Checks, in debug builds, the ordering of the positions documented in writer/mod.rs, as
    /// far as a thread about to release the write lock sees them:
    /// `synced <= flushed <= end`, `flushed <= written <= reserved <= end`, the comparisons
    /// with `end` only while no exclusive holder has the insert position closed.
    /// Every test that writes a log checks them this way; release builds pay nothing.
    pub(super) fn check_order(&self, seen: impl FnOnce() -> Seen) {
        if cfg!(debug_assertions) {
            // Lower positions first: each only grows, so one read later is never below it.
            let (synced, flushed) = (self.synced(), self.flushed());
            let Seen {
                end,
                written,
                reserved,
            } = seen();
            let end = end.unwrap_or(Lsn(u64::MAX));
            debug_assert!(
                synced <= flushed && flushed <= end,
                "positions out of order: synced {synced} flushed {flushed} end {end}"
            );
            debug_assert!(
                flushed <= written && written <= reserved && reserved <= end,
                "positions out of order: flushed {flushed} written {written} reserved \
                 {reserved} end {end}"
            );
        }
    }
}
