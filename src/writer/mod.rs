//! The writer: append and the WAL buffer (this file); opening a log and resuming it after
//! recovery (`open`); writing out, group commit and fdatasync (`flush`); segment handles,
//! switch and purge (`segments`); segment creation, also ahead of time (`prepare`); key
//! rotation (`rotate`). docs/DESIGN.md walks through the whole write path.
//!
//! An append runs in three steps: before any lock, it compresses the payload and draws its
//! IV; it reserves its bytes with one compare-and-swap of the insert position (a few lines of
//! arithmetic, which give it its LSN; no lock); then, on an **insertion lane** of its own
//! (insertions.rs), it seals
//! the record at that LSN (encryption, GCM tag and checksum, all covering the LSN) and copies
//! it into the buffer's page slots. A write-out takes only bytes below the lowest insertion
//! still in progress (`inserted_to`); a flush waits, with no lock held, for the insertions
//! below its record (`inserted_through`). The segment switch, a key rotation and the open's
//! resume hold the insert lock and wait until no insertion is in progress.
//!
//! Locks, always taken in this order, never the other way (a lock may be skipped, never
//! taken after one that comes later in the list):
//!
//! 0. **group commit** (`group`, group.rs) takes no lock: a flusher becomes a round's leader
//!    by a compare-and-swap of the group word's leader bit with no lock of the log held, and
//!    the others sleep on that word's round count (no lock held either) until the round ends.
//!    It orders flushers, never data.
//! 1. the **insert lock** (`Reservations`, reserve.rs): held only by the exclusive paths
//!    (switch, rotation, resume), which close the insert position to reservations (appenders
//!    reserve by a compare-and-swap of it, with no lock; one that finds it closed leaves its
//!    lane idle and waits for this lock), wait for the insertions in progress to finish, and
//!    then copy their control record.
//!    An **insertion lane** (`insertions`) is claimed before it and held until the copy ends;
//!    waiting for a lane's insertion (`Insertions::wait_finished`) is done with no lock held
//!    but the insert lock (exclusive paths), and only for insertions that began earlier in the
//!    log than the waiter's own, so those waits never form a cycle.
//! 2. the **sync turn** (`syncs`, durable.rs): held across one round of fdatasyncs, so
//!    rounds run one at a time, in order. A Durable leader takes it with no lock held, and
//!    under it takes the write lock only to write out what was appended while it waited,
//!    before its fdatasync; `sync`, `close`, the segment switch, purge and the open take it
//!    before the write lock and fdatasync under both.
//! 3. the **write lock** (`write`): reserves the next range of the log for writing
//!    (`[reserved_to, target)`), plans its runs and pieces in the reserving thread's own
//!    buffer and registers the range in flight; pagelevel also copies its pages out of the
//!    buffer and encrypts them there. A flush (plaintext, perrecord; Buffered and Durable) and
//!    an appender making room copy (plaintext, perrecord) and write the range after
//!    releasing it. pagelevel flushes, `sync`, `close`, the
//!    segment switch and the open write (and wait for every range in flight to land) under
//!    it. Flushers take it without the insert lock, after waiting for the insertions they
//!    flush; an appender takes it (with no other lock held) only when the buffer is full and
//!    it must make room, and the open takes it under the insert lock when it moves the log on
//!    past a segment switch or to a fresh page (`switch_segment`, `resume_on_fresh_page`).
//! 4. the **in-flight sleepers' lock** (`inflight`, with its condition variable,
//!    inflight.rs): taken only by a thread about to sleep until `written_to` passes a position
//!    (with the insert or write lock held or not: an earlier range covering the same bytes, or
//!    everything below a position, to land) and by a thread that moved `written_to` while
//!    someone sleeps. Ranges are registered under the write lock and land without a lock (a
//!    compare-and-swap of `written_to`), so the threads that land ranges never wait for the
//!    insert or write lock. Nothing is taken while it is held.
//! 5. a **slot lock** per buffer page (`PageBuffer`, buffer.rs), over the page's `rem_len`
//!    and pagelevel IV only: taken by the appender entering the page at its body's start and
//!    by the write-out imaging the page (in pagelevel, to draw the page's IV at its first
//!    write-out). The copies into the page take no lock: the page is a row of atomic words.
//! 6. the **IV source's prefix table** (`IvSource::later` in crypto.rs): taken at most once per
//!    2^32 IVs to draw a new random prefix, under a slot lock (pagelevel) or no lock
//!    (perrecord sealing).
//! 7. the **poison cause** (`poison`, poison.rs): set or cloned, under any of the above but the
//!    in-flight lock, or none; nothing is taken while it is held.
//!
//! The **preparer's state** (`Preparer`, prepare.rs) sits outside this order: it is taken with
//! the write lock held (`take_prepared`), with the insert and write locks held (the switch's
//! `claim_for_swap`) or with none, and nothing is taken while it is held. Its condition
//! variable is waited on under the write lock only for a preparation or a rotation's swap of
//! the segment the writer needs, which take no lock of the log to finish.
//!
//! The **dirty list** (durable.rs), the segments written since their last fdatasync, is a
//! leaf: taken where a range lands, under the sync turn or the write lock, and nothing is
//! taken while it is held.
//!
//! The event listener is called with none of these held.
//!
//! In debug builds the order is checked on every acquisition (lock_order.rs): each of these
//! mutexes carries its level (a lane's owner 0, insert 1, sync turn 2, write 3, in-flight 4,
//! slot 5, IV prefix 6, poison cause 7, a lane's gate, the preparer's state and the dirty
//! list after them, with the exceptions above: a lane's gate only under the thread's own lane
//! or the insert lock, the preparer's state and the dirty list only under those, the sync
//! turn and the write lock, the poison cause never under the in-flight lock, one lane and one
//! slot per thread), and a thread that takes one while
//! holding one of the same log it may not panics, so every test that writes a log checks the
//! order. In release builds they are parking_lot's mutexes and the check is compiled out. What
//! a thread waits for on a condition variable, or on the round counter, is not checked.
//!
//! The writer's state is split into parts that each own their state, their lock if they
//! have one, and their invariants, so no other file can take a lock out of order or move a
//! position backwards: the reservations (reserve.rs: the insert lock, the end of the log, the
//! insertion lanes), the page buffer (buffer.rs: the slots and their locks), the write-outs
//! in flight (inflight.rs: `written_to`, the parked ranges, the sleepers' lock; its registry
//! of ranges lives in `WriteState`, under the write lock), the flushed and synced
//! positions (positions.rs), the fdatasyncs (durable.rs: the sync turn, the dirty list, the
//! pending target), group commit (group.rs), poisoning (poison.rs: the flag and the cause's
//! lock), the listener's reports (report.rs) and the statistics (stats.rs). The write lock and its
//! `WriteState` (the segment files and how far they are reserved) belong to the write side:
//! this file, flush.rs and segments.rs.
//!
//! Five positions (LSNs: `insert_end` in the reservations, the insert position under their
//! lock, `written_to` in the in-flight part, `flushed_to` and `synced_to` in the positions part,
//! `WriteState::reserved_to` under the write lock), and one computed from the lanes, say how
//! far the log has come. Whenever neither the insert nor the write lock is held, and the log
//! is not poisoned, they satisfy
//!
//! ```text
//! synced_to <= flushed_to <= inserted_to() <= insert_end == insert position
//!              flushed_to <= written_to    <= reserved_to <= insert_end
//! ```
//!
//! - `insert_end`: end of the last record (or batch) whose bytes are reserved; stored under
//!   the insert lock. A record boundary. `end_lsn` returns it.
//! - `inserted_to()`: `insert_end`, or the start of the lowest insertion still in progress
//!   if that is lower. Everything before it is in the buffer. A record boundary; not stored.
//! - `reserved_to` (in `WriteState`, under the write lock): everything before it belongs to a
//!   range reserved for writing, landed or in flight. Ranges are reserved in order, each
//!   starting where the last ended, so they never overlap in the log; on disk a pagelevel page
//!   image's zeros after its valid part reach beyond its range, and a page written again
//!   from its header covers an earlier range's bytes. `InFlight::wait_clear` holds back any
//!   later range covering bytes of one still in flight (a page's image lands before any
//!   append to it, a shorter image never lands after a longer one).
//! - `written_to`: everything before it has landed in the files (`InFlight::written`, moved
//!   over a range by a compare-and-swap once it and every range before it have landed). Not a record
//!   boundary: an appender making room writes out whole pages before the page it enters, so
//!   while its record (or batch) is partly copied, `written_to` and `reserved_to` may run
//!   ahead of `inserted_to()` into that unfinished record. On disk that is a torn record, which
//!   recovery cuts; it is never acknowledged. A range that failed never lands (the log is
//!   poisoned), so `written_to` stops below it for good.
//! - `flushed_to`: the record boundary through which `flush` guarantees hold (written for
//!   `Buffered`, fdatasync'ed for `Durable`); raised (`fetch_max`) only once `written_to` has
//!   reached it (and, `Durable`, after the fdatasync it vouches for), never once the log is
//!   poisoned.
//! - `synced_to`: the record boundary through which the log is fdatasync'ed; raised right
//!   after the fdatasync (in the sync turn) and after `flushed_to`, so `synced_to <=
//!   flushed_to` at every instant. A round of fdatasyncs covers everything that landed before
//!   it took the dirty list (durable.rs), and its caller waits for its target to land first.
//!   Stamped into page headers as the durable hint, so it never exceeds what the files hold
//!   durably. `Durable`: equal to `flushed_to` once no round is between its fdatasync and its
//!   end. `Buffered`: moves only at open, `sync` and `close`.
//!
//! All only grow (`restamp_tail` moves back only `reserved_to`, to rewrite the tail page at
//! open). At open, before the `Wal` is shared, they jump over the part of the log left unused:
//! `switch_segment` moves all of them to the next segment's start, `resume_on_fresh_page`
//! moves `reserved_to`, `written_to` and `insert_end` past the rest of the tail page, with
//! nothing in flight.
//!
//! Group commit sits in front of the write lock in `Durable` mode and for pagelevel (a
//! `Buffered` plaintext, perrecord or perrecord-gcm flush reserves and writes its own range,
//! beside other commits' ranges): one flusher at a time leads a round (write
//! and, Durable, fdatasync everything appended so far); the others wait for the round to end
//! and then either find their record durable or lead the next round for everyone still
//! waiting. A Durable leader hands the lead on once its range has landed and it has announced
//! its target as pending (`Syncs::announce`): the next round's write-out then runs while its
//! fdatasync does, and a flusher whose record lies below a pending target waits for that
//! round's end instead of leading. A leader that unwinds between the announcement and the
//! end of its round poisons the log (`SyncDue`), so those waiters wake to an error.
//!
//! The buffer is a ring of page slots. A slot is claimed for a page by the first appender
//! copying into that page, only once the page one ring length earlier has landed completely
//! (`written_to` past its end; `claim_slot`), so memory stays bounded and appenders wait (by
//! writing) when it is full. Appenders copying into one page claim its slot in any order (one
//! compare-and-swap of the page the slot holds wins) and copy with no lock held: each stores
//! the words its bytes cover whole and merges a word shared with a neighbouring record by a
//! compare-and-swap (buffer.rs).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crossbeam::utils::CachePadded;
use smallvec::SmallVec;

