//! The writer: append, group-commit flush, segment creation and purge.
//!
//! Three locks, always taken in this order, never the other way:
//!
//! 1. the **insert lock** (`insert`): reserves the LSN and copies already-sealed bytes into the
//!    WAL buffer. Nothing else happens inside it: sealing (encryption and CRC) is done before.
//! 2. the **write lock** (`write`): copies finished bytes out of the buffer, encrypts pages
//!    (pagelevel), writes them and calls fdatasync. Flushers take it without the insert lock; an
//!    appender takes it only when the buffer is full and it must make room.
//! 3. a **slot lock** per buffer page, held only for a memcpy.
//!
//! Group commit sits in front of the write lock: one flusher at a time leads a round (write
//! and fdatasync everything appended so far); the others wait for the round to end and then
//! either find their record durable or lead the next round for everyone still waiting.
//!
//! The buffer is a ring of page slots. A slot is reused only after the page it held was written
//! out completely, so memory stays bounded and appenders wait (by writing) when it is full.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::Lsn;
use crate::config::{Config, Mode, SyncMode};
use crate::crypto::{IvSource, Keys};
use crate::error::{Error, Result};
use crate::format::{
    self, Geometry, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, PageHeader, RECORD_FLAG_ENCRYPTED,
    RECORD_FLAG_SWITCH, RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN, RecordHeader, SegmentHeader,
};
use crate::storage::{Storage, StorageFile};

const NO_PAGE: u64 = u64::MAX;

/// Sealed records of up to this size reuse a per-thread buffer instead of a fresh allocation.
const SEAL_BUFFER_KEEP: usize = 256 << 10;

thread_local! {
    static SEAL_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Counters a `Wal` keeps about its own work; see [`Wal::stats`].
///
/// Lock hold times are measured with a monotonic clock from the moment the lock is acquired
/// to the moment it is released.
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

#[derive(Default)]
struct GroupCommit {
    leading: bool,
    generation: u64,
}

/// Ends a group-commit round when dropped: wakes every waiter to check its record.
struct RoundEnd<'a>(&'a Wal);

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        let mut round = self.0.group.lock();
        round.leading = false;
        round.generation += 1;
        drop(round);
        self.0.group_done.notify_all();
    }
}

struct InsertState {
    /// End of the last record placed in the buffer (the next record starts at or after it).
    pos: u64,
    appends: u64,
    payload_bytes: u64,
    record_bytes: u64,
    hold_ns: u64,
    full_waits: u64,
}

struct Slot {
    page: u64,
    rem_len: u32,
    data: Vec<u8>,
}

struct WriteState {
    written_to: u64,
    /// A segment (created before the key was rotated) whose pages use this key, not the active
    /// one: its header lists only the keys of its time.
    segment_key: Option<(u64, u32)>,
    files: Vec<(u64, Box<dyn StorageFile>)>,
    dirty: Vec<u64>,
    scratch: Vec<u8>,
    acquisitions: u64,
    hold_ns: u64,
    encrypt_ns: u64,
    fsync_ns: u64,
    fsyncs: u64,
    pages_written: u64,
}

/// Where recovery left the log, handed to the writer.
pub(crate) struct Resume {
    pub(crate) log_id: u64,
    pub(crate) geo: Geometry,
    /// End of the valid log: the next record goes here.
    pub(crate) end: u64,
    /// The valid prefix of the page holding `end`, decrypted, and that page's continuation length.
    pub(crate) tail_page: Option<(Vec<u8>, u32)>,
}

