//! Segment files prepared ahead of need.
//!
//! Making a segment (created complete, or from a free file; see `recycle`) costs a segment's
//! worth of writes and three syncs, so it is done ahead: when the writer starts writing into a
//! segment it asks for the next one, and a preparer thread (one per `Wal`, unless
//! [`crate::Config::prepare_segments`] is off) creates it without holding any lock that
//! appenders or flushers wait on. [`Wal::prepare_next_segment`] does the same work on the
//! caller's thread, for tests and for embedders that schedule I/O themselves. When the writer
//! reaches a segment that is not prepared (preparation off, behind, or failed), it creates the
//! segment itself, under the write lock, as before; a preparation that is under way for that
//! very segment is waited for instead.
//!
//! A prepared segment that the log never reached is a segment after the end of the log:
//! recovery removes it like any other.
//!
//! A prepared segment's header lists the key active when it was made. A data-key rotation
//! therefore makes the segment it switches to itself, listing the new key, under a temporary
//! name before it takes the log's locks (`stage_for_rotation`), and once the switch has
//! installed the key, renames it over the stale one and syncs the directory
//! (`swap_in`); the writer waits for that instead of creating a segment.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use parking_lot::Condvar;

use super::Wal;
use super::recycle::{MadeSegment, REKEY_SUFFIX, make_segment, make_unnamed, write_header};
use super::segments::new_segment_header;
use crate::Lsn;
use crate::config::Mode;
use crate::crypto::{KCV_LEN, Keys};
use crate::error::{Error, Result};
use crate::format::{self, Geometry, SegmentHeader};
use crate::lock_order::{self, Domain, OrderedMutex};
use crate::storage::{Storage, StorageFile};

/// What the preparer knows; one lock, never held during I/O.
#[derive(Default)]
struct State {
    /// The segment the writer will need next (its start), if it is not prepared yet.
    wanted: Option<Lsn>,
    /// The segment being prepared right now.
    busy: Option<Lsn>,
    /// A prepared segment, the key check values its header lists, and its open handle.
    ready: Option<(Lsn, KeyChecks, MadeSegment)>,
    /// The last preparation that failed. It may have failed after its rename (at the directory
    /// sync), leaving a segment file under its name whose header lists the keys of its time.
    failed: Option<Lsn>,
    /// The segment a key rotation is putting its replacement in place of (see
    /// [`Wal::swap_in`]): no preparation of it starts, and the writer waits for it as for a
    /// preparation under way.
    swapping: Option<Lsn>,
    /// The `Wal` is gone: the preparer thread ends.
    closed: bool,
}

/// Shared between the `Wal` and its preparer thread.
pub(super) struct Preparer {
    state: OrderedMutex<State, { lock_order::PREPARER }>,
    changed: Condvar,
}

/// What a preparer thread needs to make a segment, without the `Wal`.
pub(super) struct Maker {
    pub(super) storage: Arc<dyn Storage>,
    pub(super) dir: PathBuf,
    pub(super) mode: Mode,
    pub(super) geometry: Geometry,
    pub(super) log_id: u64,
    /// The log's keys: a header lists the key active when it is made (encrypted modes).
    pub(super) keys: Arc<ArcSwap<Keys>>,
    /// Whether a free file may be reused ([`crate::Config::recycle_segments`]).
    pub(super) recycle: bool,
}

/// The key check values a segment header lists.
type KeyChecks = Vec<(u32, [u8; KCV_LEN])>;

impl Maker {
    fn make(&self, start: Lsn) -> Option<(KeyChecks, MadeSegment)> {
        let header = new_segment_header(
            self.mode,
            self.geometry,
            self.log_id,
            start,
            &self.keys.load(),
        );
        let file = make_segment(self.storage.as_ref(), &self.dir, &header, self.recycle).ok()?;
        Some((header.key_checks, file))
    }
}

impl Preparer {
    /// Nothing wanted, nothing prepared; its lock in `domain` (its log's).
    pub(super) fn new(domain: Domain) -> Preparer {
        Preparer {
            state: OrderedMutex::new(State::default(), domain),
            changed: Condvar::new(),
        }
    }