use crate::Lsn;
use crate::compress;
use crate::config::{Config, Mode, SyncMode};
use crate::crypto::{IV_LEN, IvSource, Keys};
use crate::error::{Error, PoisonCause, Result};
use crate::events::{FlushRound, RecoverySummary};
use crate::format::{self, Geometry, PAGE_HEADER_LEN, RECORD_FLAG_COMPRESSED};
use crate::lock_order::{self, Domain, OrderedMutex};
use crate::seal::{At, RecordSeal, Seal, SealKey};
use crate::storage::{Storage, StorageFile};

mod buffer;
mod checkpoint;
mod durable;
mod flush;
mod group;
mod inflight;
mod insertions;
mod open;
mod poison;
mod positions;
mod prepare;
mod recycle;
mod report;
mod reserve;
mod rotate;
mod segments;
mod stats;

use group::GroupCommit;
use prepare::{Maker, Preparer};
use stats::Counters;
pub use stats::WalStats;

use buffer::NO_PAGE;

/// Proof that `Wal::check_process` passed on this call path: only it makes one, and
/// `write_locked` takes one, so no write-out can skip the fork check.
#[derive(Clone, Copy)]
struct SameProcess(());

/// A record about to be placed: its kind, flags and payload as stored (compressed or not).
pub(super) struct Pending<'a> {
    pub(super) kind: u8,
    pub(super) flags: u8,
    pub(super) stored: &'a [u8],
}

