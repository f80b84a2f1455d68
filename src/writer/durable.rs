//! Making written log durable: which segments were written since their last fdatasync (the
//! dirty list), the **sync turn** that fdatasyncs them one round at a time, and the target
//! whose fdatasync is queued or running (`pending`), which lets a `Durable` group-commit
//! leader hand the lead on before its fdatasync: the next group's write-out runs while this
//! one's fdatasync does.
//!
//! Invariants this part keeps:
//! - a segment joins the dirty list when a range written to it **lands** (after its write
//!   returned, before `written_to` passes it), with the handle that wrote it, and leaves the
//!   list only when a round of fdatasyncs takes it;
//! - so a round that takes the list after everything below `target` has landed covers every
//!   byte below `target`: a segment written below `target` is on the list it takes, or was
//!   taken by an earlier round that began after that write returned, and rounds run one at a
//!   time (the turn), the earlier one finished (or failed and poisoned the log) first;
//! - a round's fdatasync that fails poisons the log before the turn is released: no round
//!   after it returns Ok, whatever its own fdatasync said (an error is reported once per
//!   descriptor; a later fdatasync on it may succeed with the pages lost).
//!
//! The turn is level `SYNC_TURN` in the lock order (after the write lock), the dirty list
//! `DIRTY` (a leaf). fdatasync runs under the turn only, never under the write lock on the
//! `Durable` commit path; the segment switch, `sync`, `close` and purge still sync under the
//! write lock, which comes first in the order.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam::utils::CachePadded;

use super::Wal;
use crate::Lsn;
use crate::error::Result;
use crate::line_ledger::LineU64;
use crate::lock_order::{self, Domain, OrderedMutex};
use crate::storage::StorageFile;

/// A segment written since its last fdatasync, and the handle that wrote it.
type Dirty = (Lsn, Arc<dyn StorageFile>);

pub(super) struct Syncs {
    turn: OrderedMutex<(), { lock_order::SYNC_TURN }>,
    dirty: OrderedMutex<Vec<Dirty>, { lock_order::DIRTY }>,
    /// The highest record boundary everything below which has landed and is waiting for (or
    /// in) a round of fdatasyncs that a `Durable` leader will finish: a flusher whose record
    /// lies below it waits for that round instead of leading another.
    pending: CachePadded<LineU64>,
}

impl Syncs {
    pub(super) fn new(end: Lsn, domain: Domain) -> Syncs {
        Syncs {
            turn: OrderedMutex::new((), domain),
            dirty: OrderedMutex::new(Vec::new(), domain),
            pending: CachePadded::new(LineU64::named("sync_pending", end.0)),
        }
    }

    /// Lists `segment` (written through `file`, the write just returned) as dirty.
    pub(super) fn landed(&self, segment: Lsn, file: &Arc<dyn StorageFile>) {
        let mut dirty = self.dirty.lock();
        if !dirty.iter().any(|(s, _)| *s == segment) {
            dirty.push((segment, file.clone()));
        }
    }

    /// Whether any of `segments` is on the dirty list.
    pub(super) fn any_dirty(&self, segments: &[Lsn]) -> bool {
        self.dirty.lock().iter().any(|(s, _)| segments.contains(s))
    }

    /// The target of the fdatasync queued or running, if it is past every earlier one.
    pub(super) fn pending(&self) -> Lsn {
        Lsn(self.pending.load(Ordering::Acquire))
    }

    /// Announces that everything below `target` (a record boundary) has landed and a round of
    /// fdatasyncs through it will follow.
    pub(super) fn announce(&self, target: Lsn) {
        self.pending.fetch_max(target.0, Ordering::AcqRel);
    }
}

impl Wal {
    /// One round of fdatasyncs in the sync turn: every segment on the dirty list, through the
    /// handle that wrote it. Call it once everything the caller vouches for has landed. With
    /// `covered`, a round is skipped when the log is already synced through it (a round that
    /// began after it had landed covered it). A failure poisons the log inside the turn.
    pub(super) fn sync_round(&self, covered: Option<Lsn>) -> Result<()> {
        let _turn = self.syncs.turn.lock();
        // An earlier round failed while this thread waited for the turn.
        self.check_poison()?;
        if covered.is_some_and(|target| self.positions.synced() >= target) {
            return Ok(());
        }
        let dirty = std::mem::take(&mut *self.syncs.dirty.lock());
        for (segment, file) in &dirty {
            let started = Instant::now();
            let synced = file.sync_data();
            self.counters
                .here()
                .fsync_ns
                .add(started.elapsed().as_nanos() as u64);
            self.counters.here().fsyncs.add(1);
            synced.map_err(|e| self.poison("fdatasync segment", *segment, e))?;
        }
        Ok(())
    }
}