    /// Starts the preparer thread; it ends when [`Preparer::close`] is called.
    pub(super) fn spawn(preparer: &Arc<Preparer>, maker: Maker) -> Result<JoinHandle<()>> {
        let preparer = preparer.clone();
        let dir = maker.dir.clone();
        std::thread::Builder::new()
            .name("walcrypt-prepare".into())
            .spawn(move || {
                while let Some(start) = preparer.next_job(true) {
                    preparer.finish_job(start, maker.make(start));
                }
            })
            .map_err(|e| Error::io("start segment preparer thread", &dir, e))
    }

    /// Claims the wanted segment, waiting for one if `wait`. `None`: closed, or (not waiting)
    /// nothing to do.
    fn next_job(&self, wait: bool) -> Option<Lsn> {
        let mut state = self.state.lock();
        loop {
            if state.closed {
                return None;
            }
            if let Some(start) = state.wanted.take() {
                state.busy = Some(start);
                return Some(start);
            }
            if !wait {
                return None;
            }
            state.wait(&self.changed);
        }
    }

    /// Records the end of a preparation; `None` when it failed, which leaves nothing behind:
    /// the writer creates the segment itself when it gets there, and meets the error (or not:
    /// space may have been freed by then).
    fn finish_job(&self, start: Lsn, made: Option<(KeyChecks, MadeSegment)>) {
        let mut state = self.state.lock();
        state.busy = None;
        match made {
            Some((checks, file)) => state.ready = Some((start, checks, file)),
            None => state.failed = Some(start),
        }
        drop(state);
        self.changed.notify_all();
    }

    pub(super) fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    /// Reserves the segment at `start` for a key rotation's replacement: called by the switch,
    /// under the insert and write locks, once the new key is installed and `start` is the
    /// insert position, so the writer has not taken any file of `start` yet and will wait for
    /// [`Wal::swap_in`] before it does.
    pub(super) fn claim_for_swap(&self, start: Lsn) {
        let mut state = self.state.lock();
        state.swapping = Some(start);
        if state.wanted == Some(start) {
            state.wanted = None;
        }
    }
}

/// Ends a key rotation's claim on a segment ([`Wal::swap_in`]) when dropped, on every path:
/// the replacement ready for the writer if it was `placed`, otherwise a failed preparation.
struct EndClaim<'a> {
    preparer: &'a Preparer,
    next: Lsn,
    placed: Option<(KeyChecks, MadeSegment)>,
}

impl Drop for EndClaim<'_> {
    fn drop(&mut self) {
        let mut state = self.preparer.state.lock();
        state.swapping = None;
        match self.placed.take() {
            Some((checks, file)) => {
                state.ready = Some((self.next, checks, file));
                if state.failed == Some(self.next) {
                    state.failed = None;
                }
            }
            None => state.failed = Some(self.next),
        }
        drop(state);
        self.preparer.changed.notify_all();
    }
}

/// A replacement segment a key rotation made before taking the log's locks, listing the new
/// key: complete (header, zeros, fdatasync'ed) under a temporary name, never under a segment
/// name until [`Wal::swap_in`] puts it in place.
pub(super) struct Staged {
    header: SegmentHeader,
    tmp: PathBuf,
    file: Box<dyn StorageFile>,
}

impl Wal {
    /// Prepares the next segment the log will need, on the calling thread: creates it full
    /// size (header, zeros), fdatasyncs it and renames it into place, without holding the
    /// insert or the write lock. Returns `Ok(false)` when there is nothing to prepare (it is
    /// prepared already, being prepared, or the writer has not entered a new segment since).
    ///
    /// A `Wal` does this on its own thread unless [`crate::Config::prepare_segments`] was
    /// turned off; call it yourself then, for example from a maintenance thread, or let the
    /// writer create each segment when it first needs it. An error here leaves the log
    /// untouched and unpoisoned (nothing was written to the log).
    pub fn prepare_next_segment(&self) -> Result<bool> {
        self.check_poison()?;
        let Some(start) = self.preparer.next_job(false) else {
            return Ok(false);
        };
        let header = self.segment_header(start);
        match make_segment(self.storage.as_ref(), &self.dir, &header, self.recycle > 0) {
            Ok(file) => {
                self.preparer
                    .finish_job(start, Some((header.key_checks, file)));
                Ok(true)
            }
            Err(e) => {
                self.preparer.finish_job(start, None);
                Err(e)
            }
        }
    }

