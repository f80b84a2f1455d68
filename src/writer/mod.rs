//! The writer: append and the WAL buffer (this file); opening a log and resuming it after
//! recovery (`open`); writing out, group commit and fdatasync (`flush`); segment handles,
//! switch and purge (`segments`); segment creation, also ahead of time (`prepare`); key
//! rotation (`rotate`). docs/DESIGN.md walks through the whole write path.
//!
//! Locks, always taken in this order, never the other way (a lock may be skipped, never
//! taken after one that comes later in the list):
//!
//! 0. the **group-commit lock** (`group`, with the condition variable `group_done`): whether
//!    a flush round is under way. Taken only with no other lock of the log held, and released
//!    before the round's leader takes the write lock: it orders flushers, never data.
//! 1. the **insert lock** (`insert`): reserves the LSN and copies already-sealed bytes into the
//!    WAL buffer. Nothing else happens inside it: sealing (encryption and CRC) is done before.
//! 2. the **write lock** (`write`): reserves the next range of the log for writing
//!    (`[reserved_to, target)`), copies its finished bytes out of the buffer into the
//!    reserving thread's own buffer, encrypts pages (pagelevel) and registers the range in
//!    flight; a Buffered flush (plaintext, perrecord) and an appender making room write the
//!    range after releasing it. Durable rounds, pagelevel flushes, `sync`, `close`, the
//!    segment switch and the open write (and wait for every range in flight to land), and
//!    fdatasync where they must, under it. Flushers take it without the
//!    insert lock; an appender takes it only when the buffer is full and it must make room,
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
//! Four positions (`AtomicU64` LSNs, beside `insert.pos`, the insert position, and
//! `WriteState::reserved_to`) say how far the log has come. Whenever neither the insert nor
//! the write lock is held, and the log is not poisoned, they satisfy
//!
//! ```text
//! synced_to <= flushed_to <= complete_to <= insert.pos
//!              flushed_to <= written_to  <= reserved_to <= insert.pos
//! ```
//!
//! - `complete_to`: end of the last record (or batch) copied in full; stored under the insert
//!   lock. A record boundary. `end_lsn` returns it.
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
//!   while it still holds the insert lock with a record (or batch) partly copied,
//!   `written_to` and `reserved_to` may run ahead of `complete_to` (and of `insert.pos`, which
//!   moves per record) into that unfinished record. On disk that is a torn record, which
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
//! moves `reserved_to`, `written_to` and `complete_to` past the rest of the tail page, with
//! nothing in flight.
//!
//! Group commit sits in front of the write lock: one flusher at a time leads a round (write
//! and fdatasync everything appended so far); the others wait for the round to end and then
//! either find their record durable or lead the next round for everyone still waiting.
//!
//! The buffer is a ring of page slots. A slot is reused only after the page it held has
//! landed completely (`written_to` past its end), so memory stays bounded and appenders wait
//! (by writing) when it is full.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::Lsn;
use crate::config::{Config, Mode, SyncMode};
use crate::crypto::{IV_LEN, IvSource, Keys};
use crate::error::{Error, PoisonCause, Result};
use crate::events::{EventListener, FlushRound, RecoverySummary, SegmentSwitch};
use crate::format::{self, Geometry, PAGE_HEADER_LEN};
use crate::seal::{LateBind, Seal, SealKey};
use crate::storage::{Storage, StorageFile};

mod checkpoint;
mod flush;
mod inflight;
mod open;
mod prepare;
mod recycle;
mod rotate;
mod segments;

use flush::GroupCommit;
use prepare::{Maker, Preparer};

const NO_PAGE: u64 = u64::MAX;

/// Proof that `Wal::check_process` passed on this call path: only it makes one, and
/// `write_locked` takes one, so no write-out can skip the fork check.
#[derive(Clone, Copy)]
struct SameProcess(());

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
    /// Total time the insert lock was held, in nanoseconds.
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