/// An insertion under way: bytes reserved in the log, on `lane`, not yet all copied. Dropped
/// before it is `finished` (an error or a panic between the reservation and the end of the
/// copy), it poisons the log before the lane goes idle: the reserved bytes are a hole, and no
/// write-out or flush may pass it as if it held records.
struct Inserting<'a> {
    wal: &'a Wal,
    lane: insertions::InLane<'a>,
    finished: bool,
}

impl Drop for Inserting<'_> {
    fn drop(&mut self) {
        if !self.finished && !self.wal.poison.is_set() {
            let at = self.wal.reservations.end();
            let error = self.wal.broken_invariant(
                "append",
                at,
                "an insertion ended before its record was copied".into(),
            );
            let _ = self.wal.poison_error(error);
        }
    }
}

/// Each thread times one insert-lock hold in this many ([`WalStats::insert_lock_ns`]).
const INSERT_HOLD_SAMPLE: u64 = 16;

/// Whether this thread times its next insert-lock hold: every [`INSERT_HOLD_SAMPLE`]th.
fn sample_insert_hold() -> bool {
    thread_local! {
        static HOLDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    HOLDS.with(|holds| {
        let n = holds.get();
        holds.set(n.wrapping_add(1));
        n % INSERT_HOLD_SAMPLE == 0
    })
}

/// A number per thread, so a thread keeps trying the same insertion lane first.
pub(super) fn lane_hint() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HINT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HINT.with(|hint| *hint)
}

/// Insertion lanes for this machine: twice its parallelism, at least 8, at most 64.
fn lane_count() -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    (2 * cores).clamp(8, 64)
}

/// Sealed records of up to this size reuse a per-thread buffer instead of a fresh allocation.
const SEAL_BUFFER_KEEP: usize = 256 << 10;

/// Records an append keeps its lengths, IVs and LSNs for on the stack: one for `append`, and
/// small batches; larger batches spill to the heap.
const INLINE_RECORDS: usize = 8;

/// The LSNs of the records one insertion places.
type Lsns = SmallVec<[Lsn; INLINE_RECORDS]>;

thread_local! {
    static SEAL_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

struct WriteState {
    /// Everything before it is reserved: written, or being written by the thread that
    /// reserved it (`InFlight`). Not a record boundary (see `written_to`).
    reserved_to: Lsn,
    /// The end of the log's bytes in the files: `reserved_to` as the last write-out left it,
    /// before any jump over unused log (a segment switch, a resume on a fresh page). Past it,
    /// the page that holds it has no record bytes, only what its buffer slot kept from an
    /// earlier page: `refresh_hint` images that page's first sector up to here, zeros after.
    data_end: Lsn,
    /// A segment (created before the key was rotated) whose pages use this key, not the active
    /// one: its header lists only the keys of its time.
    segment_key: Option<(Lsn, u32)>,
    files: Vec<(Lsn, Arc<dyn StorageFile>)>,
    /// The segments of `files` made from a reused file, whose pages hold old bytes where this
    /// open has not written yet (see `recycle::MadeSegment`).
    reused: Vec<Lsn>,
    /// The last page whose image (from its header) this open wrote, and the durable hint stamped in it
    /// (`NO_PAGE` before the first): see `appendable`.
    imaged: (Lsn, Lsn),
    /// The segment whose last page's header `refresh_hint` rewrote since its last fdatasync,
    /// if any: `close` syncs it, so the hint survives a restart too.
    hint_unsynced: Option<Lsn>,
    /// The write-outs registered in flight and not yet passed by `written_to`.
    inflight: inflight::Registry,
}

/// Where recovery left the log, handed to the writer.
pub(crate) struct Resume {
    pub(crate) log_id: u64,
    pub(crate) geo: Geometry,
    /// End of the valid log: the next record goes here.
    pub(crate) end: Lsn,
    /// The valid prefix of the page holding `end`, decrypted, and that page's continuation length.
    pub(crate) tail_page: Option<(Vec<u8>, u32)>,
    /// The end of the segment holding `end` and that segment's format version (see
    /// `Wal::tail_format`).
    pub(crate) tail_format: (Lsn, u32),
}

/// An open write-ahead log. `Send + Sync`: share it between threads (by reference or `Arc`).
///
/// Open with [`Wal::open`] (or [`Wal::open_and_replay`] after a crash), [`Wal::append`] or
/// [`Wal::append_batch`] from any number of threads, [`Wal::flush`] (any LSN up to
/// [`Wal::end_lsn`]) or [`Wal::sync`] to make records durable, and [`Wal::close`] for a
/// clean shutdown. Dropping a `Wal` hands buffered records to the operating system but reports
/// no errors; call `close` to learn of them.
pub struct Wal {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    mode: Mode,
    geo: Geometry,
    log_id: u64,
    sync: SyncMode,
    /// Sealing and opening of this log's records and pages (mode, log id, compression).
    seal: Seal,
    /// The working keys; replaced whole (never edited) when a data key is rotated or retired.
    keys: Arc<arc_swap::ArcSwap<Keys>>,
    rotation: rotate::Rotation,
    /// The process that opened the log: another (a forked child) must not write with it,
    /// since it would repeat this process's IVs.
    opener: u32,
    ivs: CachePadded<IvSource>,
    /// The insert lock, the end of the log and the insertions in progress (reserve.rs).
    reservations: reserve::Reservations,
    /// The WAL buffer's page slots (buffer.rs).
    buffer: buffer::PageBuffer,
    /// How far the log is flushed and synced (positions.rs).
    positions: positions::Positions,
    /// The dirty segments, the sync turn and the pending fdatasync (durable.rs).
    syncs: durable::Syncs,
    write: CachePadded<OrderedMutex<WriteState, { lock_order::WRITE }>>,
    /// Write-outs reserved under the write lock and written after it.
    inflight: inflight::InFlight,
    /// Group commit: whether a flush round is under way, and a count of finished rounds
    /// (group.rs).
    group: CachePadded<GroupCommit>,
    /// Whether the log may still be written, why not, and whether it was closed (poison.rs).
    poison: poison::Poison,
    /// Statistics, readable without any lock.
    counters: Counters,
    /// The listener, and what it has been told (report.rs).
    reports: report::Reports,
    /// Segments prepared ahead (see `prepare`), and the thread that prepares them.
    preparer: Arc<Preparer>,
    preparer_thread: Option<std::thread::JoinHandle<()>>,
    /// The end of the segment the log ended in at open, and that segment's format version.
    /// Records starting before that end are checksummed by its version's rule: when it is
    /// older than [`format::FORMAT_VERSION`] (a log written by an older build), the only such
    /// records are the switch record that leaves it at open and, in pagelevel, a resume record
    /// before it. Every segment after it is created at the current version.
    tail_format: (Lsn, u32),
    /// How many purged segment files are kept for reuse (see `recycle`).
    recycle: usize,
    /// The control file's contents and the holds' limit (checkpoint.rs).
    retention: checkpoint::Retention,
    _dir_lock: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("mode", &self.mode)
            .field("sync", &self.sync)
            .field("end", &self.reservations.end())
            .finish_non_exhaustive()
    }
}

