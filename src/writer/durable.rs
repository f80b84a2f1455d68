//! Making written log durable: which segments were written since their last fdatasync (the
//! dirty list), the **sync turn** that fdatasyncs them one round at a time (taken before the write lock by those that sync under it), and the target
//! whose fdatasync is running (`pending`), which lets a `Durable` group-commit leader hand the
//! lead on once it holds the turn: the next group's leader writes its records out while this
//! round's fdatasync runs, then waits for the turn.
//!
//! Invariants this part keeps:
//! - a segment joins the dirty list when a range written to it **lands** (after its write
//!   returned, before `written_to` passes it), and leaves the list only when a round of
//!   fdatasyncs takes it;
//! - so a round that takes the list after everything below `target` has landed covers every
//!   byte below `target`: a segment written below `target` is on the list it takes, or was
//!   taken by an earlier round that began after that write returned, and rounds run one at a
//!   time (the turn), the earlier one finished (or failed and poisoned the log) first;
//! - a round's fdatasync that fails poisons the log before the turn is released: no round
//!   after it returns Ok, whatever its own fdatasync said (an error is reported once per
//!   descriptor; a later fdatasync on it may succeed with the pages lost).
//!
//! The turn is level `SYNC_TURN` in the lock order, between the insert and the write lock,
//! the dirty list `DIRTY` (a leaf). A `Durable` leader holds the turn alone across its
//! fdatasync (it takes the write lock under it only to write out what was appended while it
//! waited, never during the fdatasync); the segment switch, `sync`, `close`, purge and the
//! open take the turn and then the write lock, and fdatasync under both.

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

/// No segment ([`Syncs::listed`]): not a segment start (those are multiples of the segment
/// size, and an LSN never reaches the largest u64).
const NONE: u64 = u64::MAX;

/// A segment and the writer's handle of it.
pub(super) type Handle = (Lsn, Arc<dyn StorageFile>);

pub(super) struct Syncs {
    turn: OrderedMutex<(), { lock_order::SYNC_TURN }>,
    /// Segments written since their last fdatasync. Only their starts: the writer keeps two
    /// handles, and a segment whose handle it closed is opened again to be synced.
    dirty: OrderedMutex<Vec<Lsn>, { lock_order::DIRTY }>,
    /// The segment pushed on the dirty list last, while it is still on it ([`NONE`] once a
    /// round took the list): a landing in it skips the list's lock. Stored under that lock,
    /// read without it (see [`Syncs::landed`]).
    listed: CachePadded<LineU64>,
    /// The highest record boundary everything below which has landed and is in a round of
    /// fdatasyncs that a `Durable` leader will finish: a flusher whose record lies below it
    /// waits for that round instead of leading another.
    pending: CachePadded<LineU64>,
}

impl Syncs {
    pub(super) fn new(end: Lsn, domain: Domain) -> Syncs {
        Syncs {
            turn: OrderedMutex::new((), domain),
            dirty: OrderedMutex::new(Vec::new(), domain),
            listed: CachePadded::new(LineU64::named("dirty_listed", NONE)),
            pending: CachePadded::new(LineU64::named("sync_pending", end.0)),
        }
    }

    /// Lists `segment` (a write to it just returned) as dirty. When it is the segment listed
    /// last and no round has taken the list since, nothing is to do, and the list's lock is
    /// not taken (in Buffered mode, where rounds are rare, every write-out but the first in a
    /// segment; the lock's two shared-line writes per write-out otherwise). That read is
    /// enough: if it sees `segment`, the round that takes the list next clears it after this
    /// read, and so after this write returned, and fdatasyncs after that (SeqCst on both
    /// sides).
    pub(super) fn landed(&self, segment: Lsn) {
        if self.listed.load(Ordering::SeqCst) == segment.0 {
            return;
        }
        let mut dirty = self.dirty.lock();
        if !dirty.contains(&segment) {
            dirty.push(segment);
        }
        self.listed.store(segment.0, Ordering::SeqCst);
    }

    /// Takes the dirty list for a round of fdatasyncs (in the sync turn).
    fn take_dirty(&self) -> Vec<Lsn> {
        let mut dirty = self.dirty.lock();
        let listed = self.listed.swap(NONE, Ordering::SeqCst);
        debug_assert!(
            listed == NONE || dirty.contains(&Lsn(listed)),
            "segment {} marked as listed dirty is not on the dirty list",
            Lsn(listed)
        );
        std::mem::take(&mut *dirty)
    }

    /// Whether any of `segments` is on the dirty list.
    pub(super) fn any_dirty(&self, segments: &[Lsn]) -> bool {
        self.dirty.lock().iter().any(|s| segments.contains(s))
    }

    /// The target of the fdatasync running (or of the last one).
    pub(super) fn pending(&self) -> Lsn {
        Lsn(self.pending.load(Ordering::Acquire))
    }

    /// Announces that everything below `target` (a record boundary) has landed and a round of
    /// fdatasyncs through it, in the turn the caller holds, follows.
    pub(super) fn announce(&self, target: Lsn) {
        self.pending.fetch_max(target.0, Ordering::AcqRel);
    }
}

/// The sync turn, held: one round of fdatasyncs at a time ([`Syncs::turn`]).
pub(super) struct Turn<'a> {
    _held: crate::lock_order::OrderedGuard<'a, (), { lock_order::SYNC_TURN }>,
}

impl Syncs {
    /// Waits for the sync turn: the round of fdatasyncs before this one has ended.
    pub(super) fn turn(&self) -> Turn<'_> {
        Turn {
            _held: self.turn.lock(),
        }
    }
}

impl Wal {
    /// One round of fdatasyncs, in the sync turn the caller holds: every segment on the dirty
    /// list, through its handle in `handles` (the writer's, taken under the write lock) or one
    /// opened for it: a write-back error no descriptor has seen yet is reported to one opened
    /// after it too. Call it once everything the caller vouches for has landed. A failure
    /// poisons the log inside the turn.
    pub(super) fn sync_in_turn(&self, _turn: &Turn<'_>, handles: &[Handle]) -> Result<()> {
        // An earlier round failed while this thread waited for the turn.
        self.check_poison()?;
        let dirty = self.syncs.take_dirty();
        for &segment in &dirty {
            let file = match handles.iter().find(|(s, _)| *s == segment) {
                Some((_, file)) => file.clone(),
                None => self.open_to_sync(segment)?,
            };
            let started = Instant::now();
            let synced = file.sync_data();
            self.counters
                .here()
                .fsync_ns
                .add(started.elapsed().as_nanos() as u64);
            self.counters.here().fsyncs.add(1);
            synced.map_err(|e| self.poison("fdatasync segment", segment, e))?;
        }
        Ok(())
    }

    /// Opens the segment at `segment` (which exists) to fdatasync it.
    fn open_to_sync(&self, segment: Lsn) -> Result<Arc<dyn StorageFile>> {
        let path = self.dir.join(crate::format::segment_file_name(segment));
        let file = self
            .storage
            .open(&path, true)
            .map_err(|e| self.poison("open segment to fdatasync", segment, e))?;
        Ok(Arc::from(file))
    }
}