    /// Asks for the segment at `start` to be prepared (the writer just entered the one
    /// before). Never blocks on I/O.
    pub(super) fn want_prepared(&self, start: Lsn) {
        if !self.preparable(start) {
            return;
        }
        let mut state = self.preparer.state.lock();
        let known = state.busy == Some(start)
            || state.swapping == Some(start)
            || state.ready.as_ref().is_some_and(|r| r.0 == start);
        if !known {
            state.wanted = Some(start);
        }
        drop(state);
        self.preparer.changed.notify_all();
    }

    /// The prepared segment at `start`, waiting for a preparation of it under way. `None`
    /// when it was not prepared (the caller creates it).
    ///
    /// A segment prepared before the data key was rotated lists the old key, which the records
    /// and pages written from now on do not use. A rotation normally puts its own replacement
    /// in place (`swap_in`); when it could not (its preparation failed, or segments are not
    /// prepared ahead), the stale segment is removed here (it holds no record of the log:
    /// its header, and zeros or a reused file's old bytes) and the caller creates the segment
    /// anew, listing the active key.
    pub(super) fn take_prepared(&self, start: Lsn) -> Result<Option<MadeSegment>> {
        let mut state = self.preparer.state.lock();
        if state.wanted == Some(start) {
            // Not started yet: the writer is faster than the preparer; it makes it itself.
            state.wanted = None;
        }
        while state.busy == Some(start) || state.swapping == Some(start) {
            state.wait(&self.preparer.changed);
        }
        let (checks, file) = match state.ready.take() {
            Some((s, checks, file)) if s == start => (checks, file),
            other => {
                state.ready = other;
                if state.failed == Some(start) {
                    // A failed preparation may have left the file under its name: never write
                    // into it (its header may list an older key); the caller makes it anew.
                    state.failed = None;
                    drop(state);
                    self.remove_unused_segment(start, "remove a segment whose preparation failed")?;
                }
                return Ok(None);
            }
        };
        drop(state);
        if self.lists_active_keys(start, &checks) {
            return Ok(Some(file));
        }
        drop(file);
        self.remove_unused_segment(start, "remove a segment prepared under an old key")?;
        Ok(None)
    }

    /// Whether the file under the name of the segment at `start` is one the writer, when it
    /// takes the segment ([`Wal::take_prepared`]), will remove and make anew listing the active
    /// key: prepared under a key that is no longer the active one (a rotation whose replacement
    /// could not be staged or placed), or left by a failed preparation. A preparation of it
    /// under way is waited for first, as the writer would. Its header then does not say which
    /// key the segment's records and pages will be read under (`listed_key`).
    pub(super) fn prepared_stale(&self, start: Lsn) -> bool {
        let mut state = self.preparer.state.lock();
        while state.busy == Some(start) || state.swapping == Some(start) {
            state.wait(&self.preparer.changed);
        }
        if state.failed == Some(start) {
            return true;
        }
        state
            .ready
            .as_ref()
            .is_some_and(|(s, checks, _)| *s == start && !self.lists_active_keys(start, checks))
    }

    /// Whether a segment prepared at `start` with the key check values `checks` in its header
    /// lists what a segment made there now would: the one test of staleness, for
    /// [`Wal::take_prepared`] and [`Wal::prepared_stale`] alike.
    fn lists_active_keys(&self, start: Lsn, checks: &KeyChecks) -> bool {
        *checks == self.segment_header(start).key_checks
    }

    /// Whether a segment may start at `start` (its end within the LSN range).
    pub(super) fn preparable(&self, start: Lsn) -> bool {
        start.0 <= format::LSN_LIMIT - self.geo.segment_size
    }

