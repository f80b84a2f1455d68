//! The writer: append and the WAL buffer (this file); opening a log and resuming it after
//! recovery (`open`); writing out, group commit and fdatasync (`flush`); segment handles,
//! switch and purge (`segments`); segment creation, also ahead of time (`prepare`); key
//! rotation (`rotate`). docs/DESIGN.md walks through the whole write path.
//!
//! An append runs in three steps: before any lock, it compresses the payload and draws its
//! IV; under the insert lock it only reserves its bytes (a few lines of arithmetic, which give
//! it its LSN); after the lock, on an **insertion lane** of its own (insertions.rs), it seals
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
//!    by a compare-and-swap with no lock of the log held, and the others sleep on the round
//!    counter (no lock held either) until the round ends. It orders flushers, never data.
//! 1. the **insert lock** (`insert`): reserves bytes at the insert position and publishes the
//!    reservation's start in the appender's lane. Nothing else happens inside it. The
//!    exclusive paths (switch, rotation, resume) hold it while they wait for the insertions in
//!    progress to finish, which never take it again, and then copy their control record.
//!    An **insertion lane** (`insertions`) is claimed before it and held until the copy ends;
//!    waiting for a lane's insertion (`Insertions::wait_finished`) is done with no lock held
//!    but the insert lock (exclusive paths), and only for insertions that began earlier in the
//!    log than the waiter's own, so those waits never form a cycle.
//! 2. the **write lock** (`write`): reserves the next range of the log for writing
//!    (`[reserved_to, target)`), copies its finished bytes out of the buffer into the
//!    reserving thread's own buffer, encrypts pages (pagelevel) and registers the range in
//!    flight; a Buffered flush (plaintext, perrecord) and an appender making room write the
//!    range after releasing it. Durable rounds, pagelevel flushes, `sync`, `close`, the
//!    segment switch and the open write (and wait for every range in flight to land), and
//!    fdatasync where they must, under it. Flushers take it without the
//!    insert lock, after waiting for the insertions they flush; an appender takes it (with
//!    no other lock held) only when the buffer is full and it must make room,
//!    and the open takes it under the insert lock when it moves the log on past a segment
//!    switch or to a fresh page (`switch_segment`, `resume_on_fresh_page`).
//! 3. the **in-flight lock** (`inflight`, with its condition variable, inflight.rs): the list
//!    of ranges reserved but not yet landed and `landed_to`. Held for a list update or check;
//!    threads wait on its condition variable (with the insert or write lock held or not) for
//!    an earlier range covering the same bytes, or for everything below a position, to land.
//!    Nothing is taken while it is held, so the threads that land ranges never wait for the
//!    insert or write lock.
//! 4. a **slot lock** per buffer page (`slots`), held only for a memcpy (and, in pagelevel,
//!    to draw the page's IV at its first write-out).
//! 5. the **IV source's prefix table** (`IvSource::later` in crypto.rs): taken at most once per
//!    2^32 IVs to draw a new random prefix, under a slot lock (pagelevel) or no lock
//!    (perrecord sealing).
//! 6. the **poison cause** (`poison_reason`): set or cloned, under any of the above but the
//!    in-flight lock, or none; nothing is taken while it is held.
//!
//! The **preparer's state** (`Preparer`, prepare.rs) sits outside this order: it is taken with
//! the write lock held (`take_prepared`), with the insert and write locks held (the switch's
//! `claim_for_swap`) or with none, and nothing is taken while it is held. Its condition
//! variable is waited on under the write lock only for a preparation or a rotation's swap of
//! the segment the writer needs, which take no lock of the log to finish.
//!
//! The event listener is called with none of these held.
//!
//! In debug builds the order is checked on every acquisition (lock_order.rs): each of these
//! mutexes carries its level (a lane's owner 0, insert 1, write 2, in-flight 3, slot 4, IV
//! prefix 5, poison cause 6, a lane's gate and the preparer's state after them, with the
//! exceptions above: a lane's gate only under the thread's own lane or the insert lock, the
//! preparer's state only under those and the write lock, the poison cause never under the
//! in-flight lock, one lane and one slot per thread), and a thread that takes one while
//! holding one of the same log it may not panics, so every test that writes a log checks the
//! order. In release builds they are parking_lot's mutexes and the check is compiled out. What
//! a thread waits for on a condition variable, or on the round counter, is not checked.
//!
//! Four positions (`AtomicU64` LSNs, beside `insert.pos`, the insert position, and
//! `WriteState::reserved_to`), and one computed from the lanes, say how far the log has come.
//! Whenever neither the insert nor the write lock is held, and the log is not poisoned, they
//! satisfy
//!
//! ```text
//! synced_to <= flushed_to <= inserted_to() <= insert_end == insert.pos
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
//! - `written_to`: everything before it has landed in the files (`InFlight::landed_to`, stored
//!   under the in-flight lock when a range lands and every range before it has). Not a record
//!   boundary: an appender making room writes out whole pages before the page it enters, so
//!   while its record (or batch) is partly copied, `written_to` and `reserved_to` may run
//!   ahead of `inserted_to()` into that unfinished record. On disk that is a torn record, which
//!   recovery cuts; it is never acknowledged. A range that failed never lands (the log is
//!   poisoned), so `written_to` stops below it for good.
//! - `flushed_to`: the record boundary through which `flush` guarantees hold (written for
//!   `Buffered`, fdatasync'ed for `Durable`); raised (`fetch_max`) only once `written_to` has
//!   reached it (and, `Durable`, after the fdatasync it vouches for), never once the log is
//!   poisoned.
//! - `synced_to`: the record boundary through which the log is fdatasync'ed; stored under the
//!   write lock right after the fdatasync and before `flushed_to`, so a thread reading both
//!   while the lock is held may see it one round ahead. Every fdatasync first waits for every
//!   reserved range to land (`sync_locked`), so it covers them all. Stamped into page headers
//!   as the durable hint, so it never exceeds what the files hold durably. `Durable`: equal to
//!   `flushed_to` once the write lock is free. `Buffered`: moves only at open, `sync` and
//!   `close`.
//!
//! All only grow (`restamp_tail` moves back only `reserved_to`, to rewrite the tail page at
//! open). At open, before the `Wal` is shared, they jump over the part of the log left unused:
//! `switch_segment` moves all of them to the next segment's start, `resume_on_fresh_page`
//! moves `reserved_to`, `written_to` and `insert_end` past the rest of the tail page, with
//! nothing in flight.
//!
//! Group commit sits in front of the write lock: one flusher at a time leads a round (write
//! and fdatasync everything appended so far); the others wait for the round to end and then
//! either find their record durable or lead the next round for everyone still waiting.
//!
//! The buffer is a ring of page slots. A slot is claimed for a page by the first appender
//! copying into that page, only once the page one ring length earlier has landed completely
//! (`written_to` past its end; `claim_slot`), so memory stays bounded and appenders wait (by
//! writing) when it is full. Appenders copying into one page claim its slot in any order.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use crossbeam::utils::CachePadded;
use parking_lot::Mutex;