impl Wal {
    pub(crate) fn start(
        dir: &Path,
        config: &Config,
        keys: Arc<Keys>,
        resume: Resume,
        dir_lock: Box<dyn Send + Sync>,
    ) -> Result<Wal> {
        let geo = resume.geo;
        // This log's mutexes: the lock order is checked among them (debug builds).
        let domain = Domain::new();
        let pages = (config.buffer_size as u64 / geo.page_size) as usize;
        let buffer = buffer::PageBuffer::new(pages, geo.page_size, domain);
        let end = resume.end;
        if let Some((prefix, rem_len)) = resume.tail_page {
            buffer.preload(geo.page_start(end), &prefix, rem_len);
        }
        let keys = Arc::new(arc_swap::ArcSwap::new(keys));
        let preparer = Arc::new(Preparer::new(domain));
        let preparer_thread = if config.prepare_segments {
            let maker = Maker {
                storage: config.storage.clone(),
                dir: dir.to_path_buf(),
                mode: config.mode,
                geometry: geo,
                log_id: resume.log_id,
                keys: keys.clone(),
                recycle: config.recycle_segments > 0,
            };
            Some(Preparer::spawn(&preparer, maker)?)
        } else {
            None
        };
        Ok(Wal {
            dir: dir.to_path_buf(),
            storage: config.storage.clone(),
            mode: config.mode,
            geo,
            log_id: resume.log_id,
            sync: config.sync,
            seal: Seal::new(config.mode, resume.log_id, geo).compressing(config.compression),
            rotation: rotate::Rotation::new(config, end)?,
            keys,
            opener: std::process::id(),
            ivs: CachePadded::new(IvSource::new(domain)?),
            reservations: reserve::Reservations::new(end, lane_count(), domain),
            buffer,
            inflight: inflight::InFlight::new(end, domain),
            positions: positions::Positions::new(end),
            syncs: durable::Syncs::new(end, domain),
            write: CachePadded::new(OrderedMutex::new(
                WriteState {
                    reserved_to: end,
                    data_end: end,
                    segment_key: None,
                    files: Vec::new(),
                    reused: Vec::new(),
                    imaged: (NO_PAGE, Lsn(0)),
                    hint_unsynced: None,
                    inflight: inflight::Registry::default(),
                },
                domain,
            )),
            group: CachePadded::new(GroupCommit::default()),
            poison: poison::Poison::new(domain),
            counters: Counters::default(),
            reports: report::Reports::new(config.listener.clone(), geo.segment_start(end)),
            preparer,
            preparer_thread,
            tail_format: resume.tail_format,
            recycle: config.recycle_segments,
            retention: checkpoint::Retention::new(config.max_hold_bytes),
            _dir_lock: dir_lock,
        })
    }

    /// The log's encryption mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Page and segment sizes of this log.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The position after the last appended record: where the next record will start (or
    /// just before it, if page headers come first). It counts every record whose place is
    /// reserved, including those another thread's `append` is still sealing and copying;
    /// `flush(wal.end_lsn())` waits for them and makes all of them durable, and
    /// [`Wal::checkpoint`] at it covers them.
    pub fn end_lsn(&self) -> Lsn {
        self.reservations.end()
    }

    /// Why the log refuses work, once a write, fdatasync or file operation failed in a way
    /// that poisoned it (or an internal invariant broke); `None` while it is healthy, and
    /// after [`Wal::shutdown`] of a healthy log (which refuses work with [`Error::Closed`]).
    /// The call that failed returned that failure itself (an I/O error naming the operation
    /// and file, or `Error::Poisoned` for a broken invariant), and every later call returns
    /// [`Error::Poisoned`] with this cause. An error from [`Wal::purge_before`] or
    /// [`Wal::checkpoint`] may or may not have poisoned the log (removing an old segment can
    /// fail harmlessly; the fdatasync before it cannot): this says whether the log must be
    /// reopened.
    pub fn poison_cause(&self) -> Option<PoisonCause> {
        self.poison.cause()
    }

    /// The record boundary through which `flush` has completed.
    pub fn flushed_lsn(&self) -> Lsn {
        self.positions.flushed()
    }