/// The counters behind [`Wal::stats`], one per field.
#[derive(Default)]
pub(super) struct Counters {
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
    /// A segment (created before the key was rotated) whose pages use this key, not the active
    /// one: its header lists only the keys of its time.
    segment_key: Option<(u64, u32)>,
    files: Vec<(u64, Arc<dyn StorageFile>)>,
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
    /// Bumped (inside the insert lock) when the active key changes: a record sealed under an
    /// older epoch is sealed again, so no record lands in a segment that does not list its key.
    key_epoch: AtomicU64,
    rotation: rotate::Rotation,
    /// The process that opened the log: another (a forked child) must not write with it,
    /// since it would repeat this process's IVs.
    opener: u32,
    ivs: IvSource,
    insert: Mutex<InsertState>,
    slots: Box<[Mutex<Slot>]>,
    /// End of the last record completely copied into the buffer (a record boundary).
    complete_to: AtomicU64,
    /// Everything before this position has been written to the files.
    written_to: AtomicU64,
    /// Record boundary through which `flush` guarantees hold (written for `Buffered`,
    /// fdatasync'ed for `Durable`).
    flushed_to: AtomicU64,
    /// Record boundary through which the log is fdatasync'ed. Stamped into page headers as the
    /// durable hint: in `Buffered` mode `flushed_to` runs ahead of it, and a hint claiming
    /// unsynced records durable would turn their loss in a machine crash into corruption.
    synced_to: AtomicU64,
    write: Mutex<WriteState>,
    /// Write-outs reserved under the write lock and written after it.
    inflight: inflight::InFlight,
    /// Group commit: whether a flush round is under way, and a count of finished rounds.
    group: Mutex<GroupCommit>,
    /// Signalled when a flush round ends.
    group_done: Condvar,
    poisoned: AtomicBool,
    /// Why the log was poisoned. Locked only to set or read the cause, never with another lock
    /// held after it.
    poison_reason: Mutex<Option<PoisonCause>>,
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
            .field("end", &Lsn(self.complete_to.load(Ordering::Relaxed)))
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
        let slots: Box<[Mutex<Slot>]> = (0..nslots)
            .map(|_| {
                Mutex::new(Slot {
                    page: NO_PAGE,
                    rem_len: 0,
                    cipher: None,
                    data: vec![0u8; geo.page_size as usize],
                })
            })
            .collect();
        let end = resume.end;
        if let Some((prefix, rem_len)) = resume.tail_page {
            let page = geo.page_start(end);
            let index = (page / geo.page_size) as usize % nslots;
            let mut slot = slots[index].lock();
            slot.page = page;
            slot.rem_len = rem_len;
            slot.data[..prefix.len()].copy_from_slice(&prefix);
        }
        let keys = Arc::new(arc_swap::ArcSwap::new(keys));
        let preparer = Arc::new(Preparer::default());
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
            key_epoch: AtomicU64::new(0),
            opener: std::process::id(),
            ivs: IvSource::new()?,
            insert: Mutex::new(InsertState { pos: end }),
            slots,
            complete_to: AtomicU64::new(end),
            written_to: AtomicU64::new(end),
            inflight: inflight::InFlight::new(end),
            flushed_to: AtomicU64::new(end),
            synced_to: AtomicU64::new(end),
            write: Mutex::new(WriteState {
                reserved_to: end,
                segment_key: None,
                files: Vec::new(),
                dirty: Vec::new(),
                imaged: (NO_PAGE, 0),
                hint_unsynced: None,
            }),
            group: Mutex::new(GroupCommit::default()),
            group_done: Condvar::new(),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(None),
            counters: Counters::default(),
            listener: config.listener.clone(),
            reported_segment: AtomicU64::new(geo.segment_start(end)),
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
    /// just before it, if page headers come first).
    pub fn end_lsn(&self) -> Lsn {
        Lsn(self.complete_to.load(Ordering::Acquire))
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
    /// The record is sealed (encrypted in perrecord mode, checksummed in every mode) before the
    /// insert lock is taken; inside it the LSN is reserved and the sealed bytes are copied into
    /// the WAL buffer. The record is durable once [`Wal::flush`] with this LSN returns Ok.
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<Lsn> {
        self.check_poison()?;
        check_len(payload)?;
        let result = SEAL_BUFFER.with(|buffer| {
            let mut sealed = buffer.take();
            let result = loop {
                // A rotation between sealing and inserting makes the record seal again.
                let inserted =
                    self.seal(kind, 0, payload, &mut sealed)
                        .and_then(|(late, epoch)| {
                            let ends = [sealed.len()];
                            let lates = std::iter::once(late);
                            self.insert_sealed(&mut sealed, &ends, lates, epoch, payload.len())
                        });
                match inserted {
                    Ok(None) => continue,
                    Ok(Some(lsns)) => break Ok(lsns),
                    Err(e) => break Err(e),
                }
            };
            if sealed.capacity() <= SEAL_BUFFER_KEEP {
                buffer.set(sealed);
            }
            result
        });
        self.deliver_events();
        self.rotate_if_due(result.is_ok());
        result.map(|(first, _)| first)
    }

    /// Appends several records as one unit of work and returns their LSNs, in order. Safe to
    /// call from many threads at once.
    ///
    /// Every record is sealed before the insert lock is taken; the lock is then taken once and
    /// the records get consecutive places in the log, with no other thread's record between
    /// them. Make them durable with [`Wal::flush`] of the last LSN. An empty batch returns an
    /// empty list and appends nothing.
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
        let mut sealed = Vec::new();
        let mut ends = Vec::with_capacity(records.len());
        let mut lates = Vec::with_capacity(records.len());
        let mut record = Vec::new();
        let result = loop {
            sealed.clear();
            ends.clear();
            lates.clear();
            // Every record of the batch is sealed in one key epoch, or all are sealed again.
            let mut epoch = None;
            let mut same_epoch = true;
            for (kind, payload) in &records {
                let (late, sealed_in) = self.seal(*kind, 0, payload, &mut record)?;
                same_epoch &= *epoch.get_or_insert(sealed_in) == sealed_in;
                lates.push(late);
                sealed.extend_from_slice(&record);
                ends.push(sealed.len());
            }
            let Some(epoch) = epoch.filter(|_| same_epoch) else {
                continue;
            };
            let lates = std::mem::take(&mut lates);
            match self.insert_sealed(&mut sealed, &ends, lates, epoch, payload_bytes) {
                Ok(None) => continue,
                // `insert_sealed` lists every LSN only for two records or more.
                Ok(Some((first, lsns))) if lsns.is_empty() => break Ok(vec![first]),
                Ok(Some((_, lsns))) => break Ok(lsns),
                Err(e) => break Err(e),
            }
        };
        self.deliver_events();
        self.rotate_if_due(result.is_ok());
        result
    }