/// An open write-ahead log. `Send + Sync`: share it between threads (by reference or `Arc`).
///
/// Open with [`Wal::open`] (or [`Wal::open_and_replay`] after a crash), [`Wal::append`] from
/// any number of threads, [`Wal::flush`] to make records durable, and [`Wal::close`] for a
/// clean shutdown. Dropping a `Wal` hands buffered records to the operating system but reports
/// no errors; call `close` to learn of them.
pub struct Wal {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    mode: Mode,
    geo: Geometry,
    log_id: u64,
    sync: SyncMode,
    keys: Arc<Keys>,
    active_key: u32,
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
    /// Group commit: whether a flush round is under way, and a count of finished rounds.
    group: Mutex<GroupCommit>,
    /// Signalled when a flush round ends.
    group_done: Condvar,
    poisoned: AtomicBool,
    poison_reason: Mutex<Option<String>>,
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
        let active_key = if config.mode.is_encrypted() {
            keys.active().unwrap_or(0)
        } else {
            0
        };
        Ok(Wal {
            dir: dir.to_path_buf(),
            storage: config.storage.clone(),
            mode: config.mode,
            geo,
            log_id: resume.log_id,
            sync: config.sync,
            keys,
            active_key,
            ivs: IvSource::new()?,
            insert: Mutex::new(InsertState {
                pos: end,
                appends: 0,
                payload_bytes: 0,
                record_bytes: 0,
                hold_ns: 0,
                full_waits: 0,
            }),
            slots,
            complete_to: AtomicU64::new(end),
            written_to: AtomicU64::new(end),
            flushed_to: AtomicU64::new(end),
            synced_to: AtomicU64::new(end),
            write: Mutex::new(WriteState {
                written_to: end,
                segment_key: None,
                files: Vec::new(),
                dirty: Vec::new(),
                scratch: Vec::new(),
                acquisitions: 0,
                hold_ns: 0,
                encrypt_ns: 0,
                fsync_ns: 0,
                fsyncs: 0,
                pages_written: 0,
            }),
            group: Mutex::new(GroupCommit::default()),
            group_done: Condvar::new(),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(None),
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

    /// Appends one record and returns its LSN. Safe to call from many threads at once.
    ///
    /// The record is sealed (encrypted in perrecord mode, checksummed in every mode) before the
    /// insert lock is taken; inside it the LSN is reserved and the sealed bytes are copied into
    /// the WAL buffer. The record is durable once [`Wal::flush`] with this LSN returns Ok.
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<Lsn> {
        self.check_poison()?;
        if payload.len() > format::MAX_PAYLOAD {
            return Err(Error::RecordTooLarge {
                len: payload.len(),
                max: format::MAX_PAYLOAD,
            });
        }
        SEAL_BUFFER.with(|buffer| {
            let mut sealed = buffer.take();
            let result = self
                .seal(kind, 0, payload, &mut sealed)
                .and_then(|()| self.insert_sealed(&sealed, payload.len()));
            if sealed.capacity() <= SEAL_BUFFER_KEEP {
                buffer.set(sealed);
            }
            result
        })
    }

    /// Encrypts (perrecord) and checksums a record into its stored form in `sealed`.
    fn seal(&self, kind: u8, flags: u8, payload: &[u8], sealed: &mut Vec<u8>) -> Result<()> {
        let encrypt = self.mode == Mode::PerRecord && flags & RECORD_FLAG_SWITCH == 0;
        let hlen = if encrypt {
            RECORD_HEADER_ENCRYPTED
        } else {
            RECORD_HEADER_PLAIN
        };
        sealed.clear();
        sealed.resize(hlen, 0);
        sealed.extend_from_slice(payload);
        let mut header = RecordHeader {
            crc: 0,
            len: payload.len() as u32,
            kind,
            flags,
            encryption: None,
        };
        if encrypt {
            let iv = self.ivs.next_iv()?;
            self.keys
                .apply_keystream(self.active_key, &iv, &mut sealed[hlen..])?;
            header.flags |= RECORD_FLAG_ENCRYPTED;
            header.encryption = Some((self.active_key, iv));
        }
        header.encode(&mut sealed[..hlen]);
        header.crc = format::record_crc(&sealed[..hlen], &sealed[hlen..]);
        header.encode(&mut sealed[..hlen]);
        Ok(())
    }

    fn insert_sealed(&self, sealed: &[u8], payload_len: usize) -> Result<Lsn> {
        let mut ins = self.insert.lock();
        let held_since = Instant::now();
        let result = self.copy_in(&mut ins, sealed);
        if let Ok((_, end)) = &result {
            ins.pos = *end;
            ins.appends += 1;
            ins.payload_bytes += payload_len as u64;
            ins.record_bytes += sealed.len() as u64;
            self.complete_to.store(*end, Ordering::Release);
        }
        ins.hold_ns += held_since.elapsed().as_nanos() as u64;
        drop(ins);
        let (start, _) = result?;
        Ok(Lsn(start))
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
    fn enter_page(&self, ins: &mut InsertState, page: u64, rem_len: u32) -> Result<()> {
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
                    slot.page = page;
                    slot.rem_len = rem_len;
                    return Ok(());
                }
            }
            ins.full_waits += 1;
            self.write_out(page)?;
        }
    }

    /// Takes the write lock and writes everything before `target`.
    fn write_out(&self, target: u64) -> Result<()> {
        let mut w = self.write.lock();
        let held_since = Instant::now();
        w.acquisitions += 1;
        let result = self.write_locked(&mut w, target);
        w.hold_ns += held_since.elapsed().as_nanos() as u64;
        result
    }