    /// The record boundary through which the log is fdatasync'ed (what page headers carry as
    /// their durable hint).
    pub(crate) fn synced_lsn(&self) -> Lsn {
        self.positions.synced()
    }

    /// What a follower in this process needs to read the files: storage and expanded keys.
    pub(crate) fn follow_parts(&self) -> (Arc<dyn Storage>, Arc<Keys>) {
        (self.storage.clone(), self.keys.load_full())
    }

    /// Appends one record and returns its LSN. Safe to call from many threads at once.
    ///
    /// The record is compressed (when configured) and its IV drawn first; then the appender
    /// reserves its bytes under the insert lock (a few lines of arithmetic, which give it its
    /// LSN) and, with no lock of the log held, seals it at that LSN (encrypts in perrecord
    /// modes, checksums in every mode) and copies it into the WAL buffer. The record is
    /// durable once [`Wal::flush`] with this LSN returns Ok.
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<Lsn> {
        self.check_poison()?;
        check_len(payload)?;
        let result = self.seal.compressed(0, payload, |flags, stored| {
            let record = Pending {
                kind,
                flags,
                stored,
            };
            self.insert(std::slice::from_ref(&record), payload.len())
        });
        self.deliver_events();
        self.rotate_if_due(result.is_ok());
        result.map(|(first, _)| first)
    }

