//! Segment files: creation, and preparation ahead of need.
//!
//! A segment is created complete before it gets its name: header page written, every other
//! block written with zeros (so the file system allocates them now: a later fdatasync that
//! reaches them commits no allocation, which measured 5.7-6.1k against 8.2-8.7k 8 KiB
//! pwrite+fdatasync per second on the development machine, and a full disk shows here rather
//! than in a commit), fdatasync'ed, renamed into place, directory synced.
//!
//! That costs a segment's worth of writes and three syncs, so it is done ahead: when the writer
//! starts writing into a segment it asks for the next one, and a preparer thread (one per `Wal`,
//! unless [`crate::Config::prepare_segments`] is off) creates it without holding any lock that
//! appenders or flushers wait on. [`Wal::prepare_next_segment`] does the same work on the
//! caller's thread, for tests and for embedders that schedule I/O themselves. When the writer
//! reaches a segment that is not prepared (preparation off, behind, or failed), it creates the
//! segment itself, under the write lock, as before; a preparation that is under way for that
//! very segment is waited for instead.
//!
//! A prepared segment that the log never reached is a segment after the end of the log:
//! recovery removes it like any other.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};

use super::Wal;
use super::segments::new_segment_header;
use crate::Lsn;
use crate::config::Mode;
use crate::crypto::{KCV_LEN, Keys};
use crate::error::{Error, Result};
use crate::format::{self, Geometry, SegmentHeader};
use crate::storage::{Storage, StorageFile};

/// Suffix of a segment file still being created.
pub(crate) const TMP_SUFFIX: &str = ".tmp";

/// What the preparer knows; one lock, never held during I/O.
#[derive(Default)]
struct State {
    /// The segment the writer will need next (its start), if it is not prepared yet.
    wanted: Option<u64>,
    /// The segment being prepared right now.
    busy: Option<u64>,
    /// A prepared segment, the key check values its header lists, and its open handle.
    ready: Option<(u64, KeyChecks, Box<dyn StorageFile>)>,
    /// The last preparation that failed. It may have failed after its rename (at the directory
    /// sync), leaving a segment file under its name whose header lists the keys of its time.
    failed: Option<u64>,
    /// The `Wal` is gone: the preparer thread ends.
    closed: bool,
}

/// Shared between the `Wal` and its preparer thread.
#[derive(Default)]
pub(super) struct Preparer {
    state: Mutex<State>,
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
}

/// The key check values a segment header lists.
type KeyChecks = Vec<(u32, [u8; KCV_LEN])>;

impl Maker {
    fn make(&self, start: u64) -> Option<(KeyChecks, Box<dyn StorageFile>)> {
        let header = new_segment_header(
            self.mode,
            self.geometry,
            self.log_id,
            start,
            &self.keys.load(),
        );
        let file = create_segment(self.storage.as_ref(), &self.dir, &header).ok()?;
        Some((header.key_checks, file))
    }
}

impl Preparer {
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
    fn next_job(&self, wait: bool) -> Option<u64> {
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
            self.changed.wait(&mut state);
        }
    }

    /// Records the end of a preparation; `None` when it failed, which leaves nothing behind:
    /// the writer creates the segment itself when it gets there, and meets the error (or not:
    /// space may have been freed by then).
    fn finish_job(&self, start: u64, made: Option<(KeyChecks, Box<dyn StorageFile>)>) {
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
        match create_segment(self.storage.as_ref(), &self.dir, &header) {
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
    pub(super) fn want_prepared(&self, start: u64) {
        if start > format::LSN_LIMIT - self.geo.segment_size {
            return;
        }
        let mut state = self.preparer.state.lock();
        let known = state.busy == Some(start) || state.ready.as_ref().is_some_and(|r| r.0 == start);
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
    /// and pages written from now on do not use: it is removed (it holds nothing but its header
    /// and zeros) and the caller creates the segment anew, listing the active key.
    pub(super) fn take_prepared(&self, start: u64) -> Result<Option<Box<dyn StorageFile>>> {
        let mut state = self.preparer.state.lock();
        if state.wanted == Some(start) {
            // Not started yet: the writer is faster than the preparer; it makes it itself.
            state.wanted = None;
        }
        while state.busy == Some(start) {
            self.preparer.changed.wait(&mut state);
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
        if checks == self.segment_header(start).key_checks {
            return Ok(Some(file));
        }
        drop(file);
        self.remove_unused_segment(start, "remove a segment prepared under an old key")?;
        Ok(None)
    }

    /// Removes the never-written segment file at `start`, if there is one.
    fn remove_unused_segment(&self, start: u64, op: &'static str) -> Result<()> {
        let path = self.dir.join(format::segment_file_name(Lsn(start)));
        match self.storage.remove(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.poison(op, start, e)),
        }
    }
}

/// Creates a segment file: header page and zeros written and fdatasync'ed under a temporary
/// name, then renamed into place and the directory synced, so a crash never leaves a half-made
/// segment under a segment name.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    header: &SegmentHeader,
) -> Result<Box<dyn StorageFile>> {
    let name = format::segment_file_name(header.start);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let page_size = header.geometry.page_size;
    let mut page = vec![0u8; page_size as usize];
    header.encode(&mut page);
    let made = (|| -> std::io::Result<Box<dyn StorageFile>> {
        let file = storage.create_new(&tmp)?;
        file.write_all_at(&page, 0)?;
        file.set_len(header.geometry.segment_size)?;
        file.fill_zeros(page_size, header.geometry.segment_size - page_size)?;
        file.sync_data()?;
        storage.rename(&tmp, &path)?;
        storage.sync_dir(dir)?;
        Ok(file)
    })();
    made.map_err(|e| {
        let _ = storage.remove(&tmp);
        Error::io("create segment", &path, e)
    })
}