    /// Writes the buffer's pages from the last written position up to `target` (which must be
    /// copied already). Partly filled pages are written whole and rewritten later.
    fn write_locked(&self, w: &mut WriteState, target: u64) -> Result<()> {
        self.check_poison()?;
        if target <= w.written_to {
            return Ok(());
        }
        let ps = self.geo.page_size;
        let hint = self.synced_to.load(Ordering::Acquire);
        let mut page = self.geo.page_start(w.written_to);
        while page < target {
            if self.geo.is_header_page(page) {
                page += ps;
                continue;
            }
            let segment = self.geo.segment_start(page);
            let run_start = page;
            let mut scratch = std::mem::take(&mut w.scratch);
            scratch.clear();
            while page < target && self.geo.segment_start(page) == segment {
                let at = scratch.len();
                scratch.resize(at + ps as usize, 0);
                let valid = (target.min(page + ps) - page).max(PAGE_HEADER_LEN as u64);
                self.page_image(w, page, valid as usize, hint, &mut scratch[at..])?;
                page += ps;
            }
            let written = self.file_for(w, segment).and_then(|file| {
                file.write_all_at(&scratch, run_start - segment)
                    .map_err(|e| self.poison("write segment", segment, e))
            });
            w.pages_written += scratch.len() as u64 / ps;
            w.scratch = scratch;
            written?;
            if !w.dirty.contains(&segment) {
                w.dirty.push(segment);
            }
        }
        w.written_to = target;
        self.written_to.store(target, Ordering::Release);
        Ok(())
    }

    /// Builds the on-disk image of `page` into `out`: header, the first `valid` bytes of the
    /// page from the buffer and zeros after them, and (pagelevel) the body encrypted under a
    /// fresh IV.
    fn page_image(
        &self,
        w: &mut WriteState,
        page: u64,
        valid: usize,
        hint: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let rem_len = {
            let slot = self.slots[self.slot_index(page)].lock();
            debug_assert_eq!(slot.page, page, "writing a page that is not in the buffer");
            out[PAGE_HEADER_LEN..valid].copy_from_slice(&slot.data[PAGE_HEADER_LEN..valid]);
            slot.rem_len
        };
        out[valid..].fill(0);
        let mut header = PageHeader {
            flags: 0,
            key_id: 0,
            page_lsn: Lsn(page),
            rem_len,
            durable_hint: Lsn(hint),
            iv: [0; 16],
        };
        if self.mode == Mode::PageLevel {
            let started = Instant::now();
            let key_id = match w.segment_key {
                Some((segment, key_id)) if segment == self.geo.segment_start(page) => key_id,
                _ => self.active_key,
            };
            let iv = self.ivs.next_iv()?;
            self.keys
                .apply_keystream(key_id, &iv, &mut out[PAGE_HEADER_LEN..])?;
            w.encrypt_ns += started.elapsed().as_nanos() as u64;
            header.flags = PAGE_FLAG_ENCRYPTED;
            header.key_id = key_id;
            header.iv = iv;
        }
        header.encode(self.log_id, &mut out[..PAGE_HEADER_LEN]);
        Ok(())
    }