    /// Appends several records as one unit of work and returns their LSNs, in order. Safe to
    /// call from many threads at once.
    ///
    /// The records get consecutive places in the log, reserved in one hold of the insert
    /// lock, with no other thread's record between them. Make them durable with
    /// [`Wal::flush`] of the last LSN. An empty batch returns an empty list and appends
    /// nothing.
    ///
    /// A batch is not atomic across a crash: like records appended one by one, a crash before
    /// `flush` returns may keep any prefix of the batch. An engine that needs all-or-nothing
    /// commits its transaction with a record of its own, after the batch.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let wal = walcrypt::Wal::open(dir.path(), walcrypt::Config::new(walcrypt::Mode::Plaintext))?;
    /// let lsns = wal.append_batch([(1, &b"put a"[..]), (1, b"put b"), (2, b"commit")])?;
    /// wal.flush(lsns[2])?;
    /// # Ok::<(), walcrypt::Error>(())
    /// ```
    pub fn append_batch<'a, I>(&self, records: I) -> Result<Vec<Lsn>>
    where
        I: IntoIterator<Item = (u8, &'a [u8])>,
    {
        self.check_poison()?;
        let records: SmallVec<[(u8, &[u8]); INLINE_RECORDS]> = records.into_iter().collect();
        for (_, payload) in &records {
            check_len(payload)?;
        }
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let payload_bytes = records.iter().map(|(_, p)| p.len()).sum();
        // Compressed payloads (when configured and worth it), wiped when dropped.
        let mut packed = compress::Packed::default();
        let forms: SmallVec<[Option<usize>; INLINE_RECORDS]> = records
            .iter()
            .map(|(_, payload)| match self.seal.compresses(0, payload) {
                true => packed.push(payload),
                false => None,
            })
            .collect();
        let pending: SmallVec<[Pending<'_>; INLINE_RECORDS]> = records
            .iter()
            .zip(&forms)
            .map(|((kind, payload), form)| match form {
                Some(piece) => Pending {
                    kind: *kind,
                    flags: RECORD_FLAG_COMPRESSED,
                    stored: packed.piece(*piece),
                },
                None => Pending {
                    kind: *kind,
                    flags: 0,
                    stored: payload,
                },
            })
            .collect();
        let result = self.insert(&pending, payload_bytes);
        drop(pending);
        drop(packed);
        self.deliver_events();
        self.rotate_if_due(result.is_ok());
        result.map(|(_, lsns)| lsns.into_vec())
    }

    /// Rotates the data key when the rotation policy says it is due (after an append).
    fn rotate_if_due(&self, appended: bool) {
        if appended && self.rotation.due(self.reservations.end()) {
            self.rotate_by_policy();
        }
    }

    /// The length of a record's stored form in the log: header, stored payload, tag. Data
    /// records land only in segments of the current format version (a writer leaves a tail
    /// segment of an older one with a switch record at open).
    fn record_len(&self, record: &Pending<'_>) -> usize {
        self.seal
            .stored_len(format::FORMAT_VERSION, record.stored.len(), record.flags)
    }

    /// Places records (one, or a batch) in the log: reserves their bytes with one
    /// compare-and-swap of the insert position, then seals each at its LSN and copies it into
    /// the buffer with no lock of the log held (a slot's, once per page, for the record that
    /// enters a page at its body's start). Returns the first LSN and, for more than one
    /// record, every LSN.
    ///
    /// The IVs are drawn before the reservation, so nothing that can fail for want of
    /// randomness comes after it. Once bytes are reserved, any failure (or a panic) poisons
    /// the log ([`Inserting`]): the reserved bytes stay a hole that nothing may write out as
    /// if it were a record, and no flush may pass it.
    fn insert(&self, records: &[Pending<'_>], payload_bytes: usize) -> Result<(Lsn, Lsns)> {
        let mut lens = SmallVec::<[usize; INLINE_RECORDS]>::new();
        let mut ivs = SmallVec::<[Option<[u8; IV_LEN]>; INLINE_RECORDS]>::new();
        for r in records {
            lens.push(self.record_len(r));
            ivs.push(match self.needs_iv(r.flags) {
                true => Some(self.ivs.next_iv()?),
                false => None,
            });
        }
        let total: usize = lens.iter().sum();
        // Sized before the reservation, which only does arithmetic.
        let mut lsns = Lsns::with_capacity(records.len());
        let lane = self.reservations.claim_lane(lane_hint());
        let held = self
            .reservations
            .reserve(&self.geo, &lens, &lane, &mut lsns, sample_insert_hold())
            .map_err(|reserve::Shut| Error::Closed(self.dir.clone()))?;
        if let Some(held) = held {
            self.counters
                .here()
                .insert_lock_ns
                .add(held * INSERT_HOLD_SAMPLE);
        }
        let mut inserting = Inserting {
            wal: self,
            lane,
            finished: false,
        };
        SEAL_BUFFER
            .with(|buffer| {
                let mut sealed = buffer.take();
                let result =
                    self.seal_and_copy(records, &ivs, &lsns, total, &inserting, &mut sealed);
                if sealed.capacity() <= SEAL_BUFFER_KEEP {
                    buffer.set(sealed);
                }
                result
            })
            .map_err(|e| match self.poison.is_set() {
                true => e,
                false => self.poison_error(e),
            })?;
        inserting.finished = true;
        drop(inserting);
        self.counters.here().appends.add(records.len() as u64);
        self.counters.here().payload_bytes.add(payload_bytes as u64);
        self.counters.here().record_bytes.add(total as u64);
        Ok((lsns[0], lsns))
    }

    /// Seals each of `records` at its LSN into `sealed` and copies it into the buffer.
    fn seal_and_copy(
        &self,
        records: &[Pending<'_>],
        ivs: &[Option<[u8; IV_LEN]>],
        lsns: &[Lsn],
        total: usize,
        inserting: &Inserting<'_>,
        sealed: &mut Vec<u8>,
    ) -> Result<()> {
        sealed.clear();
        // At its final size before any plaintext is in it: growing it later would leave a
        // copy of the plaintext in the freed allocation.
        sealed.reserve(total);
        // Loaded after the reservation: a rotation installs a new key only with no insertion
        // in progress (`switch_segment_installing`), so these are the keys of the segment the
        // records land in.
        let keys = self.keys.load();
        let own = Some(inserting.lane.index());
        for ((record, iv), &lsn) in records.iter().zip(ivs).zip(lsns) {
            let begin = sealed.len();
            self.seal_at(&keys, lsn, *iv, record, sealed)?;
            self.copy_at(lsn, &sealed[begin..], own)?;
        }
        Ok(())
    }

    /// Whether a record with these flags is sealed under a key (and so needs an IV).
    fn needs_iv(&self, flags: u8) -> bool {
        self.seal.record_seal(format::FORMAT_VERSION, flags) != RecordSeal::Plain
    }

    /// Appends to `out` the stored form of `record` placed at `lsn`, sealed under the active
    /// key and `iv` ([`Seal::seal_record_at`]).
    fn seal_at(
        &self,
        keys: &Keys,
        lsn: Lsn,
        iv: Option<[u8; IV_LEN]>,
        record: &Pending<'_>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let at = At {
            lsn,
            version: self.version_at(lsn),
        };
        let len = self
            .seal
            .stored_len(at.version, record.stored.len(), record.flags);
        let begin = out.len();
        out.resize(begin + len, 0);
        let key = SealKey {
            keys,
            key_id: keys.active().unwrap_or(0),
            iv,
        };
        self.seal.seal_record_at(
            &key,
            (record.kind, record.flags),
            record.stored,
            at,
            &mut out[begin..],
        )
    }

    /// The end of a record of `len` bytes starting at `lsn`: [`record_end`] in this log.
    fn end_of(&self, lsn: Lsn, len: usize) -> Lsn {
        record_end(&self.geo, lsn, len)
    }

    /// The format version of the segment a record starting at `lsn` lies in.
    fn version_at(&self, lsn: Lsn) -> u32 {
        let (tail_end, tail_version) = self.tail_format;
        if lsn < tail_end {
            tail_version
        } else {
            format::FORMAT_VERSION
        }
    }

    /// Copies a sealed record into the buffer at `lsn`, its reserved place, claiming the slot
    /// of each page it enters. `own` is the caller's insertion lane (none for the exclusive
    /// paths, which hold the insert lock with no insertion in progress).
    fn copy_at(&self, lsn: Lsn, sealed: &[u8], own: Option<usize>) -> Result<()> {
        let mut pos = lsn;
        let mut done = 0;
        while done < sealed.len() {
            pos = self.geo.skip_headers(pos);
            let page = self.geo.page_start(pos);
            // The record that enters a page at its body's start says how much of it continues
            // there (zero when it starts there).
            let rem_len = (pos == page + PAGE_HEADER_LEN as u64).then(|| match done {
                0 => 0,
                _ => (sealed.len() - done) as u32,
            });
            let in_page = (pos - page) as usize;
            let n = (sealed.len() - done).min(self.geo.page_size as usize - in_page);
            self.claim_slot(page, rem_len, own)?
                .write(in_page, &sealed[done..done + n]);
            done += n;
            pos += n as u64;
        }
        Ok(())
    }

    /// Copies a record into the buffer at the first place for record bytes at or after `pos`,
    /// for the paths that place a record with the insert lock held exclusively (segment
    /// switch, resume); returns its (start, end). The caller moves the insert position.
    fn copy_in(&self, pos: Lsn, sealed: &[u8]) -> Result<(Lsn, Lsn)> {
        let lsn = self.geo.skip_headers(pos);
        self.copy_at(lsn, sealed, None)?;
        Ok((lsn, self.end_of(lsn, sealed.len())))
    }

    /// The slot of `page`, holding `page`: claimed for it if it still holds an older
    /// page, once that page has landed in full ([`buffer::PageBuffer::claim`]); until then
    /// this thread makes room by writing out everything before `page`. Appenders copying into
    /// one page claim its slot in any order; the one entering the page at its body's start
    /// sets how much of its record continues there (`rem_len`).
    fn claim_slot(
        &self,
        page: Lsn,
        rem_len: Option<u32>,
        own: Option<usize>,
    ) -> Result<buffer::Holding<'_>> {
        loop {
            match self.buffer.claim(page, rem_len, self.inflight.written()) {
                Ok(Some(slot)) => return Ok(slot),
                Ok(None) => {}
                Err(wrong) => return Err(self.broken_invariant("copy a record", page, wrong.0)),
            }
            self.counters.here().buffer_full_waits.add(1);
            // Everything before `page` is reserved; the insertions that reserved it (earlier
            // in the log than this thread's) finish, then this thread writes it out. Its own
            // bytes before `page` are copied already.
            self.reservations.wait_finished(page, own);
            self.write_out(page)?;
        }
    }

    /// A position through which every record is in the buffer
    /// ([`reserve::Reservations::inserted_to`]).
    fn inserted_to(&self) -> Lsn {
        self.reservations.inserted_to()
    }

    /// Waits until the record holding `lsn` (or every record, at the end) is in the buffer
    /// ([`reserve::Reservations::inserted_through`]).
    fn inserted_through(&self, lsn: Lsn) -> Lsn {
        self.reservations.inserted_through(lsn)
    }

    /// What the open that made this `Wal` found: where the log ended, how much was replayed,
    /// and whether damage was cut away ([`crate::RecoveryMode::TruncateAtDamage`]).
    pub fn recovery_summary(&self) -> Option<&RecoverySummary> {
        self.reports.recovery()
    }

    /// Records what recovery found and tells the listener.
    pub(crate) fn recovered(&self, summary: RecoverySummary) {
        self.reports.recovered(summary);
    }

    /// Rewrites the page holding the end of the log (same records, fresh header) and syncs it.
    /// After recovery cut the log inside its durable part, that page's header may still carry
    /// a durable hint beyond the new end, which a reader would take for damage after the end;
    /// the rewrite stamps the hint of the log as it now is. After recovery found records past
    /// that hint (written by the previous writer, synced by the open), it stamps the hint that
    /// lets followers read them.
    pub(crate) fn restamp_tail(&self) -> Result<()> {
        let end = self.reservations.end();
        let page = self.geo.page_start(end);
        if end <= page + PAGE_HEADER_LEN as u64 {
            return Ok(());
        }
        let same = self.check_process()?;
        let turn = self.syncs.turn();
        let mut w = self.write.lock();
        w.reserved_to = page;
        self.write_locked(&mut w, end, same)?;
        self.sync_locked(&mut w, &turn)
    }

    /// Makes every appended record durable with an fdatasync, in every [`SyncMode`] (in
    /// `Buffered` mode too), and keeps the log open. `sync` is `flush(wal.end_lsn())` that also
    /// syncs when `flush` alone would not.
    pub fn sync(&self) -> Result<()> {
        let result = if self.sync == SyncMode::Durable {
            self.flush(self.end_lsn())
        } else {
            self.check_poison().and_then(|()| self.sync_all())
        };
        self.deliver_events();
        result
    }

    /// Writes and fdatasyncs everything appended, under the write lock.
    fn sync_all(&self) -> Result<()> {
        let same = self.check_process()?;
        // Every record appended before this call, and all before them, is in the buffer;
        // waited for before the write lock, which those insertions may need.
        let target = self.inserted_through(self.reservations.end());
        let turn = self.syncs.turn();
        self.counters.here().write_lock_acquisitions.add(1);
        let (mut w, held_since) = flush::timed_lock(&self.write);
        let result = self.write_locked(&mut w, target, same).and_then(|()| {
            self.sync_locked(&mut w, &turn)?;
            // A switch or another sync under the lock before this one may have stored more.
            self.acknowledge_synced(&mut w, target)?;
            self.debug_check_positions(&w);
            Ok(())
        });
        self.counters
            .here()
            .write_lock_ns
            .add(held_since.elapsed().as_nanos() as u64);
        result
    }

    /// One flush round led by this thread (a group-commit round, or a `Buffered` flush's
    /// own, `writes_alone`), reported to the listener. `round` (the
    /// group-commit round this thread leads, if any) ends before the listener is called, so a
    /// listener may `flush` again: it joins or leads a later round instead of waiting for the
    /// end of the one its own thread still leads.
    fn lead_round(&self, lsn: Lsn, mut round: Option<group::RoundEnd<'_>>) -> Result<()> {
        let Some(listener) = self.reports.listener() else {
            return self.lead_flush(lsn, round.as_mut());
        };
        let started = Instant::now();
        let result = self.lead_flush(lsn, round.as_mut());
        drop(round);
        if result.is_ok() {
            listener.on_flush_round(&FlushRound {
                flushed_to: self.flushed_lsn(),
                synced: self.sync == SyncMode::Durable,
                duration: started.elapsed(),
            });
        }
        self.deliver_events();
        result
    }

    /// True when `flush(lsn)` has nothing left to do: the record at `lsn` is flushed, or `lsn`
    /// is the end of the log and everything before it is.
    fn flushed_through(&self, lsn: Lsn) -> bool {
        self.positions
            .flushed_through(lsn, || self.reservations.end())
    }

    /// Tells the listener of a segment switch or a poisoning it has not heard of yet. Called
    /// at the exits of the public operations, with no lock held; one branch without listener.
    fn deliver_events(&self) {
        let Some(listener) = self.reports.listener() else {
            return;
        };
        let segment = self.geo.segment_start(self.inflight.written());
        if let Some(switch) = self.reports.switch_to(segment) {
            listener.on_segment_switch(&switch);
        }
        if let Some(cause) = self.poison.take_unreported() {
            listener.on_poisoned(&cause);
        }
    }

    /// Refuses work in another process than the opener (a forked child): it would repeat the
    /// opener's IVs. Called where bytes go to disk (every write-out, purge, rotation), not per
    /// append: `getpid` is a system call (about 200 ns measured here), and nothing an append
    /// seals reaches the disk without a write-out.
    ///
    /// Called before the write lock is taken, never inside it: a forked child has one thread,
    /// so checking before the lock is as good, and the system call stays out of the serial
    /// part of a commit. `SameProcess` is the proof `write_locked` asks for.
    fn check_process(&self) -> Result<SameProcess> {
        let caller = std::process::id();
        if caller != self.opener {
            return Err(Error::ForeignProcess {
                opener: self.opener,
                caller,
            });
        }
        Ok(SameProcess(()))
    }

    fn check_poison(&self) -> Result<()> {
        self.poison.check(&self.dir)
    }

    fn poison(&self, op: &'static str, segment: Lsn, e: std::io::Error) -> Error {
        let path = self.dir.join(format::segment_file_name(segment));
        self.poison_error(Error::io(op, path, e))
    }

    /// [`Wal::poison`] for a read or write at `offset` of the segment at `segment`: the message
    /// names the offset and its LSN too (the kind of error is kept).
    fn poison_at(&self, op: &'static str, segment: Lsn, offset: u64, e: std::io::Error) -> Error {
        let lsn = segment + offset;
        let e = std::io::Error::new(e.kind(), format!("at offset {offset} (lsn {lsn}): {e}"));
        self.poison(op, segment, e)
    }

    /// An internal invariant that failed: reported as a poisoning cause naming the segment of
    /// `lsn`, never a panic.
    fn broken_invariant(&self, op: &'static str, lsn: Lsn, message: String) -> Error {
        let segment = self.geo.segment_start(lsn);
        Error::Poisoned(PoisonCause {
            op,
            path: self.dir.join(format::segment_file_name(segment)),
            kind: std::io::ErrorKind::Other,
            message,
        })
    }

    fn poison_error(&self, error: Error) -> Error {
        self.poison.set(error)
    }
}

/// The end of a record of `len` bytes (at least one) starting at `lsn` (a position where
/// record bytes may go): one past its last byte, skipping the page and segment headers it runs
/// over. Arithmetic only, for the insert lock: `lsn` becomes an index into the log's record
/// bytes (headers left out), and the index of the record's last byte a position again, so a
/// record of any length costs the same. A record ending at a page's end ends at the next
/// page's start, before its header, as the copy leaves the insert position.
///
/// A record that ends in the page it starts in (most do) takes a mask and an add: the general
/// case divides nine times, about a third of a reservation's cost measured at 1 thread.
fn record_end(geo: &Geometry, lsn: Lsn, len: usize) -> Lsn {
    // The page size is a power of two (`format::validate_geometry`); the check is one
    // instruction.
    if geo.page_size.is_power_of_two()
        && (lsn.0 & (geo.page_size - 1)) + len as u64 <= geo.page_size
    {
        return lsn + len as u64;
    }
    let header = PAGE_HEADER_LEN as u64;
    let body = geo.page_size - header;
    let segment_bytes = (geo.segment_size / geo.page_size - 1) * body;
    let in_segment = lsn - geo.segment_start(lsn);
    let (page, in_page) = (in_segment / geo.page_size, in_segment % geo.page_size);
    let index = (lsn.0 / geo.segment_size) * segment_bytes + (page - 1) * body + (in_page - header);
    let last = index + len as u64 - 1;
    let (segment, in_segment) = (last / segment_bytes, last % segment_bytes);
    let (page, in_page) = (in_segment / body + 1, in_segment % body);
    Lsn(segment * geo.segment_size + page * geo.page_size + header + in_page + 1)
}

fn check_len(payload: &[u8]) -> Result<()> {
    if payload.len() > format::MAX_PAYLOAD {
        return Err(Error::RecordTooLarge {
            len: payload.len(),
            max: format::MAX_PAYLOAD,
        });
    }
    Ok(())
}

impl Drop for Wal {
    fn drop(&mut self) {
        // A forked child takes no lock at all: any lock a thread of the parent held at the
        // fork (the preparer's, the write lock, ...) stays locked forever in the child. It has
        // no preparer thread of its own and may write nothing (`check_process`), so it leaves
        // everything as it is; its memory and descriptors go when it exits or execs.
        if std::process::id() != self.opener {
            return;
        }
        // The preparer finishes the segment it may be making before the directory lock goes.
        self.preparer.close();
        if let Some(thread) = self.preparer_thread.take() {
            let _ = thread.join();
        }
        if self.poison.is_set() {
            return;
        }
        // A forked child dropping its copy writes nothing (`check_process`).
        let Ok(same) = self.check_process() else {
            return;
        };
        // No other reference is left, so no insertion is in progress; `inserted_to` is the end.
        let target = self.inserted_to();
        let turn = self.syncs.turn();
        let mut w = self.write.lock();
        // Best effort: hand buffered records to the OS. Errors surface through `close`.
        if self.write_locked(&mut w, target, same).is_ok() && self.sync == SyncMode::Durable {
            let _ = self.sync_locked(&mut w, &turn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::record_end;
    use crate::Lsn;
    use crate::format::{Geometry, PAGE_HEADER_LEN};

    /// The copy's walk: page by page, skipping headers, as `copy_at` places the bytes.
    fn walked_end(geo: &Geometry, lsn: u64, len: usize) -> u64 {
        let mut pos = lsn;
        let mut left = len as u64;
        while left > 0 {
            pos = geo.skip_headers(Lsn(pos)).0;
            let n = left.min(geo.page_start(Lsn(pos)).0 + geo.page_size - pos);
            pos += n;
            left -= n;
        }
        pos
    }

    #[test]
    fn a_reservation_ends_where_the_copy_ends() {
        for (page_size, pages) in [(512u64, 4u64), (4096, 3), (8192, 16)] {
            let geo = Geometry {
                page_size,
                segment_size: page_size * pages,
            };
            let header = PAGE_HEADER_LEN as u64;
            let mut starts = Vec::new();
            for segment in [0, 1, 2, (1 << 32) / geo.segment_size] {
                for page in 1..pages {
                    let page = segment * geo.segment_size + page * page_size;
                    starts.extend(
                        [header, header + 1, page_size / 2, page_size - 1].map(|at| page + at),
                    );
                }
            }
            let body = (page_size - header) as usize;
            let lens = [1, 2, 17, body - 1, body, body + 1, 3 * body, 5 * body + 7];
            for &lsn in &starts {
                for len in lens {
                    assert_eq!(
                        record_end(&geo, Lsn(lsn), len).0,
                        walked_end(&geo, lsn, len),
                        "page {page_size}, {pages} pages a segment, record of {len} at {lsn}"
                    );
                }
            }
        }
    }
}