    /// Rotates the data key when the rotation policy says it is due (after an append).
    fn rotate_if_due(&self, appended: bool) {
        if appended && self.rotation.due(self.complete_to.load(Ordering::Relaxed)) {
            self.rotate_by_policy();
        }
    }

    /// Compresses (when configured and worth it), encrypts (perrecord modes) and checksums a
    /// record into its stored form in `sealed`.
    ///
    /// The checksum (and, for an authenticated record, the tag) is left one step short: the
    /// returned [`LateBind`] finishes it inside the insert lock, once the LSN is known. Also
    /// returns the key epoch the record was sealed in.
    fn seal(
        &self,
        kind: u8,
        flags: u8,
        payload: &[u8],
        sealed: &mut Vec<u8>,
    ) -> Result<(LateBind, u64)> {
        // The epoch is read before the keys: a rotation stores the keys first, so a record
        // whose epoch is current was sealed under the current active key.
        let epoch = self.key_epoch.load(Ordering::Acquire);
        let keys = self.keys.load();
        let key = SealKey {
            keys: &keys,
            key_id: keys.active().unwrap_or(0),
            ivs: &self.ivs,
        };
        self.seal
            .seal_record(&key, kind, flags, payload, sealed)
            .map(|late| (late, epoch))
    }

    /// Places sealed records (the one or more records of `sealed`, record `i` ending at
    /// `ends[i]`) at the insert position, under one hold of the insert lock. Returns the first
    /// LSN and, for a batch of more than one record, every LSN; `None` (nothing placed) when
    /// the active key changed since they were sealed in `epoch`: the caller seals them again.
    ///
    /// A failure once copying has begun (a write-out to make room failed) poisons the log: the
    /// buffer may hold part of the records, and the log must not resume from that.
    ///
    /// `lates` finishes each record's checksum (and an authenticated record's tag) once its
    /// LSN is known.
    fn insert_sealed(
        &self,
        sealed: &mut [u8],
        ends: &[usize],
        lates: impl IntoIterator<Item = LateBind>,
        epoch: u64,
        payload_bytes: usize,
    ) -> Result<Option<(Lsn, Vec<Lsn>)>> {
        // Allocated before the lock: the lock only ever copies.
        let mut lsns = Vec::with_capacity(if ends.len() > 1 { ends.len() } else { 0 });
        let mut first = 0;
        let (mut ins, held_since) = flush::timed_lock(&self.insert);
        if epoch != self.key_epoch.load(Ordering::Acquire) {
            return Ok(None);
        }
        let mut result = Ok(());
        let mut begin = 0;
        for ((i, &end), late) in ends.iter().enumerate().zip(lates) {
            let lsn = self.geo.skip_headers(ins.pos);
            late.finish(lsn, self.version_at(lsn), &mut sealed[begin..end]);
            match self.copy_in(&mut ins, &sealed[begin..end]) {
                Ok((start, record_end)) => {
                    ins.pos = record_end;
                    if i == 0 {
                        first = start;
                    }
                    if ends.len() > 1 {
                        lsns.push(Lsn(start));
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            begin = end;
        }
        if result.is_ok() {
            self.complete_to.store(ins.pos, Ordering::Release);
        }
        let held = held_since.elapsed().as_nanos() as u64;
        drop(ins);
        self.counters.insert_lock_ns.add(held);
        match result {
            Ok(()) => {
                self.counters.appends.add(ends.len() as u64);
                self.counters.payload_bytes.add(payload_bytes as u64);
                self.counters.record_bytes.add(sealed.len() as u64);
                Ok(Some((Lsn(first), lsns)))
            }
            Err(e) if self.poisoned.load(Ordering::Acquire) => Err(e),
            Err(e) => Err(self.poison_error(e)),
        }
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

    /// Copies a sealed record into the buffer at the insert position; returns (start, end).
    /// Called with the insert lock held (proved by `ins`).
    fn copy_in(&self, ins: &mut InsertState, sealed: &[u8]) -> Result<(u64, u64)> {
        let start = self.geo.skip_headers(ins.pos);
        let mut pos = ins.pos;
        let mut done = 0;
        while done < sealed.len() {
            pos = self.geo.skip_headers(pos);
            let page = self.geo.page_start(pos);
            if pos == page + PAGE_HEADER_LEN as u64 {
                let rem_len = (sealed.len() - done) as u32;
                let rem_len = if done == 0 { 0 } else { rem_len };
                self.enter_page(ins, page, rem_len)?;
            }
            let in_page = (pos - page) as usize;
            let n = (sealed.len() - done).min(self.geo.page_size as usize - in_page);
            let mut slot = self.slots[self.slot_index(page)].lock();
            slot.data[in_page..in_page + n].copy_from_slice(&sealed[done..done + n]);
            drop(slot);
            done += n;
            pos += n as u64;
        }
        Ok((start, pos))
    }

    fn slot_index(&self, page: u64) -> usize {
        (page / self.geo.page_size) as usize % self.slots.len()
    }

    /// Claims the slot for a page the insert position just reached. When the slot still holds
    /// an older page that is not fully written, writes out everything before `page` first
    /// (all of it is copied: the insert lock is held).
    fn enter_page(&self, _ins: &mut InsertState, page: u64, rem_len: u32) -> Result<()> {
        let index = self.slot_index(page);
        loop {
            {
                let mut slot = self.slots[index].lock();
                // The slot may already hold this page if an earlier append failed after
                // claiming it; claiming it again is safe, since nothing below the insert
                // position was copied there.
                let free = slot.page == NO_PAGE
                    || slot.page == page
                    || self.written_to.load(Ordering::Acquire) >= slot.page + self.geo.page_size;
                if free {
                    // No zeroing here: the writer copies only bytes below its target and
                    // writes zeros after them.
                    if slot.page != page {
                        slot.cipher = None;
                    }
                    slot.page = page;
                    slot.rem_len = rem_len;
                    return Ok(());
                }
            }
            self.counters.buffer_full_waits.add(1);
            self.write_out(page)?;
        }
    }

    /// What this `Wal` has done since it was opened. Reads atomic counters and takes no lock,
    /// so it never waits for a write or an fdatasync. The counters are read one by one while
    /// other threads work: each is exact, the set is not one instant's snapshot.
    pub fn stats(&self) -> WalStats {
        let c = &self.counters;
        WalStats {
            appends: c.appends.get(),
            payload_bytes: c.payload_bytes.get(),
            record_bytes: c.record_bytes.get(),
            insert_lock_ns: c.insert_lock_ns.get(),
            write_lock_acquisitions: c.write_lock_acquisitions.get(),
            write_lock_ns: c.write_lock_ns.get(),
            write_lock_encrypt_ns: c.write_lock_encrypt_ns.get(),
            fsync_ns: c.fsync_ns.get(),
            fsyncs: c.fsyncs.get(),
            pages_written: c.pages_written.get(),
            buffer_full_waits: c.buffer_full_waits.get(),
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
        let end = self.complete_to.load(Ordering::Acquire);
        let page = self.geo.page_start(end);
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
        self.counters.write_lock_acquisitions.add(1);
        let (mut w, held_since) = flush::timed_lock(&self.write);
        let target = self.complete_to.load(Ordering::Acquire);
        let result = self.write_locked(&mut w, target, same).and_then(|()| {
            self.sync_locked(&mut w)?;
            self.synced_to.store(target, Ordering::Release);
            self.flushed_to.fetch_max(target, Ordering::AcqRel);
            self.refresh_hint(&mut w)?;
            self.debug_check_positions(&w);
            Ok(())
        });
        self.counters
            .write_lock_ns
            .add(held_since.elapsed().as_nanos() as u64);
        result
    }

    /// One group-commit round led by this thread, reported to the listener. `round` (the
    /// group-commit round this thread leads, if any) ends before the listener is called, so a
    /// listener may `flush` again: it joins or leads a later round instead of waiting for the
    /// end of the one its own thread still leads.
    fn lead_round(&self, lsn: u64, round: Option<flush::RoundEnd<'_>>) -> Result<()> {
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
        flushed > lsn || (flushed == lsn && self.complete_to.load(Ordering::Acquire) == lsn)
    }

    /// Tells the listener of a segment switch or a poisoning it has not heard of yet. Called
    /// at the exits of the public operations, with no lock held; one branch without listener.
    fn deliver_events(&self) {
        let Some(listener) = &self.listener else {
            return;
        };
        let segment = self
            .geo
            .segment_start(self.written_to.load(Ordering::Acquire));
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
        let segment = self.geo.segment_start(lsn);
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
        let mut w = self.write.lock();
        let target = self.complete_to.load(Ordering::Acquire);
        // Best effort: hand buffered records to the OS. Errors surface through `close`.
        if self.write_locked(&mut w, target, same).is_ok() && self.sync == SyncMode::Durable {
            let _ = self.sync_locked(&mut w);
        }
    }
}