    /// The open file of the segment starting at `segment`, creating the segment if needed.
    fn file_for<'w>(&self, w: &'w mut WriteState, segment: u64) -> Result<&'w dyn StorageFile> {
        if let Some(i) = w.files.iter().position(|(s, _)| *s == segment) {
            return Ok(w.files[i].1.as_ref());
        }
        let path = self.dir.join(format::segment_file_name(Lsn(segment)));
        let file = match self.storage.open(&path, true) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_segment(
                self.storage.as_ref(),
                &self.dir,
                &self.segment_header(segment),
            )
            .map_err(|e| self.poison_error(e))?,
            Err(e) => return Err(self.poison("open segment", segment, e)),
        };
        // Keep the handles of segments still being written or awaiting fdatasync.
        let dirty = w.dirty.clone();
        w.files.retain(|(s, _)| dirty.contains(s));
        w.files.push((segment, file));
        Ok(w.files
            .last()
            .map(|(_, f)| f.as_ref())
            .expect("pushed just above"))
    }

    fn segment_header(&self, start: u64) -> SegmentHeader {
        SegmentHeader {
            mode: self.mode,
            geometry: self.geo,
            log_id: self.log_id,
            start: Lsn(start),
            key_checks: if self.mode.is_encrypted() {
                self.keys.check_values()
            } else {
                Vec::new()
            },
        }
    }

    /// fdatasyncs every segment written since the last sync.
    fn sync_locked(&self, w: &mut WriteState) -> Result<()> {
        let dirty = std::mem::take(&mut w.dirty);
        for segment in &dirty {
            let Some((_, file)) = w.files.iter().find(|(s, _)| s == segment) else {
                continue;
            };
            let started = Instant::now();
            let synced = file.sync_data();
            w.fsync_ns += started.elapsed().as_nanos() as u64;
            w.fsyncs += 1;
            synced.map_err(|e| self.poison("fdatasync segment", *segment, e))?;
        }
        Ok(())
    }

    /// Makes every record up to and including the one at `lsn` durable, as the configured
    /// [`SyncMode`] defines it.
    ///
    /// Group commit (`SyncMode::Durable`): one caller at a time is the leader; it writes and
    /// fdatasyncs everything appended so far. The others do not queue for the write lock behind it (a leader that
    /// returns and commits again would win that race on a busy machine); they wait for the
    /// leader to finish, return at once if it covered their record, and otherwise one of them
    /// leads the next round for all the rest.
    pub fn flush(&self, lsn: Lsn) -> Result<()> {
        let lsn = u64::from(lsn);
        loop {
            self.check_poison()?;
            if self.flushed_to.load(Ordering::Acquire) > lsn {
                return Ok(());
            }
            if self.complete_to.load(Ordering::Acquire) <= lsn {
                return Err(Error::LsnNotAvailable(Lsn(lsn)));
            }
            if self.sync == SyncMode::Buffered {
                // Without fdatasync a flush is a short write; queueing on the write lock is
                // cheaper than rounds (measured: rounds cost 15-30% of oltp throughput at 2-8
                // threads with sync none on the 2-core development machine).
                return self.lead_flush(lsn);
            }
            let mut round = self.group.lock();
            if round.leading {
                let current = round.generation;
                while round.generation == current {
                    self.group_done.wait(&mut round);
                }
                continue;
            }
            round.leading = true;
            drop(round);
            // Ends the round even if the flush unwinds, so waiters never wait forever.
            let _round = RoundEnd(self);
            return self.lead_flush(lsn);
        }
    }

    /// One group-commit round: takes the write lock and flushes everything appended so far.
    fn lead_flush(&self, lsn: u64) -> Result<()> {
        let mut w = self.write.lock();
        let held_since = Instant::now();
        w.acquisitions += 1;
        let result = self.flush_locked(&mut w, lsn);
        w.hold_ns += held_since.elapsed().as_nanos() as u64;
        result
    }

    fn flush_locked(&self, w: &mut WriteState, lsn: u64) -> Result<()> {
        if self.flushed_to.load(Ordering::Acquire) > lsn {
            return Ok(());
        }
        let target = self.complete_to.load(Ordering::Acquire);
        self.write_locked(w, target)?;
        if self.sync == SyncMode::Durable {
            self.sync_locked(w)?;
            self.synced_to.store(target, Ordering::Release);
        }
        self.flushed_to.store(target, Ordering::Release);
        Ok(())
    }

    /// Flushes every appended record and fdatasyncs (in every sync mode), then closes the log.
    pub fn close(self) -> Result<()> {
        self.check_poison()?;
        let mut w = self.write.lock();
        let target = self.complete_to.load(Ordering::Acquire);
        self.write_locked(&mut w, target)?;
        self.sync_locked(&mut w)?;
        self.synced_to.store(target, Ordering::Release);
        self.flushed_to.store(target, Ordering::Release);
        Ok(())
    }

    /// Removes whole segment files that lie entirely before `lsn` and before the flushed end,
    /// oldest first. Call it after the engine's checkpoint no longer needs them. The segment
    /// the log ends in is always kept. Returns how many files were removed.
    pub fn purge_before(&self, lsn: Lsn) -> Result<usize> {
        self.check_poison()?;
        let limit = u64::from(lsn).min(self.flushed_to.load(Ordering::Acquire));
        let mut w = self.write.lock();
        let starts = crate::reader::list_segments(self.storage.as_ref(), &self.dir)?;
        let mut removed = 0;
        for start in starts {
            let start = u64::from(start);
            if start + self.geo.segment_size >= limit {
                break;
            }
            let path = self.dir.join(format::segment_file_name(Lsn(start)));
            self.storage
                .remove(&path)
                .map_err(|e| Error::io("remove segment", &path, e))?;
            w.files.retain(|(s, _)| *s != start);
            w.dirty.retain(|s| *s != start);
            removed += 1;
        }
        if removed > 0 {
            self.storage
                .sync_dir(&self.dir)
                .map_err(|e| Error::io("sync directory", &self.dir, e))?;
        }
        Ok(removed)
    }

    /// Writes a segment-switch record: the rest of the current segment stays unused and the
    /// next record starts in a new segment, whose header lists the current keys.
    pub(crate) fn switch_segment(&self) -> Result<()> {
        let mut sealed = Vec::new();
        self.seal(0, RECORD_FLAG_SWITCH, &[], &mut sealed)?;
        let mut ins = self.insert.lock();
        let (_, end) = self.copy_in(&mut ins, &sealed)?;
        let segment = self.geo.segment_start(end - 1);
        let next = segment + self.geo.segment_size;
        ins.pos = next;
        self.complete_to.store(next, Ordering::Release);
        drop(ins);
        // The switch must be durable before anything lands in the next segment.
        let mut w = self.write.lock();
        if self.mode == Mode::PageLevel {
            // The pages rewritten here belong to a segment whose header does not list the
            // active key: encrypt them under a key it does list.
            w.segment_key = Some((segment, self.listed_key(segment)?));
        }
        self.write_locked(&mut w, end)?;
        self.sync_locked(&mut w)?;
        w.written_to = next;
        self.written_to.store(next, Ordering::Release);
        self.synced_to.store(next, Ordering::Release);
        self.flushed_to.store(next, Ordering::Release);
        Ok(())
    }

    /// The newest key of the ring that the header of the segment at `segment` lists.
    fn listed_key(&self, segment: u64) -> Result<u32> {
        let path = self.dir.join(format::segment_file_name(Lsn(segment)));
        let header =
            crate::reader::read_segment_header(self.storage.as_ref(), &path, Lsn(segment))?;
        header
            .key_checks
            .iter()
            .rev()
            .find(|(id, kcv)| self.keys.check_value(*id) == Some(*kcv))
            .map(|(id, _)| *id)
            .ok_or_else(|| {
                Error::MissingKey(header.key_checks.first().map(|(id, _)| *id).unwrap_or(0))
            })
    }

    /// What this `Wal` has done since it was opened.
    pub fn stats(&self) -> WalStats {
        let (appends, payload_bytes, record_bytes, insert_lock_ns, buffer_full_waits) = {
            let ins = self.insert.lock();
            (
                ins.appends,
                ins.payload_bytes,
                ins.record_bytes,
                ins.hold_ns,
                ins.full_waits,
            )
        };
        let w = self.write.lock();
        WalStats {
            appends,
            payload_bytes,
            record_bytes,
            insert_lock_ns,
            write_lock_acquisitions: w.acquisitions,
            write_lock_ns: w.hold_ns,
            write_lock_encrypt_ns: w.encrypt_ns,
            fsync_ns: w.fsync_ns,
            fsyncs: w.fsyncs,
            pages_written: w.pages_written,
            buffer_full_waits,
        }
    }

    fn check_poison(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            let reason = self.poison_reason.lock().clone().unwrap_or_default();
            return Err(Error::Poisoned(reason));
        }
        Ok(())
    }

    fn poison(&self, op: &'static str, segment: u64, e: std::io::Error) -> Error {
        let path = self.dir.join(format::segment_file_name(Lsn(segment)));
        self.poison_error(Error::io(op, path, e))
    }

    fn poison_error(&self, error: Error) -> Error {
        *self.poison_reason.lock() = Some(error.to_string());
        self.poisoned.store(true, Ordering::Release);
        error
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if self.poisoned.load(Ordering::Acquire) {
            return;
        }
        let mut w = self.write.lock();
        let target = self.complete_to.load(Ordering::Acquire);
        // Best effort: hand buffered records to the OS. Errors surface through `close`.
        if self.write_locked(&mut w, target).is_ok() && self.sync == SyncMode::Durable {
            let _ = self.sync_locked(&mut w);
        }
    }
}

/// Creates a segment file: header page written and fdatasync'ed under a temporary name, the
/// file extended to its full size (zeros), then renamed into place and the directory synced,
/// so a crash never leaves a half-made segment under a segment name.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    header: &SegmentHeader,
) -> Result<Box<dyn StorageFile>> {
    let name = format::segment_file_name(header.start);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let mut page = vec![0u8; header.geometry.page_size as usize];
    header.encode(&mut page);
    let made = (|| -> std::io::Result<Box<dyn StorageFile>> {
        let file = storage.create_new(&tmp)?;
        file.write_all_at(&page, 0)?;
        file.set_len(header.geometry.segment_size)?;
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

/// Suffix of a segment file still being created.
pub(crate) const TMP_SUFFIX: &str = ".tmp";