    /// Before a key rotation takes the log's locks: makes the segment the log is expected to
    /// switch to, listing the active key of `keys` (the new one), under a temporary name:
    /// created, zero-filled and fdatasync'ed, not renamed. The switch that installs the key
    /// then claims the segment it moves the log to, and [`Wal::swap_in`] renames the
    /// replacement over the segment prepared under the old key. Without this, the writer
    /// entering that segment would find it stale, remove it and create a full segment under
    /// the write lock (and under the insert lock too, for an appender making room).
    ///
    /// Done only when segments are prepared ahead (by the preparer thread, or by the embedder:
    /// a segment is prepared or being prepared); otherwise the writer creates each segment
    /// anyway. Best effort: `None` when it fails (a full disk shows again when the writer gets
    /// there) or there is nothing to do.
    ///
    /// The replacement never gets a segment name before the key it lists is in the working
    /// keys: an appender may carry the log into the segment before the switch, and the
    /// segment's pages or records must then use a key its header lists, which the switch
    /// reads back (`listed_key`).
    pub(super) fn stage_for_rotation(&self, keys: &Keys) -> Option<Staged> {
        let ahead = self.preparer_thread.is_some() || {
            let state = self.preparer.state.lock();
            state.ready.is_some() || state.busy.is_some()
        };
        let start = self
            .geo
            .segment_start(self.reservations.end())
            .checked_add(self.geo.segment_size)?;
        if !ahead || !self.preparable(start) {
            return None;
        }
        let header = new_segment_header(self.mode, self.geo, self.log_id, start, keys);
        let name = format::segment_file_name(header.start);
        let tmp = self.dir.join(format!("{name}{REKEY_SUFFIX}"));
        match make_unnamed(self.storage.as_ref(), &tmp, &header) {
            Ok(file) => Some(Staged { header, tmp, file }),
            Err(_) => {
                let _ = self.storage.remove(&tmp);
                None
            }
        }
    }

    /// After the switch installed the new key and claimed `next` ([`Preparer::claim_for_swap`]),
    /// with no lock of the log held: puts the staged replacement in place as the segment at
    /// `next`, ready for the writer. If the log entered the expected segment before the switch,
    /// `next` is the one after it and the replacement's header is rewritten for it (one page
    /// and an fdatasync, still under the temporary name).
    ///
    /// The replacement is renamed over whatever holds the name (the segment prepared under the
    /// old key, or what a failed preparation left), then the directory is synced. Until then
    /// the writer, which needs the file of `next` before any record there can be written out,
    /// waits for it (`take_prepared`), so no record is acknowledged in a segment whose
    /// directory entry is not durable yet. A preparation of `next` under way (under the old
    /// key) is waited for first: its own rename would replace the replacement.
    ///
    /// On failure the claim ends as a failed preparation does: the writer removes what is under
    /// the name and creates the segment itself. So it does if placing panics (in a `Storage`
    /// of the embedder's, say): the claim ends when `EndClaim` drops, so a writer waiting for
    /// the segment never waits for good.
    pub(super) fn swap_in(&self, staged: Staged, next: Lsn) {
        let mut claim = EndClaim {
            preparer: &self.preparer,
            next,
            placed: None,
        };
        claim.placed = self.place_staged(staged, next);
    }

    fn place_staged(&self, staged: Staged, next: Lsn) -> Option<(KeyChecks, MadeSegment)> {
        let Staged {
            mut header,
            tmp,
            file,
        } = staged;
        let path = self.dir.join(format::segment_file_name(next));
        let placed = (|| -> std::io::Result<()> {
            if header.start != next {
                header.start = next;
                write_header(file.as_ref(), &header)?;
                file.sync_data()?;
            }
            {
                let mut state = self.preparer.state.lock();
                while state.busy == Some(next) {
                    state.wait(&self.preparer.changed);
                }
                // Prepared under the old key: replaced below. Its handle is closed here.
                if state.ready.as_ref().is_some_and(|r| r.0 == next) {
                    state.ready = None;
                }
            }
            self.storage.rename(&tmp, &path)?;
            self.storage.sync_dir(&self.dir)
        })();
        match placed {
            Ok(()) => Some((
                header.key_checks,
                MadeSegment {
                    file,
                    reused: false,
                },
            )),
            Err(_) => {
                drop(file);
                let _ = self.storage.remove(&tmp);
                None
            }
        }
    }

    /// Removes a staged replacement the switch did not use (it failed, or claimed nothing).
    pub(super) fn discard_staged(&self, staged: Staged) {
        let Staged { tmp, file, .. } = staged;
        drop(file);
        let _ = self.storage.remove(&tmp);
    }

    /// Removes the never-written segment file at `start`, if there is one.
    fn remove_unused_segment(&self, start: Lsn, op: &'static str) -> Result<()> {
        let path = self.dir.join(format::segment_file_name(start));
        match self.storage.remove(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.poison(op, start, e)),
        }
    }
}
