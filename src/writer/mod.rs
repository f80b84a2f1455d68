//! The writer: append and the WAL buffer (this file); writing out, group commit, fdatasync,
//! segment creation and purge (`flush`).
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
    self, Geometry, PAGE_HEADER_LEN, RECORD_FLAG_ENCRYPTED, RECORD_FLAG_SWITCH,
    RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN, RecordHeader,
};
use crate::storage::{Storage, StorageFile};

mod flush;
mod rotate;

use flush::GroupCommit;
pub(crate) use flush::{TMP_SUFFIX, create_segment};

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
    /// The working keys; replaced whole (never edited) when a data key is rotated or retired.
    keys: arc_swap::ArcSwap<Keys>,
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
        Ok(Wal {
            dir: dir.to_path_buf(),
            storage: config.storage.clone(),
            mode: config.mode,
            geo,
            log_id: resume.log_id,
            sync: config.sync,
            rotation: rotate::Rotation::new(config, end)?,
            keys: arc_swap::ArcSwap::new(keys),
            key_epoch: AtomicU64::new(0),
            opener: std::process::id(),
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
        let result = SEAL_BUFFER.with(|buffer| {
            let mut sealed = buffer.take();
            let result = loop {
                // A rotation between sealing and inserting makes the record seal again.
                match self
                    .seal(kind, 0, payload, &mut sealed)
                    .and_then(|epoch| self.insert_sealed(&sealed, payload.len(), epoch))
                {
                    Ok(None) => continue,
                    Ok(Some(lsn)) => break Ok(lsn),
                    Err(e) => break Err(e),
                }
            };
            if sealed.capacity() <= SEAL_BUFFER_KEEP {
                buffer.set(sealed);
            }
            result
        });
        if result.is_ok() && self.rotation.due(self.complete_to.load(Ordering::Relaxed)) {
            self.rotate_by_policy();
        }
        result
    }

    /// Encrypts (perrecord) and checksums a record into its stored form in `sealed`. Returns
    /// the key epoch the record was sealed in.
    fn seal(&self, kind: u8, flags: u8, payload: &[u8], sealed: &mut Vec<u8>) -> Result<u64> {
        // The epoch is read before the keys: a rotation stores the keys first, so a record
        // whose epoch is current was sealed under the current active key.
        let epoch = self.key_epoch.load(Ordering::Acquire);
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
            let keys = self.keys.load();
            let key_id = keys.active().unwrap_or(0);
            let iv = self.ivs.next_iv()?;
            keys.apply_keystream(key_id, &iv, &mut sealed[hlen..])?;
            header.flags |= RECORD_FLAG_ENCRYPTED;
            header.encryption = Some((key_id, iv));
        }
        header.encode(&mut sealed[..hlen]);
        header.crc = format::record_crc(&sealed[..hlen], &sealed[hlen..]);
        header.encode(&mut sealed[..hlen]);
        Ok(epoch)
    }

    /// Places a sealed record; `None` when the active key changed since it was sealed.
    fn insert_sealed(&self, sealed: &[u8], payload_len: usize, epoch: u64) -> Result<Option<Lsn>> {
        let mut ins = self.insert.lock();
        if epoch != self.key_epoch.load(Ordering::Acquire) {
            return Ok(None);
        }
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
        Ok(Some(Lsn(start)))
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

    /// Refuses work in another process than the opener (a forked child): it would repeat the
    /// opener's IVs. Called where bytes go to disk (every write-out, purge, rotation), not per
    /// append: `getpid` is a system call (about 200 ns measured here), and nothing an append
    /// seals reaches the disk without a write-out.
    fn check_process(&self) -> Result<()> {
        let caller = std::process::id();
        if caller != self.opener {
            return Err(Error::ForeignProcess {
                opener: self.opener,
                caller,
            });
        }
        Ok(())
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