use crate::Lsn;
use crate::compress;
use crate::config::{Config, Mode, SyncMode};
use crate::crypto::{IV_LEN, IvSource, Keys};
use crate::error::{Error, PoisonCause, Result};
use crate::events::{EventListener, FlushRound, RecoverySummary, SegmentSwitch};
use crate::format::{self, Geometry, PAGE_HEADER_LEN, RECORD_FLAG_COMPRESSED};
use crate::lock_order::{self, Domain, OrderedGuard, OrderedMutex};
use crate::seal::{At, RecordSeal, Seal, SealKey};
use crate::storage::{Storage, StorageFile};

mod checkpoint;
mod flush;
mod group;
mod inflight;
mod insertions;
mod open;
mod prepare;
mod recycle;
mod rotate;
mod segments;

use group::GroupCommit;
use prepare::{Maker, Preparer};

const NO_PAGE: u64 = u64::MAX;

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
        if !self.finished && !self.wal.poisoned.load(Ordering::Acquire) {
            let at = self.wal.insert_end.load(Ordering::Acquire);
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
fn lane_hint() -> usize {
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

thread_local! {
    static SEAL_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Counters a `Wal` keeps about its own work; see [`Wal::stats`].
///
/// Lock hold times are measured with a monotonic clock from the moment the lock is acquired
/// to the moment it is released. For an acquisition that does not wait, the clock is read
/// just before it (outside the lock), so the hold includes the acquiring compare-and-swap; a
/// thread that waits reads the clock once it holds the lock, so waiting never counts as held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records appended.
    pub appends: u64,
    /// Payload bytes appended.
    pub payload_bytes: u64,
    /// Record bytes (headers and payloads) placed in the log.
    pub record_bytes: u64,
    /// Total time the insert lock was held, in nanoseconds: estimated from one hold in 16
    /// per thread (timed as the write lock is, see above), counted 16 times. The hold is a few lines of arithmetic, shorter than the two clock
    /// reads that would time it; timing every hold cost more than the hold.
    pub insert_lock_ns: u64,
    /// Times the write lock was taken.
    pub write_lock_acquisitions: u64,
    /// Total time the write lock was held, in nanoseconds (including fdatasync).
    pub write_lock_ns: u64,
    /// Of that, time spent encrypting pages (pagelevel only), in nanoseconds.
    pub write_lock_encrypt_ns: u64,
    /// Of that, time spent in fdatasync, in nanoseconds.
    pub fsync_ns: u64,
    /// fdatasync calls.
    pub fsyncs: u64,
    /// Page images written (a partly filled page may be written several times).
    pub pages_written: u64,
    /// Times an appender found the buffer full and had to write pages out itself.
    pub buffer_full_waits: u64,
}

struct InsertState {
    /// End of the last record placed in the buffer (the next record starts at or after it).
    pos: u64,
}

/// One counter of [`WalStats`]: updated with relaxed atomic adds, so reading the statistics
/// never takes a lock (and never waits out an fdatasync).
#[derive(Default)]
pub(super) struct Counter(AtomicU64);

impl Counter {
    pub(super) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One shard of the counters behind [`Wal::stats`], one counter per field.
#[derive(Default)]
pub(super) struct Shard {
    appends: Counter,
    payload_bytes: Counter,
    record_bytes: Counter,
    insert_lock_ns: Counter,
    buffer_full_waits: Counter,
    pub(super) write_lock_acquisitions: Counter,
    pub(super) write_lock_ns: Counter,
    pub(super) write_lock_encrypt_ns: Counter,
    pub(super) fsync_ns: Counter,
    pub(super) fsyncs: Counter,
    pub(super) pages_written: Counter,
}

/// Shards of the counters, each on cache lines of its own: a thread adds to the shard of its
/// lane hint, so appenders on different threads write no statistics line in common, and
/// [`Wal::stats`] sums the shards.
pub(super) struct Counters(Box<[CachePadded<Shard>]>);

/// Shards of [`Counters`]: enough that up to this many appending threads never share one.
const COUNTER_SHARDS: usize = 16;

impl Default for Counters {
    fn default() -> Self {
        Counters((0..COUNTER_SHARDS).map(|_| Default::default()).collect())
    }
}

impl Counters {
    /// This thread's shard.
    pub(super) fn here(&self) -> &Shard {
        &self.0[lane_hint() % self.0.len()]
    }

    /// The sum of one counter over the shards.
    fn sum(&self, counter: impl Fn(&Shard) -> &Counter) -> u64 {
        self.0.iter().map(|shard| counter(shard).get()).sum()
    }
}

struct Slot {
    page: u64,
    rem_len: u32,
    /// pagelevel: the key id and IV of this page, drawn at its first write-out and kept for
    /// every rewrite within this open, so a rewrite repeats the durable bytes exactly.
    cipher: Option<(u32, [u8; IV_LEN])>,
    data: Vec<u8>,
}

struct WriteState {
    /// Everything before it is reserved: written, or being written by the thread that
    /// reserved it (`InFlight`). Not a record boundary (see `written_to`).
    reserved_to: u64,
    /// The end of the log's bytes in the files: `reserved_to` as the last write-out left it,
    /// before any jump over unused log (a segment switch, a resume on a fresh page). Past it,
    /// the page that holds it has no record bytes, only what its buffer slot kept from an
    /// earlier page: `refresh_hint` rewrites that page up to here, zeros after.
    data_end: u64,
    /// A segment (created before the key was rotated) whose pages use this key, not the active
    /// one: its header lists only the keys of its time.
    segment_key: Option<(u64, u32)>,
    files: Vec<(u64, Arc<dyn StorageFile>)>,
    /// The segments of `files` made from a reused file, whose pages hold old bytes where this
    /// open has not written yet (see `recycle::MadeSegment`).
    reused: Vec<u64>,
    dirty: Vec<u64>,
    /// The last page whose image (from its header) this open wrote, and the durable hint stamped in it
    /// (`NO_PAGE` before the first): see `appendable`.
    imaged: (u64, u64),
    /// The segment whose last page's header `refresh_hint` rewrote since its last fdatasync,
    /// if any: `close` syncs it, so the hint survives a restart too.
    hint_unsynced: Option<u64>,
}

/// Where recovery left the log, handed to the writer.
pub(crate) struct Resume {
    pub(crate) log_id: u64,
    pub(crate) geo: Geometry,
    /// End of the valid log: the next record goes here.
    pub(crate) end: u64,
    /// The valid prefix of the page holding `end`, decrypted, and that page's continuation length.
    pub(crate) tail_page: Option<(Vec<u8>, u32)>,
    /// The end of the segment holding `end` and that segment's format version (see
    /// `Wal::tail_format`).
    pub(crate) tail_format: (u64, u32),
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
    insert: CachePadded<OrderedMutex<InsertState, { lock_order::INSERT }>>,
    /// Insertions in progress: reserved under the insert lock, sealed and copied after it.
    insertions: insertions::Insertions,
    slots: Box<[OrderedMutex<Slot, { lock_order::SLOT }>]>,
    /// The insert position as the appenders' reservations left it: the end of the last record
    /// whose bytes are reserved (a record boundary), stored under the insert lock. Records
    /// below it may still be being copied (`insertions`); `inserted_to` says how far they are.
    insert_end: CachePadded<AtomicU64>,
    /// Everything before this position has been written to the files.
    written_to: CachePadded<AtomicU64>,
    /// Record boundary through which `flush` guarantees hold (written for `Buffered`,
    /// fdatasync'ed for `Durable`).
    flushed_to: CachePadded<AtomicU64>,
    /// Record boundary through which the log is fdatasync'ed. Stamped into page headers as the
    /// durable hint: in `Buffered` mode `flushed_to` runs ahead of it, and a hint claiming
    /// unsynced records durable would turn their loss in a machine crash into corruption.
    synced_to: CachePadded<AtomicU64>,
    write: CachePadded<OrderedMutex<WriteState, { lock_order::WRITE }>>,
    /// Write-outs reserved under the write lock and written after it.
    inflight: inflight::InFlight,
    /// Group commit: whether a flush round is under way, and a count of finished rounds
    /// (group.rs).
    group: CachePadded<GroupCommit>,
    poisoned: AtomicBool,
    /// Why the log was poisoned. Locked only to set or read the cause, never with another lock
    /// held after it.
    poison_reason: OrderedMutex<Option<PoisonCause>, { lock_order::POISON }>,
    /// Statistics, readable without any lock.
    counters: Counters,
    /// Hears of events; calls happen with no lock of the log held.
    listener: Option<Arc<dyn EventListener>>,
    /// Start of the newest segment reported to the listener.
    reported_segment: AtomicU64,
    /// Whether the poisoning was reported to the listener.
    poison_reported: AtomicBool,
    /// What the open that made this `Wal` found.
    recovery: OnceLock<RecoverySummary>,
    /// Segments prepared ahead (see `prepare`), and the thread that prepares them.
    preparer: Arc<Preparer>,
    preparer_thread: Option<std::thread::JoinHandle<()>>,
    /// The end of the segment the log ended in at open, and that segment's format version.
    /// Records starting before that end are checksummed by its version's rule: when it is
    /// older than [`format::FORMAT_VERSION`] (a log written by an older build), the only such
    /// records are the switch record that leaves it at open and, in pagelevel, a resume record
    /// before it. Every segment after it is created at the current version.
    tail_format: (u64, u32),
    /// How many purged segment files are kept for reuse (see `recycle`).
    recycle: usize,
    /// The control file's contents (last checkpoint, retention holds; see `checkpoint`).
    /// Taken with no lock of the log held; only the rotation's ring lock is taken under it.
    control: Mutex<crate::control::Control>,
    /// How far a hold may fall behind the end before a purge gives it up.
    max_hold_bytes: u64,
    /// Set by [`Wal::shutdown`] (before `poisoned`, which then refuses every later call with
    /// [`Error::Closed`] at no cost to the hot path's one check).
    closed: AtomicBool,
    _dir_lock: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("mode", &self.mode)
            .field("sync", &self.sync)
            .field("end", &Lsn(self.insert_end.load(Ordering::Relaxed)))
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
        let nslots = (config.buffer_size as u64 / geo.page_size).max(4) as usize;
        // This log's mutexes: the lock order is checked among them (debug builds).
        let domain = Domain::new();
        let slots: Box<[OrderedMutex<Slot, { lock_order::SLOT }>]> = (0..nslots)
            .map(|_| {
                OrderedMutex::new(
                    Slot {
                        page: NO_PAGE,
                        rem_len: 0,
                        cipher: None,
                        data: vec![0u8; geo.page_size as usize],
                    },
                    domain,
                )
            })
            .collect();
        let end = resume.end;
        if let Some((prefix, rem_len)) = resume.tail_page {
            let page = geo.page_start(Lsn(end)).0;
            let index = (page / geo.page_size) as usize % nslots;
            let mut slot = slots[index].lock();
            slot.page = page;
            slot.rem_len = rem_len;
            slot.data[..prefix.len()].copy_from_slice(&prefix);
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
            seal: Seal::new(config.mode, resume.log_id).compressing(config.compression),
            rotation: rotate::Rotation::new(config, end)?,
            keys,
            opener: std::process::id(),
            ivs: CachePadded::new(IvSource::new(domain)?),
            insert: CachePadded::new(OrderedMutex::new(InsertState { pos: end }, domain)),
            insertions: insertions::Insertions::new(lane_count(), domain),
            slots,
            insert_end: CachePadded::new(AtomicU64::new(end)),
            written_to: CachePadded::new(AtomicU64::new(end)),
            inflight: inflight::InFlight::new(end, domain),
            flushed_to: CachePadded::new(AtomicU64::new(end)),
            synced_to: CachePadded::new(AtomicU64::new(end)),
            write: CachePadded::new(OrderedMutex::new(
                WriteState {
                    reserved_to: end,
                    data_end: end,
                    segment_key: None,
                    files: Vec::new(),
                    reused: Vec::new(),
                    dirty: Vec::new(),
                    imaged: (NO_PAGE, 0),
                    hint_unsynced: None,
                },
                domain,
            )),
            group: CachePadded::new(GroupCommit::default()),
            poisoned: AtomicBool::new(false),
            poison_reason: OrderedMutex::new(None, domain),
            counters: Counters::default(),
            listener: config.listener.clone(),
            reported_segment: AtomicU64::new(geo.segment_start(Lsn(end)).0),
            poison_reported: AtomicBool::new(false),
            recovery: OnceLock::new(),
            preparer,
            preparer_thread,
            tail_format: resume.tail_format,
            recycle: config.recycle_segments,
            control: Mutex::new(crate::control::Control::default()),
            max_hold_bytes: config.max_hold_bytes,
            closed: AtomicBool::new(false),
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
        Lsn(self.insert_end.load(Ordering::Acquire))
    }

    /// The record boundary through which `flush` has completed.
    pub fn flushed_lsn(&self) -> Lsn {
        Lsn(self.flushed_to.load(Ordering::Acquire))
    }

    /// The record boundary through which the log is fdatasync'ed (what page headers carry as
    /// their durable hint).
    pub(crate) fn synced_lsn(&self) -> u64 {
        self.synced_to.load(Ordering::Acquire)
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
        let records: Vec<(u8, &[u8])> = records.into_iter().collect();
        for (_, payload) in &records {
            check_len(payload)?;
        }
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let payload_bytes = records.iter().map(|(_, p)| p.len()).sum();
        // Compressed payloads (when configured and worth it), wiped when dropped.
        let mut packed = compress::Packed::default();
        let forms: Vec<Option<usize>> = records
            .iter()
            .map(|(_, payload)| match self.seal.compresses(0, payload) {
                true => packed.push(payload),
                false => None,
            })
            .collect();
        let pending: Vec<Pending<'_>> = records
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
        result.map(|(first, lsns)| if lsns.is_empty() { vec![first] } else { lsns })
    }

    /// Rotates the data key when the rotation policy says it is due (after an append).
    fn rotate_if_due(&self, appended: bool) {
        if appended && self.rotation.due(self.insert_end.load(Ordering::Relaxed)) {
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

    /// Places records (one, or a batch) in the log: reserves their bytes in one short hold of
    /// the insert lock, then seals each at its LSN and copies it into the buffer with no lock
    /// of the log held but a slot's, for a memcpy. Returns the first LSN and, for more than
    /// one record, every LSN.
    ///
    /// The IVs are drawn before the reservation, so nothing that can fail for want of
    /// randomness comes after it. Once bytes are reserved, any failure (or a panic) poisons
    /// the log ([`Inserting`]): the reserved bytes stay a hole that nothing may write out as
    /// if it were a record, and no flush may pass it.
    fn insert(&self, records: &[Pending<'_>], payload_bytes: usize) -> Result<(Lsn, Vec<Lsn>)> {
        let lens: Vec<usize> = records.iter().map(|r| self.record_len(r)).collect();
        let total: usize = lens.iter().sum();
        let ivs = records
            .iter()
            .map(|r| {
                self.needs_iv(r.flags)
                    .then(|| self.ivs.next_iv())
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        // Allocated before the lock: the lock only does arithmetic.
        let mut lsns = Vec::with_capacity(records.len());
        let lane = self.insertions.claim(lane_hint());
        let timed = sample_insert_hold();
        let (mut ins, held_since) = match timed {
            true => {
                let (ins, since) = flush::timed_lock(&self.insert);
                (ins, Some(since))
            }
            false => (self.insert.lock(), None),
        };
        let start = ins.pos;
        let mut pos = start;
        for &len in &lens {
            let lsn = self.geo.skip_headers(Lsn(pos)).0;
            lsns.push(lsn);
            pos = self.end_of(lsn, len);
        }
        debug_assert!(
            pos > start && lsns.iter().all(|&lsn| lsn >= start && lsn < pos),
            "a reservation from {} to {} places records outside it",
            Lsn(start),
            Lsn(pos)
        );
        ins.pos = pos;
        lane.begin(start);
        self.insert_end.store(pos, Ordering::Release);
        let held = held_since.map(|since| since.elapsed().as_nanos() as u64);
        drop(ins);
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
            .map_err(|e| match self.poisoned.load(Ordering::Acquire) {
                true => e,
                false => self.poison_error(e),
            })?;
        inserting.finished = true;
        drop(inserting);
        self.counters.here().appends.add(records.len() as u64);
        self.counters.here().payload_bytes.add(payload_bytes as u64);
        self.counters.here().record_bytes.add(total as u64);
        let first = Lsn(lsns[0]);
        if lsns.len() == 1 {
            return Ok((first, Vec::new()));
        }
        Ok((first, lsns.into_iter().map(Lsn).collect()))
    }

    /// Seals each of `records` at its LSN into `sealed` and copies it into the buffer.
    fn seal_and_copy(
        &self,
        records: &[Pending<'_>],
        ivs: &[Option<[u8; IV_LEN]>],
        lsns: &[u64],
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
        lsn: u64,
        iv: Option<[u8; IV_LEN]>,
        record: &Pending<'_>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let at = At {
            lsn: Lsn(lsn),
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
    fn end_of(&self, lsn: u64, len: usize) -> u64 {
        record_end(&self.geo, lsn, len)
    }

    /// The format version of the segment a record starting at `lsn` lies in.
    fn version_at(&self, lsn: u64) -> u32 {
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
    fn copy_at(&self, lsn: u64, sealed: &[u8], own: Option<usize>) -> Result<()> {
        let mut pos = lsn;
        let mut done = 0;
        while done < sealed.len() {
            pos = self.geo.skip_headers(Lsn(pos)).0;
            let page = self.geo.page_start(Lsn(pos)).0;
            // The record that enters a page at its body's start says how much of it continues
            // there (zero when it starts there).
            let rem_len = (pos == page + PAGE_HEADER_LEN as u64).then(|| match done {
                0 => 0,
                _ => (sealed.len() - done) as u32,
            });
            let in_page = (pos - page) as usize;
            let n = (sealed.len() - done).min(self.geo.page_size as usize - in_page);
            let mut slot = self.claim_slot(page, rem_len, own)?;
            slot.data[in_page..in_page + n].copy_from_slice(&sealed[done..done + n]);
            drop(slot);
            done += n;
            pos += n as u64;
        }
        Ok(())
    }

    /// Copies a record into the buffer at the insert position, for the paths that place a
    /// record under the insert lock with no insertion in progress (segment switch, resume);
    /// returns its (start, end). The caller moves the insert position.
    fn copy_in(&self, ins: &mut InsertState, sealed: &[u8]) -> Result<(u64, u64)> {
        let lsn = self.geo.skip_headers(Lsn(ins.pos)).0;
        self.copy_at(lsn, sealed, None)?;
        Ok((lsn, self.end_of(lsn, sealed.len())))
    }

    fn slot_index(&self, page: u64) -> usize {
        (page / self.geo.page_size) as usize % self.slots.len()
    }

    /// The slot of `page`, locked, holding `page`: claimed for it if it still holds an older
    /// page, once that page has landed in full. The slot's previous page is at most the page
    /// one ring length before `page`, so it has landed once `written_to` reaches the end of
    /// that one; until then this thread makes room by writing out everything before `page`.
    /// Appenders copying into one page claim its slot in any order; the one entering the page
    /// at its body's start sets how much of its record continues there (`rem_len`).
    fn claim_slot(
        &self,
        page: u64,
        rem_len: Option<u32>,
        own: Option<usize>,
    ) -> Result<OrderedGuard<'_, Slot, { lock_order::SLOT }>> {
        let index = self.slot_index(page);
        let ring = self.slots.len() as u64 * self.geo.page_size;
        let free_from = (page + self.geo.page_size).saturating_sub(ring);
        loop {
            {
                let mut slot = self.slots[index].lock();
                if slot.page == page {
                    if let Some(rem_len) = rem_len {
                        slot.rem_len = rem_len;
                    }
                    return Ok(slot);
                }
                if slot.page != NO_PAGE && slot.page > page {
                    return Err(self.broken_invariant(
                        "copy a record",
                        page,
                        format!(
                            "the buffer slot of page {} holds the later page {}",
                            Lsn(page),
                            Lsn(slot.page)
                        ),
                    ));
                }
                let written = self.written_to.load(Ordering::Acquire);
                if written >= free_from {
                    // Slot reuse: the page it held has landed in full.
                    debug_assert!(
                        slot.page == NO_PAGE || written >= slot.page + self.geo.page_size,
                        "slot of page {} reused for page {} before it landed (written to {})",
                        Lsn(slot.page),
                        Lsn(page),
                        Lsn(written)
                    );
                    // No zeroing here: the writer copies only bytes below its target and
                    // writes zeros after them.
                    slot.cipher = None;
                    slot.page = page;
                    slot.rem_len = rem_len.unwrap_or(0);
                    return Ok(slot);
                }
            }
            self.counters.here().buffer_full_waits.add(1);
            // Everything before `page` is reserved; the insertions that reserved it (earlier
            // in the log than this thread's) finish, then this thread writes it out. Its own
            // bytes before `page` are copied already.
            self.insertions.wait_finished(page, own);
            self.write_out(page)?;
        }
    }

    /// A position through which every record is in the buffer: the insert position, or the
    /// start of the lowest insertion still in progress. A record boundary.
    fn inserted_to(&self) -> u64 {
        // The insert position first: every reservation below it has published its start in
        // its lane before storing it (`insert`), so the lanes read next show it, or it is done.
        let end = self.insert_end.load(Ordering::SeqCst);
        end.min(self.insertions.lowest_in_progress())
    }

    /// Waits until the record holding `lsn` (or, with `lsn` the end of the log, every record
    /// reserved) is in the buffer, and returns a record boundary through which everything is:
    /// the target for a flush of `lsn`. Called with no lock of the log held: the insertions it
    /// waits for may need the write lock to make room.
    fn inserted_through(&self, lsn: u64) -> u64 {
        let end = self.insert_end.load(Ordering::SeqCst);
        let need = if lsn < end { lsn + 1 } else { end };
        let now = self.inserted_to();
        if now >= need {
            return now;
        }
        self.insertions.wait_finished(need, None);
        self.inserted_to()
    }

    /// What this `Wal` has done since it was opened. Reads atomic counters and takes no lock,
    /// so it never waits for a write or an fdatasync. The counters are read one by one while
    /// other threads work: each is exact, the set is not one instant's snapshot.
    pub fn stats(&self) -> WalStats {
        let c = &self.counters;
        WalStats {
            appends: c.sum(|s| &s.appends),
            payload_bytes: c.sum(|s| &s.payload_bytes),
            record_bytes: c.sum(|s| &s.record_bytes),
            insert_lock_ns: c.sum(|s| &s.insert_lock_ns),
            write_lock_acquisitions: c.sum(|s| &s.write_lock_acquisitions),
            write_lock_ns: c.sum(|s| &s.write_lock_ns),
            write_lock_encrypt_ns: c.sum(|s| &s.write_lock_encrypt_ns),
            fsync_ns: c.sum(|s| &s.fsync_ns),
            fsyncs: c.sum(|s| &s.fsyncs),
            pages_written: c.sum(|s| &s.pages_written),
            buffer_full_waits: c.sum(|s| &s.buffer_full_waits),
        }
    }

    /// What the open that made this `Wal` found: where the log ended, how much was replayed,
    /// and whether damage was cut away ([`crate::RecoveryMode::TruncateAtDamage`]).
    pub fn recovery_summary(&self) -> Option<&RecoverySummary> {
        self.recovery.get()
    }

    /// Records what recovery found and tells the listener.
    pub(crate) fn recovered(&self, summary: RecoverySummary) {
        if let Some(listener) = &self.listener {
            listener.on_recovery(&summary);
        }
        let _ = self.recovery.set(summary);
    }

    /// Rewrites the page holding the end of the log (same records, fresh header) and syncs it.
    /// After recovery cut the log inside its durable part, that page's header may still carry
    /// a durable hint beyond the new end, which a reader would take for damage after the end;
    /// the rewrite stamps the hint of the log as it now is.
    pub(crate) fn restamp_tail(&self) -> Result<()> {
        let end = self.insert_end.load(Ordering::Acquire);
        let page = self.geo.page_start(Lsn(end)).0;
        if end <= page + PAGE_HEADER_LEN as u64 {
            return Ok(());
        }
        let same = self.check_process()?;
        let mut w = self.write.lock();
        w.reserved_to = page;
        self.write_locked(&mut w, end, same)?;
        self.sync_locked(&mut w)
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
        let target = self.inserted_through(self.insert_end.load(Ordering::SeqCst));
        self.counters.here().write_lock_acquisitions.add(1);
        let (mut w, held_since) = flush::timed_lock(&self.write);
        let result = self.write_locked(&mut w, target, same).and_then(|()| {
            self.sync_locked(&mut w)?;
            // A switch or another sync under the lock before this one may have stored more.
            self.synced_to.fetch_max(target, Ordering::AcqRel);
            self.flushed_to.fetch_max(target, Ordering::AcqRel);
            self.refresh_hint(&mut w)?;
            self.debug_check_positions(&w);
            Ok(())
        });
        self.counters
            .here()
            .write_lock_ns
            .add(held_since.elapsed().as_nanos() as u64);
        result
    }

    /// One group-commit round led by this thread, reported to the listener. `round` (the
    /// group-commit round this thread leads, if any) ends before the listener is called, so a
    /// listener may `flush` again: it joins or leads a later round instead of waiting for the
    /// end of the one its own thread still leads.
    fn lead_round(&self, lsn: u64, round: Option<group::RoundEnd<'_>>) -> Result<()> {
        let Some(listener) = &self.listener else {
            return self.lead_flush(lsn);
        };
        let started = Instant::now();
        let result = self.lead_flush(lsn);
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
    fn flushed_through(&self, lsn: u64) -> bool {
        let flushed = self.flushed_to.load(Ordering::Acquire);
        flushed > lsn || (flushed == lsn && self.insert_end.load(Ordering::Acquire) == lsn)
    }

    /// Tells the listener of a segment switch or a poisoning it has not heard of yet. Called
    /// at the exits of the public operations, with no lock held; one branch without listener.
    fn deliver_events(&self) {
        let Some(listener) = &self.listener else {
            return;
        };
        let segment = self
            .geo
            .segment_start(Lsn(self.written_to.load(Ordering::Acquire)))
            .0;
        // A plain load first: the read-modify-write happens only at a switch, not per append.
        if segment > self.reported_segment.load(Ordering::Acquire) {
            let reported = self.reported_segment.fetch_max(segment, Ordering::AcqRel);
            if segment > reported {
                listener.on_segment_switch(&SegmentSwitch {
                    from: Lsn(reported),
                    to: Lsn(segment),
                });
            }
        }
        if self.poisoned.load(Ordering::Acquire)
            && !self.poison_reported.swap(true, Ordering::AcqRel)
        {
            let cause = self.poison_reason.lock().clone();
            if let Some(cause) = cause {
                listener.on_poisoned(&cause);
            }
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
        if self.poisoned.load(Ordering::Acquire) {
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed(self.dir.clone()));
            }
            // The cause is recorded before the flag is set, so it is always there.
            let cause = self.poison_reason.lock().clone();
            return Err(Error::Poisoned(cause.unwrap_or_else(|| PoisonCause {
                op: "write the log",
                path: self.dir.clone(),
                kind: std::io::ErrorKind::Other,
                message: "an earlier operation failed".into(),
            })));
        }
        Ok(())
    }

    fn poison(&self, op: &'static str, segment: u64, e: std::io::Error) -> Error {
        let path = self.dir.join(format::segment_file_name(Lsn(segment)));
        self.poison_error(Error::io(op, path, e))
    }

    /// An internal invariant that failed: reported as a poisoning cause naming the segment of
    /// `lsn`, never a panic.
    fn broken_invariant(&self, op: &'static str, lsn: u64, message: String) -> Error {
        let segment = self.geo.segment_start(Lsn(lsn)).0;
        Error::Poisoned(PoisonCause {
            op,
            path: self.dir.join(format::segment_file_name(Lsn(segment))),
            kind: std::io::ErrorKind::Other,
            message,
        })
    }

    fn poison_error(&self, error: Error) -> Error {
        self.poison_reason
            .lock()
            .get_or_insert_with(|| PoisonCause::of(&error));
        self.poisoned.store(true, Ordering::Release);
        error
    }
}

/// The end of a record of `len` bytes (at least one) starting at `lsn` (a position where
/// record bytes may go): one past its last byte, skipping the page and segment headers it runs
/// over. Arithmetic only, for the insert lock: `lsn` becomes an index into the log's record
/// bytes (headers left out), and the index of the record's last byte a position again, so a
/// record of any length costs the same. A record ending at a page's end ends at the next
/// page's start, before its header, as the copy leaves the insert position.
fn record_end(geo: &Geometry, lsn: u64, len: usize) -> u64 {
    let header = PAGE_HEADER_LEN as u64;
    let body = geo.page_size - header;
    let segment_bytes = (geo.segment_size / geo.page_size - 1) * body;
    let in_segment = lsn - geo.segment_start(Lsn(lsn)).0;
    let (page, in_page) = (in_segment / geo.page_size, in_segment % geo.page_size);
    let index = (lsn / geo.segment_size) * segment_bytes + (page - 1) * body + (in_page - header);
    let last = index + len as u64 - 1;
    let (segment, in_segment) = (last / segment_bytes, last % segment_bytes);
    let (page, in_page) = (in_segment / body + 1, in_segment % body);
    segment * geo.segment_size + page * geo.page_size + header + in_page + 1
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
        if self.poisoned.load(Ordering::Acquire) {
            return;
        }
        // A forked child dropping its copy writes nothing (`check_process`).
        let Ok(same) = self.check_process() else {
            return;
        };
        // No other reference is left, so no insertion is in progress; `inserted_to` is the end.
        let target = self.inserted_to();
        let mut w = self.write.lock();
        // Best effort: hand buffered records to the OS. Errors surface through `close`.
        if self.write_locked(&mut w, target, same).is_ok() && self.sync == SyncMode::Durable {
            let _ = self.sync_locked(&mut w);
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
                        record_end(&geo, lsn, len),
                        walked_end(&geo, lsn, len),
                        "page {page_size}, {pages} pages a segment, record of {len} at {lsn}"
                    );
                }
            }
        }
    }
}
