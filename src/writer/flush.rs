//! The write side of the log: write-outs (a range reserved and planned under the write lock,
//! its bytes copied out of the buffer and written after it, or under it where the caller
//! holds it; pagelevel copies and encrypts under it always; the ranges in flight are tracked
//! in `inflight`), group-commit flushes, fdatasync and close. The segment files the
//! pages go into (handles, creation, switch and purge) are managed in `segments`.

use std::time::Instant;

use std::sync::Arc;

use crate::lock_order::{OrderedGuard, OrderedMutex};

use super::durable::{Handle, Turn};
use super::group::RoundEnd;
use super::{SameProcess, Wal, WriteState};
use crate::Lsn;
use crate::config::{Mode, SyncMode};
use crate::error::{Error, Result};
use crate::format::{self, PAGE_HEADER_LEN, PageHeader};
use crate::seal;
use crate::storage::StorageFile;

/// Write-outs of up to this many bytes reuse a per-thread buffer.
const WRITE_BUFFER_KEEP: usize = 1 << 20;

thread_local! {
    static WRITE_BUFFER: std::cell::Cell<WriteBuffer> = std::cell::Cell::new(WriteBuffer::default());
}

/// The bytes of one reserved range, the runs (one per segment) they are written as, and the
/// pieces they are made of. The runs and pieces are planned under the write lock; the bytes
/// are copied from the WAL buffer after it (under it in pagelevel mode, which encrypts them).
/// Kept per thread, so building a range allocates nothing once the thread has written one of
/// its size.
#[derive(Default)]
pub(super) struct WriteBuffer {
    bytes: Vec<u8>,
    /// How long `bytes` is once filled.
    len: usize,
    runs: Vec<Run>,
    pieces: Vec<Piece>,
}

impl WriteBuffer {
    /// Empties it, keeping its allocations, and drops the runs' file handles.
    fn clear(&mut self) {
        self.bytes.clear();
        self.len = 0;
        self.runs.clear();
        self.pieces.clear();
    }
}

/// A part of a range's bytes, `bytes[at..at + len]`.
enum Piece {
    /// The buffered bytes of `page` from `from` on: what was appended to a page since its
    /// last write.
    Tail {
        page: Lsn,
        from: Lsn,
        at: usize,
        len: usize,
    },
    /// The image of `page` (its header with the durable hint `hint`, its first `valid`
    /// bytes, zeros after them), cut at `len` bytes.
    Image {
        page: Lsn,
        valid: usize,
        hint: Lsn,
        at: usize,
        len: usize,
    },
}

/// A contiguous stretch of one segment file: `bytes[at..at + len]` goes to `offset`.
struct Run {
    segment: Lsn,
    file: Arc<dyn StorageFile>,
    offset: u64,
    at: usize,
    len: usize,
}

/// A range reserved and registered in flight (`InFlight`), not yet written. Dropped without
/// landing (a write failed, or the writer unwound), it poisons the log and wakes the
/// waiters: the range never lands, so nothing after it may be acknowledged, and nothing may
/// wait for it.
pub(super) struct Reserved<'a> {
    wal: &'a Wal,
    ticket: super::inflight::Ticket,
    buf: WriteBuffer,
    landed: bool,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        if buf.bytes.capacity() <= WRITE_BUFFER_KEEP {
            WRITE_BUFFER.set(buf);
        }
        if self.landed {
            return;
        }
        let wal = self.wal;
        if !wal.poison.is_set() {
            let position = wal.inflight.written();
            let error = wal.broken_invariant(
                "write segment",
                position,
                "a write-out ended without writing its range".into(),
            );
            let _ = wal.poison_error(error);
        }
        wal.inflight.abandon();
    }
}

/// A `Durable` round's fdatasync announced as pending (`Syncs::announce`): dropped before it
/// is `done` (an error or a panic between the announcement and `flushed_to` passing its
/// target), it poisons the log, so the followers that wait for the round instead of leading
/// one wake to an error rather than to a flush that never comes.
struct SyncDue<'a> {
    wal: &'a Wal,
    target: Lsn,
    done: bool,
}

impl Drop for SyncDue<'_> {
    fn drop(&mut self) {
        if !self.done && !self.wal.poison.is_set() {
            let error = self.wal.broken_invariant(
                "fdatasync segment",
                self.target,
                "a flush round ended before it acknowledged its fdatasync".into(),
            );
            let _ = self.wal.poison_error(error);
        }
    }
}

/// Takes `lock` and returns it with the moment its hold began, for the lock-hold statistics.
/// The clock is read before an uncontended acquisition, so that read is not part of the hold
/// (which then counts the acquiring compare-and-swap, a few ns, as held), or right after a
/// contended one, so time spent waiting is never counted as held.
pub(super) fn timed_lock<T, const LEVEL: u8>(
    lock: &OrderedMutex<T, LEVEL>,
) -> (OrderedGuard<'_, T, LEVEL>, Instant) {
    let before = Instant::now();
    match lock.try_lock() {
        Some(guard) => (guard, before),
        None => {
            let guard = lock.lock();
            (guard, Instant::now())
        }
    }
}

impl Wal {
    /// Writes everything before `target`: reserves it under the write lock, writes it after
    /// releasing the lock, and waits until everything before `target` has landed. The appender
    /// that makes room in a full buffer comes here (under the insert lock), and checks first
    /// that it is the opener's process.
    pub(super) fn write_out(&self, target: Lsn) -> Result<()> {
        let same = self.check_process()?;
        self.write_through(|_| target, false, false, same)
            .map(|_| ())
    }

    /// Under the write lock: the target `target` chooses (with the lock held; a record
    /// boundary, or any position already copied), its range reserved and, with `inside`, also
    /// written there (pagelevel's Durable flush: its encryption stays in the lock). After the
    /// lock: the range written and everything before the target landed. Returns the target and,
    /// with `handles`, the writer's segment handles as the lock saw them.
    fn write_through(
        &self,
        target: impl FnOnce(&WriteState) -> Lsn,
        inside: bool,
        handles: bool,
        same: SameProcess,
    ) -> Result<(Lsn, Vec<Handle>)> {
        self.counters.here().write_lock_acquisitions.add(1);
        let (mut w, held_since) = timed_lock(&self.write);
        let target = target(&w);
        let handles = match handles {
            true => w.files.clone(),
            false => Vec::new(),
        };
        let reserved = match inside {
            true => self.write_locked(&mut w, target, same).map(|()| None),
            false => self.reserve(&mut w, target),
        };
        drop(w);
        self.counters
            .here()
            .write_lock_ns
            .add(held_since.elapsed().as_nanos() as u64);
        if let Some(range) = reserved? {
            self.write_range(range)?;
        }
        self.wait_landed(target)?;
        Ok((target, handles))
    }

    /// Writes the buffer's pages from the reserved position up to `target` (which must be
    /// copied already) and waits until everything before `target` has landed, ranges other
    /// threads reserved included, all without releasing the write lock. Partly filled pages
    /// are written again (or appended to) later: whole in pagelevel, up to `target` otherwise. Any error on the way poisons the
    /// log: pages may already be written past what the writer's position says, and appends
    /// after a half-done write-out must never be acknowledged.
    ///
    /// `SameProcess`: the caller checked, before taking the write lock, that this is the
    /// opener's process.
    pub(super) fn write_locked(
        &self,
        w: &mut WriteState,
        target: Lsn,
        _same: SameProcess,
    ) -> Result<()> {
        if let Some(range) = self.reserve(w, target)? {
            self.write_range(range)?;
        }
        self.wait_landed(target)
    }

    /// Under the write lock: reserves `[reserved_to, target)`, plans its bytes (page images
    /// and appends; pagelevel also builds and encrypts them here) and registers it in flight.
    /// `None` when everything before `target` is reserved already. The caller builds and
    /// writes the range with [`Wal::write_range`], with or without the write lock.
    pub(super) fn reserve(&self, w: &mut WriteState, target: Lsn) -> Result<Option<Reserved<'_>>> {
        self.check_poison()?;
        if target <= w.reserved_to {
            return Ok(None);
        }
        let mut buf = WRITE_BUFFER.take();
        buf.clear();
        // Planning moves `imaged` to the pages it plans; if the range is then never
        // registered, it goes back, so `imaged` always names a page of a registered range
        // (`refresh_hint` in a poisoned log relies on it).
        let imaged = w.imaged;
        let built =
            self.plan_pages(w, target, &mut buf)
                .and_then(|()| match self.fills_under_lock() {
                    true => self.fill(Some(w), &mut buf),
                    false => Ok(()),
                });
        if let Err(e) = built {
            w.imaged = imaged;
            buf.clear();
            WRITE_BUFFER.set(buf);
            return Err(self.poison_error(e));
        }
        let lo = buf
            .runs
            .first()
            .map_or(w.reserved_to, |r| r.segment + r.offset);
        let hi = buf
            .runs
            .last()
            .map_or(w.reserved_to, |r| r.segment + r.offset + r.len as u64);
        let start = w.reserved_to;
        let registered = self.inflight.register(
            &mut w.inflight,
            (start, target),
            (lo, hi),
            self.poison.flag(),
        );
        let Some(ticket) = registered else {
            w.imaged = imaged;
            buf.clear();
            WRITE_BUFFER.set(buf);
            self.check_poison()?;
            return Err(self.broken_invariant(
                "write segment",
                start,
                "a registration of a write-out was refused by a log that is not poisoned".into(),
            ));
        };
        w.reserved_to = target;
        w.data_end = target;
        self.counters.here().write_outs.add(1);
        Ok(Some(Reserved {
            wal: self,
            ticket,
            buf,
            landed: false,
        }))
    }

    /// Builds a reserved range's bytes (unless the write lock did), writes them once no
    /// earlier range in flight covers them, lists its segments dirty, and marks it landed. A
    /// failure poisons the log; the range then never lands.
    pub(super) fn write_range(&self, mut range: Reserved<'_>) -> Result<()> {
        if !self.fills_under_lock() {
            self.fill(None, &mut range.buf)
                .map_err(|e| self.poison_error(e))?;
        }
        self.write_runs(&range.ticket, &range.buf)?;
        for run in &range.buf.runs {
            self.syncs.landed(run.segment);
        }
        self.inflight.land(&range.ticket);
        range.landed = true;
        Ok(())
    }

    fn write_runs(&self, ticket: &super::inflight::Ticket, buf: &WriteBuffer) -> Result<()> {
        if !ticket.clear() && !self.inflight.wait_clear(ticket, self.poison.flag()) {
            // Poisoned while it waited: the range is not written.
            self.check_poison()?;
            return Err(self.broken_invariant(
                "write segment",
                self.inflight.written(),
                "a write-out was refused by a log that is not poisoned".into(),
            ));
        }
        for run in &buf.runs {
            run.file
                .write_all_at(&buf.bytes[run.at..run.at + run.len], run.offset)
                .map_err(|e| self.poison_at("write segment", run.segment, run.offset, e))?;
        }
        Ok(())
    }

    /// Waits until everything before `target` has landed; an error if the log was poisoned
    /// first.
    pub(super) fn wait_landed(&self, target: Lsn) -> Result<()> {
        if self.inflight.written() >= target {
            return Ok(());
        }
        if self.inflight.wait_landed(target, self.poison.flag()) {
            return Ok(());
        }
        self.check_poison()?;
        Err(self.broken_invariant(
            "wait for a write-out",
            target,
            "a wait for written pages ended in a log that is not poisoned".into(),
        ))
    }

    /// Whether a reserved range's bytes are built under the write lock ([`Wal::reserve`]):
    /// pagelevel's, whose encryption is the study's serial work. The other modes copy theirs
    /// when the range is written ([`Wal::write_range`]).
    fn fills_under_lock(&self) -> bool {
        self.mode == Mode::PageLevel
    }

    /// Plans the bytes of `[reserved_to, target)` in `buf`: one run per segment, each a
    /// contiguous stretch of the file, and the pieces (page images, a page's new tail) that
    /// make it up, with their places in `buf.bytes`. Arithmetic only: the bytes are copied
    /// from the buffer by [`Wal::fill`], under the write lock in pagelevel mode (its pages are
    /// encrypted there), after it otherwise.
    fn plan_pages(&self, w: &mut WriteState, target: Lsn, buf: &mut WriteBuffer) -> Result<()> {
        let ps = self.geo.page_size;
        let hint = self.positions.synced();
        let mut page = self.geo.page_start(w.reserved_to);
        let mut len = buf.len;
        while page < target {
            if self.geo.is_header_page(page) {
                page += ps;
                continue;
            }
            let segment = self.geo.segment_start(page);
            let mut run_start = page;
            let at = len;
            if let Some(from) = self.appendable(w, page, hint) {
                // Only the bytes appended since the last write of this page: its header and
                // everything before `from` are on file already (or land first: `InFlight`),
                // zeros after.
                let to = target.min(page + ps);
                let tail = (to - from) as usize;
                buf.pieces.push(Piece::Tail {
                    page,
                    from,
                    at,
                    len: tail,
                });
                len += tail;
                run_start = from;
                page += ps;
            }
            let appended = run_start != page;
            let mut pages = 0;
            // Whether the page this run's images end in is imaged for the first time (pages are
            // imaged in order, so one past the last imaged page never was).
            let mut first_image = false;
            while page < target && self.geo.segment_start(page) == segment {
                first_image = w.imaged.0 == super::NO_PAGE || page > w.imaged.0;
                let valid = (target.min(page + ps) - page).max(PAGE_HEADER_LEN as u64);
                buf.pieces.push(Piece::Image {
                    page,
                    valid: valid as usize,
                    hint,
                    at: len,
                    len: ps as usize,
                });
                len += ps as usize;
                w.imaged = (page, hint);
                pages += 1;
                page += ps;
            }
            let file = self.file_for(w, segment)?;
            let old_bytes = first_image && w.reused.contains(&segment);
            if pages > 0 && self.mode != Mode::PageLevel && !old_bytes {
                // The last page image ends where the range ends, not at the page's end: the
                // file holds zeros after it already (recovery zeroed the log past its end at
                // open, a segment this open makes new is zero-filled, and the first image of a
                // page of a reused file, whose old bytes are still there, goes to the page's
                // end: `recycle::MadeSegment`), and this open only ever extends a page.
                // Successive commits' ranges then share no bytes, so none waits for another's
                // write (`InFlight::wait_clear`). pagelevel writes its zeros: its whole-page
                // rewrites are ordered under the write lock.
                let last = page - ps;
                let end = target.min(page).max(last + PAGE_HEADER_LEN as u64);
                let cut = at + (end - run_start) as usize;
                if let Some(Piece::Image { at, len: image, .. }) = buf.pieces.last_mut() {
                    *image = cut - *at;
                }
                len = cut;
            }
            self.counters
                .here()
                .pages_written
                .add(pages + u64::from(appended));
            buf.runs.push(Run {
                segment,
                file,
                offset: run_start - segment,
                at,
                len: len - at,
            });
        }
        buf.len = len;
        Ok(())
    }

    /// Copies the planned pieces of `buf` out of the WAL buffer into `buf.bytes`. `w` is the
    /// write lock's state, which pagelevel's page encryption needs (its key and, at a page's
    /// first write-out, its IV); without it the pages are read only (after the lock, or under it
    /// where the caller holds it to write: `write_locked`). The slots stay on their pages
    /// while this reads them: a slot is claimed for a later page only once its page has landed
    /// in full, and the range this fills is registered in flight and has not landed, so
    /// `written_to` stays at or below its start (`PageBuffer::claim`; the one exception,
    /// `restamp_tail` at open, moves `reserved_to` back below `written_to` but fills under the
    /// write lock before the log is shared).
    fn fill(&self, mut w: Option<&mut WriteState>, buf: &mut WriteBuffer) -> Result<()> {
        buf.bytes.clear();
        buf.bytes.resize(buf.len, 0);
        for piece in &buf.pieces {
            let (Piece::Tail { page, .. } | Piece::Image { page, .. }) = *piece;
            debug_assert!(
                self.inflight.written() < page + self.geo.page_size,
                "page {page} is copied out of the buffer after it landed in full (written to {})",
                self.inflight.written()
            );
            match *piece {
                Piece::Tail {
                    page,
                    from,
                    at,
                    len,
                } => self.page_tail(page, from, &mut buf.bytes[at..at + len])?,
                Piece::Image {
                    page,
                    valid,
                    hint,
                    at,
                    len,
                } => {
                    let slot = self.slot_holding(page)?;
                    let out = &mut buf.bytes[at..at + len];
                    self.image_from_slot(w.as_deref_mut(), &slot, (page, valid, hint), out)?;
                }
            }
        }
        Ok(())
    }

    /// Where a write-out that starts in `page` may append to the page's bytes on file instead
    /// of writing it again from its header: the position the writer reached in it, when this
    /// open wrote the page's image (header and records) with the same durable
    /// hint and the page has grown since. Its header is then unchanged (`rem_len` is fixed
    /// when the page is entered, the hint is the same), so only the new bytes need writing:
    /// in `Buffered` mode, where the hint moves only at `sync`, a commit writes what it
    /// appended instead of a whole page. Never in pagelevel mode, whose rewrite repeats the
    /// whole encrypted body under the page's one IV.
    fn appendable(&self, w: &WriteState, page: Lsn, hint: Lsn) -> Option<Lsn> {
        let from = w.reserved_to;
        let appendable = self.mode != Mode::PageLevel
            && w.imaged == (page, hint)
            && self.geo.page_start(from) == page
            && from > page + PAGE_HEADER_LEN as u64;
        appendable.then_some(from)
    }

    /// The buffer slot of `page`; an error (a broken invariant, which poisons the write it
    /// belongs to) if the slot holds another page.
    fn slot_holding(&self, page: Lsn) -> Result<super::buffer::Holding<'_>> {
        self.buffer.holding(page).map_err(|wrong| {
            self.broken_invariant(
                "write page",
                page,
                format!("page {page} is not in the write buffer: {}", wrong.0),
            )
        })
    }

    /// Copies the buffered bytes `[from, from + out.len())` of `page` into `out`.
    fn page_tail(&self, page: Lsn, from: Lsn, out: &mut [u8]) -> Result<()> {
        self.slot_holding(page)?.read((from - page) as usize, out);
        Ok(())
    }

    /// Builds the on-disk image of `page`, which `slot` was seen holding, into `out`: header,
    /// the first `valid` bytes of the page from the buffer and zeros after them. In pagelevel mode only the filled part of the
    /// body, `[PAGE_HEADER_LEN, valid)`, is encrypted, under the page's one IV of this open
    /// (drawn at its first write-out), and the zeros after it are written as zeros: every
    /// rewrite repeats the bytes of the earlier writes exactly, and keystream past the filled
    /// part is never exposed.
    /// `w`, the write lock's state, is needed in pagelevel mode only. `out` may end before
    /// the page does (the image is cut where a range ends), but not before `valid`.
    fn image_from_slot(
        &self,
        w: Option<&mut WriteState>,
        slot: &super::buffer::Holding<'_>,
        (page, valid, hint): (Lsn, usize, Lsn),
        out: &mut [u8],
    ) -> Result<()> {
        slot.read(PAGE_HEADER_LEN, &mut out[PAGE_HEADER_LEN..valid]);
        let (rem_len, cipher) = if self.seal.seals_pages() {
            let Some(w) = w else {
                return Err(self.broken_invariant(
                    "write page",
                    page,
                    "a page to encrypt was imaged outside the write lock".into(),
                ));
            };
            let mut draw = || Ok((self.page_key(w, page), self.ivs.next_iv()?));
            slot.meta::<Error>(Some(&mut draw))?
        } else {
            slot.meta::<Error>(None)?
        };
        out[valid..].fill(0);
        let mut header = PageHeader {
            flags: 0,
            key_id: 0,
            page_lsn: page,
            rem_len,
            durable_hint: hint,
            iv: [0; 16],
        };
        if cipher.is_some() {
            let started = Instant::now();
            seal::seal_page(&self.keys.load(), cipher, &mut header, out, valid)?;
            self.counters
                .here()
                .write_lock_encrypt_ns
                .add(started.elapsed().as_nanos() as u64);
        }
        header.encode(self.log_id, &mut out[..PAGE_HEADER_LEN]);
        Ok(())
    }

    /// The key that encrypts pages of the segment holding `page` (pagelevel).
    fn page_key(&self, w: &WriteState, page: Lsn) -> u32 {
        match w.segment_key {
            Some((segment, key_id)) if segment == self.geo.segment_start(page) => key_id,
            _ => self.keys.load().active().unwrap_or(0),
        }
    }

    /// fdatasyncs every segment written since its last fdatasync, once every reserved range
    /// has landed (so the round covers everything reserved), in the sync turn `turn`
    /// ([`Wal::sync_in_turn`]). Under the write lock, taken after the turn.
    pub(super) fn sync_locked(&self, w: &mut WriteState, turn: &Turn<'_>) -> Result<()> {
        self.wait_landed(w.reserved_to)?;
        self.sync_in_turn(turn, &w.files)
    }

    /// Makes every record up to and including the one at `lsn` durable, as the configured
    /// [`SyncMode`] defines it. `lsn` may be any position up to [`Wal::end_lsn`]: a record's
    /// start, a position inside a record (that record is flushed) or the end itself
    /// (`flush(wal.end_lsn())` flushes everything appended so far). Beyond the end it fails
    /// with [`Error::LsnNotAvailable`].
    ///
    /// Every flush writes everything in the buffer so far, not only its own record, in one
    /// write per segment, so commits whose records are in the buffer together share one
    /// write-out. `Buffered`, except pagelevel: the flush takes the write lock only to reserve
    /// that range, or to find its record in a range reserved already (by another flush, an
    /// appender facing a full buffer, `sync`), and writes (or waits for) it after the lock;
    /// ranges of concurrent commits are written side by side, and the flush returns once
    /// everything below its target has landed. `Durable` and pagelevel: group commit. One caller at a time
    /// is the leader; the others do not queue for the write lock behind it (a leader that
    /// returns and commits again would win that race on a busy machine); they wait for the
    /// leader to finish, return at once if it covered their record, and otherwise one of them
    /// leads the next round for all the rest. Commits arriving together thus cost one
    /// fdatasync between them.
    pub fn flush(&self, lsn: Lsn) -> Result<()> {
        loop {
            self.check_poison()?;
            if self.writes_alone() {
                if self.flushed_through(lsn) {
                    return Ok(());
                }
                let end = self.reservations.end();
                if end < lsn {
                    return Err(Error::LsnNotAvailable { lsn, end });
                }
                // No round to join: this commit writes its own range (or waits for the
                // write-out that reserved it) and returns.
                return self.lead_round(lsn, None);
            }
            // Read before the checks below: a round that ends after this read bumps it, and
            // one that ended before it raised `flushed_to` (and ended `pending`'s wait) first.
            let seen = self.group.rounds();
            if self.flushed_through(lsn) {
                return Ok(());
            }
            let end = self.reservations.end();
            if end < lsn {
                return Err(Error::LsnNotAvailable { lsn, end });
            }
            if self.sync == SyncMode::Durable && self.sync_pending_through(lsn) {
                // Written, and a leader's fdatasync of it is queued or running: its round's
                // end wakes this thread.
                self.group.wait_after(seen);
                continue;
            }
            match self.group.lead() {
                // Ends the round even if the flush unwinds, so waiters never wait forever.
                Some(round) => return self.lead_round(lsn, Some(round)),
                // A round is under way: wait for it to end, then look again.
                None => self.group.wait_after(seen),
            }
        }
    }

    /// Whether a flush skips group commit and writes out its own range: `Buffered` plaintext,
    /// perrecord and perrecord-gcm, whose write lock only plans a range, so that concurrent
    /// commits write disjoint ranges side by side, which land in order without a lock
    /// (inflight.rs). Electing a leader to write for a group would cost two writes of the
    /// group word per write-out, and a futex sleep and wake for every commit that arrives
    /// while a write runs, to save a pwrite that, unsynced, is about as cheap as the wake:
    /// Buffered commits rarely share a write-out (1.1–1.3 commits per write-out at 4 to 64
    /// threads with the group, docs/BENCHMARKS.md, "Buffered commits without a group").
    /// pagelevel keeps the group: its write-out encrypts and writes under the write lock,
    /// which others would queue on. `Durable` keeps it: the fdatasync is what a group shares.
    fn writes_alone(&self) -> bool {
        self.sync == SyncMode::Buffered && self.mode != Mode::PageLevel
    }

    /// True when the record at `lsn` (or, at the end of the log, everything before it) lies
    /// below the target of an fdatasync a leader has announced (`Syncs::pending`).
    fn sync_pending_through(&self, lsn: Lsn) -> bool {
        let pending = self.syncs.pending();
        pending > lsn || (pending == lsn && self.reservations.end() == lsn)
    }

    /// One flush round: takes the write lock and flushes everything appended so far (a
    /// group-commit round, or a `Buffered` flush's own, [`Wal::writes_alone`]).
    /// `Durable`: [`Wal::lead_durable`]. pagelevel, `Buffered`: writes and waits for every
    /// range in flight, all under the lock. `Buffered` plaintext, perrecord and perrecord-gcm:
    /// reserves and
    /// plans the range under the lock, copies and writes it after releasing it, and waits
    /// until everything below its target has landed.
    pub(super) fn lead_flush(&self, lsn: Lsn, round: Option<&mut RoundEnd<'_>>) -> Result<()> {
        let same = self.check_process()?;
        if self.sync == SyncMode::Durable {
            return self.lead_durable(lsn, round, same);
        }
        // Before the write lock: the insertions waited for may need it to make room. What it
        // returns is read last, so whatever else is in the buffer by now comes along; the
        // insertion lanes are not read again under the lock (one line per lane, each written
        // by another core, would be read in the write lock's hold: PostgreSQL also waits for
        // insertions before it takes its write lock).
        let inserted = self.inserted_through(lsn);
        self.counters.here().write_lock_acquisitions.add(1);
        let (mut w, held_since) = timed_lock(&self.write);
        // pagelevel: every commit rewrites its partly filled page whole, so commits' writes
        // overlap and would only wait for each other outside the lock (0.9-1.6 us more CPU per
        // oltp transaction at 4-8 threads, measured); it writes inside the lock, as the study's
        // design does.
        if self.mode == Mode::PageLevel {
            let result = self.flush_locked(&mut w, lsn, inserted, same);
            drop(w);
            self.counters
                .here()
                .write_lock_ns
                .add(held_since.elapsed().as_nanos() as u64);
            return result;
        }
        // Buffered: only the reservation and its plan under the write lock; the copy and the
        // write after it, in parallel with other commits' copies and writes of other bytes.
        let reserved = if self.flushed_through(lsn) {
            Ok(None)
        } else {
            let target = inserted;
            self.reserve(&mut w, target)
                .map(|range| Some((target, range)))
        };
        drop(w);
        self.counters
            .here()
            .write_lock_ns
            .add(held_since.elapsed().as_nanos() as u64);
        let Some((target, range)) = reserved? else {
            return Ok(());
        };
        if let Some(range) = range {
            self.write_range(range)?;
        }
        self.wait_landed(target)?;
        // No flush returns Ok once the log is poisoned, even one whose own bytes landed.
        self.check_poison()?;
        self.positions.raise_flushed(target);
        Ok(())
    }

    /// The flush of `lsn` under the write lock (pagelevel, `Buffered`), through `inserted` (a
    /// record boundary past `lsn` through which every record is in the buffer,
    /// `inserted_through`) or further.
    fn flush_locked(
        &self,
        w: &mut WriteState,
        lsn: Lsn,
        inserted: Lsn,
        same: SameProcess,
    ) -> Result<()> {
        if self.flushed_through(lsn) {
            return Ok(());
        }
        let target = inserted;
        self.write_locked(w, target, same)?;
        // No flush returns Ok once the log is poisoned (a range another thread wrote outside
        // the lock may have failed meanwhile), as on the other paths.
        self.check_poison()?;
        self.positions.raise_flushed(target);
        self.debug_check_positions(w);
        Ok(())
    }

    /// A `Durable` group-commit round, led by this thread. It writes out everything in the
    /// buffer (reserved under the write lock, written after it; pagelevel encrypts and writes
    /// under it, as the study's design does), which may overlap the fdatasync of the round
    /// before; then it waits for the sync turn and writes out what was appended meanwhile,
    /// so its fdatasync covers every record appended before it starts. Holding the turn, it
    /// announces its target as pending and hands the lead on: the next round's leader writes
    /// while this fdatasync runs, and flushers whose records are below the target wait for
    /// this round instead. Then the fdatasync, `flushed_to` and `synced_to`, and the rewrite
    /// of the hint of the last page written.
    fn lead_durable(
        &self,
        lsn: Lsn,
        round: Option<&mut RoundEnd<'_>>,
        same: SameProcess,
    ) -> Result<()> {
        // Before the write lock: the insertions waited for may need it to make room.
        let inserted = self.inserted_through(lsn);
        if self.flushed_through(lsn) {
            return Ok(());
        }
        let (first, handles) = self.write_durable(inserted, same)?;
        let turn = self.syncs.turn();
        // Everything appended while this thread waited for the turn comes along, without
        // waiting for insertions still in progress. (A segment the writer has closed since is
        // opened again to be synced.)
        let now = self.inserted_to();
        let (target, handles) = match now > first {
            true => self.write_durable(now, same)?,
            false => (first, handles),
        };
        if self.positions.synced() >= target {
            // A round that began after this one's records landed covered them.
            drop(turn);
            self.check_poison()?;
            self.positions.raise_flushed(target);
            return Ok(());
        }
        // From here until `flushed_to` passes `target`, followers below it wait for this
        // round's end instead of leading; an unwinding leader must not leave them waiting.
        let mut due = SyncDue {
            wal: self,
            target,
            done: false,
        };
        self.syncs.announce(target);
        if let Some(round) = round {
            round.hand_on();
        }
        self.sync_in_turn(&turn, &handles)?;
        // No flush returns Ok once the log is poisoned, even one whose own bytes are synced.
        self.check_poison()?;
        drop(turn);
        let mut w = self.write.lock();
        self.wait_landed(w.reserved_to)?;
        self.acknowledge_synced(&mut w, target)?;
        due.done = true;
        self.debug_check_positions(&w);
        Ok(())
    }

    /// Writes out everything through `inserted` (a record boundary through which every
    /// record is in the buffer, read by the caller before the write lock: the insertion
    /// lanes are never read under it), and waits until it has landed. Returns the target
    /// written through and the writer's segment handles, for the fdatasync after the write
    /// lock.
    fn write_durable(&self, inserted: Lsn, same: SameProcess) -> Result<(Lsn, Vec<Handle>)> {
        self.write_through(|_| inserted, self.mode == Mode::PageLevel, true, same)
    }

    /// Checks, in debug builds, the ordering of the positions documented in writer/mod.rs as
    /// far as the write lock (held by the caller, about to release it) can see it
    /// ([`super::positions::Positions::check_order`]).
    pub(super) fn debug_check_positions(&self, w: &WriteState) {
        if !self.poison.is_set() {
            self.positions.check_order(|| super::positions::Seen {
                end: self.reservations.end_if_open(),
                written: self.inflight.written(),
                reserved: w.reserved_to,
            });
        }
    }

    /// Acknowledges `synced`, a record boundary an fdatasync that returned covers: writes its
    /// durable hint on file ([`Wal::refresh_hint`]), then raises `flushed_to` and `synced_to`
    /// to it, which is what returns flushes waiting for it. In that order: a follower of the
    /// files learns what is durable only from page headers, so a flush that returned Ok before
    /// the hint was written left its record out of every follower's sight for good when that
    /// write then failed (a disk failing every write after an fdatasync that succeeded: a
    /// replica promoted then lacked an acknowledged record). A round whose hint cannot be
    /// written acknowledges nothing; its records are durable, and the next open recovers them.
    /// Under the write lock, with every reserved range landed.
    pub(super) fn acknowledge_synced(&self, w: &mut WriteState, synced: Lsn) -> Result<()> {
        // Write-outs are planned under the write lock, which the caller holds from the refresh
        // to the raise: none is planned in between, with the older hint.
        self.refresh_hint(w, synced)?;
        // No flush returns Ok once the log is poisoned: the refresh in a poisoned log is
        // best effort.
        self.check_poison()?;
        // `flushed_to` before `synced_to`, so that `synced_to <= flushed_to` holds at every
        // instant (`Positions::check_order`).
        self.positions.raise_flushed(synced);
        self.positions.raise_synced(synced);
        Ok(())
    }

    /// Writes the durable hint an fdatasync just made true into the header of the last page
    /// written, whose header still carries the hint of before that fdatasync: a follower of
    /// the files learns what is durable only from page headers, and would otherwise stay one
    /// flush behind a writer that has gone idle (or closed) until the next page is written.
    /// Under the write lock, right after the fdatasync, with every reserved range landed.
    ///
    /// Only the page's first 512-byte sector is written: the new header and, behind it, the
    /// page's bytes as they are on file already (the same records, pagelevel's the same
    /// ciphertext under the page's one IV, and zeros after them). A sector is written whole
    /// or not at all (docs/FORMAT.md, "Assumptions about the storage device", 1), so a crash
    /// leaves the old header or the new one, each valid and each vouching only for what is
    /// durable; a write of the header's 48 bytes alone would leave the sector's other bytes
    /// to the page cache's read of them. The rest of the page is not rewritten: it holds what
    /// the page's write-outs put there, which a rewrite would repeat byte for byte (a write of
    /// the whole page cost a 8 KiB copy out of the buffer and into the page cache, under the
    /// write lock, per Durable round). The page's next write-out then finds its header current
    /// and writes only what was appended (`appendable`). Not synced here, and no segment is
    /// listed dirty for it (a `sync` with nothing new appended costs no fdatasync): the hint is
    /// true whether or not this write survives a crash. `close` syncs it. `synced` is the
    /// position the fdatasync covers ([`Wal::acknowledge_synced`]).
    pub(super) fn refresh_hint(&self, w: &mut WriteState, synced: Lsn) -> Result<()> {
        let (page, hint) = w.imaged;
        if page == super::NO_PAGE {
            return Ok(());
        }
        // In a poisoned log too (best effort, and nothing is acknowledged after it): the
        // fdatasync that covers `synced` succeeded, the records it made durable come back at
        // the next open, and followers learn what is durable only from page headers. While
        // every range reserved has landed, `imaged`'s page
        // is on file (a write-out that failed in its planning, making a segment say, put
        // `imaged` back); otherwise a range that failed may hold its image.
        if self.poison.is_set() && self.inflight.written() < w.reserved_to {
            // A range failed, and `imaged`'s page may be one it held. The page of the last
            // byte `synced` covers landed (`synced <= written_to`): its header goes there, on
            // file. Best effort: the log is poisoned already, and the fdatasync succeeded.
            if synced > Lsn(0) {
                let page = self.geo.page_start(Lsn(synced.0 - 1));
                let _ = self.refresh_hint_on_file(w, page, synced);
            }
            return Ok(());
        }
        // (`imaged`'s hint, checked only now: a range that failed may have imaged it with a
        // hint that never reached the file.)
        if hint >= synced {
            return Ok(());
        }
        // Once the page has landed in full, an appender may claim its slot for the page one
        // ring length on at any moment (appenders do not take the write lock): the image is
        // used only if the slot still held the page after it was read (`still_holds`).
        let Ok(slot) = self.buffer.holding(page) else {
            // The page is complete (landed in full) and its slot holds a newer page: the hint
            // goes into the header on file. Waiting for the newer page's first write-out to
            // carry it is not enough: if that write-out or its fdatasync fails, the log is
            // poisoned and followers would never see records this fdatasync made durable.
            return self.refresh_hint_on_file(w, page, synced);
        };
        let ps = self.geo.page_size;
        // Up to the end of the log's bytes, not `reserved_to`: after a jump over unused log
        // (a segment switch) the rest of this page holds only what its slot kept from the page
        // one ring length earlier, and zeros belong there.
        let valid = (w.data_end.clamp(page, page + ps) - page).max(PAGE_HEADER_LEN as u64);
        // The page's first sector: pages start on sector boundaries and are at least a sector.
        let mut image = [0u8; format::MIN_PAGE_SIZE as usize];
        let valid = valid.min(image.len() as u64) as usize;
        self.image_from_slot(Some(w), &slot, (page, valid, synced), &mut image)?;
        if !slot.still_holds() {
            return self.refresh_hint_on_file(w, page, synced);
        }
        let segment = self.geo.segment_start(page);
        let file = self.file_for(w, segment)?;
        file.write_all_at(&image, page - segment)
            .map_err(|e| self.poison_at("write page", segment, page - segment, e))?;
        w.imaged = (page, synced);
        w.hint_unsynced = Some(segment);
        Ok(())
    }

    /// [`Wal::refresh_hint`] for a page that has landed in full and left the buffer: its first
    /// sector is read back from the file (what its write-outs put there), its header given the
    /// hint `synced`, and the sector written again. Nothing else in the sector changes
    /// (pagelevel's body keeps its ciphertext and the header its IV). A header on file that is
    /// not this page's is a broken invariant.
    fn refresh_hint_on_file(&self, w: &mut WriteState, page: Lsn, synced: Lsn) -> Result<()> {
        let segment = self.geo.segment_start(page);
        let file = self.file_for(w, segment)?;
        let mut sector = [0u8; format::MIN_PAGE_SIZE as usize];
        let read = crate::storage::read_full(file.as_ref(), &mut sector, page - segment)
            .map_err(|e| self.poison_at("read page", segment, page - segment, e))?;
        let header = (read == sector.len())
            .then(|| PageHeader::decode(self.log_id, &sector[..PAGE_HEADER_LEN]))
            .flatten()
            .filter(|h| h.page_lsn == page);
        let Some(mut header) = header else {
            let error = self.broken_invariant(
                "write page",
                page,
                format!("the header of page {page}, landed in full, is not on file"),
            );
            return Err(self.poison_error(error));
        };
        header.durable_hint = synced;
        header.encode(self.log_id, &mut sector[..PAGE_HEADER_LEN]);
        file.write_all_at(&sector, page - segment)
            .map_err(|e| self.poison_at("write page", segment, page - segment, e))?;
        w.imaged = (page, synced);
        w.hint_unsynced = Some(segment);
        Ok(())
    }

    /// Flushes every appended record and fdatasyncs (in every sync mode), then closes the log.
    /// The last page's header then carries a durable hint through the end, made durable too,
    /// so followers of the files (in any process, also after a restart) see every record.
    pub fn close(self) -> Result<()> {
        self.finish()
    }

    /// [`Wal::close`] for a log shared by reference (an `Arc<Wal>` that other threads still
    /// hold): refuses appends from its start ([`Error::Closed`]: an append racing it either
    /// returns Ok and is made durable, or is refused; also when the shutdown then fails),
    /// makes everything appended durable as `close` does, then refuses every later call with
    /// [`Error::Closed`]. The directory lock is released when the last reference is dropped.
    /// A `shutdown` after one that returned gets `Error::Closed` (two running at once may both
    /// return Ok: each made everything appended durable).
    pub fn shutdown(&self) -> Result<()> {
        // Appends are refused from here on (`Error::Closed`), before the final flush reads
        // the end: an append that succeeds meanwhile reserved its place before, and is
        // covered. The other calls are refused once the flush is done.
        self.check_process()?;
        self.check_poison()?;
        self.reservations.shut();
        let result = self.finish();
        if result.is_ok() {
            self.poison.close();
        }
        result
    }

    fn finish(&self) -> Result<()> {
        // In a forked child, before anything that may take a lock (the poison cause's).
        self.check_process()?;
        self.check_poison()?;
        let result = self.sync_all().and_then(|()| {
            let turn = self.syncs.turn();
            let mut w = self.write.lock();
            match w.hint_unsynced.take() {
                Some(segment) => {
                    self.syncs.landed(segment);
                    self.sync_locked(&mut w, &turn)
                }
                None => Ok(()),
            }
        });
        self.deliver_events();
        result
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, Error, KeyRing, Lsn, Mode, Wal};

    #[test]
    fn a_range_copied_after_the_write_lock_keeps_its_pages_slots() {
        // A write-out copies its pages out of the buffer after it releases the write lock.
        // Meanwhile an appender fills the whole ring: the slot of the range's page must not
        // be claimed for a later page before the range has landed, or the range would write
        // the later page's bytes in its place.
        for mode in [Mode::PerRecord, Mode::Plaintext] {
            let dir = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let config = Config::new(mode)
                .keys(keys.clone())
                .page_size(4096)
                .buffer_size(4 * 4096);
            let wal = Wal::open(dir.path(), config).unwrap();
            let mut expected = vec![
                wal.append(1, &[0xA5; 100])
                    .map(|lsn| (lsn, vec![0xA5; 100])),
            ];
            let end = wal.end_lsn();
            let mut w = wal.write.lock();
            let range = wal.reserve(&mut w, end).unwrap().expect("a range to write");
            drop(w);
            let appended = std::thread::scope(|scope| {
                let appender = scope.spawn(|| {
                    (0..80u8)
                        .map(|i| wal.append(2, &[i; 500]).map(|lsn| (lsn, vec![i; 500])))
                        .collect::<Vec<_>>()
                });
                std::thread::sleep(std::time::Duration::from_millis(50));
                assert!(
                    !appender.is_finished(),
                    "{mode:?}: the appender went round the ring before the range landed"
                );
                wal.write_range(range).unwrap();
                appender.join().unwrap()
            });
            expected.extend(appended);
            wal.flush(wal.end_lsn()).unwrap();
            wal.close().unwrap();
            let reader = crate::Reader::open(dir.path(), Some(keys)).unwrap();
            let read: Vec<_> = reader
                .records_from(Lsn::default())
                .map(|r| r.map(|r| (r.lsn, r.payload)))
                .collect::<crate::Result<_>>()
                .unwrap();
            let expected: Vec<_> = expected.into_iter().collect::<crate::Result<_>>().unwrap();
            assert_eq!(read, expected, "{mode:?}");
        }
    }

    #[test]
    fn an_error_while_building_a_page_image_poisons() {
        // pagelevel builds its pages under the write lock, the other modes after it: an
        // error in either place poisons the log.
        for mode in [Mode::PageLevel, Mode::PerRecord, Mode::Plaintext] {
            let dir = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let wal = Wal::open(dir.path(), Config::new(mode).keys(keys)).unwrap();
            let lsn = wal.append(1, b"record").unwrap();
            // Not an I/O error: the slot of the page to write claims to hold another page.
            let page = wal.geo.page_start(lsn);
            wal.buffer.mislabel(page, page + wal.geo.page_size);
            let error = wal
                .flush(lsn)
                .expect_err("a flush of a page that is not buffered");
            assert!(
                error.to_string().contains("is not in the write buffer"),
                "{mode:?}: {error}"
            );
            assert!(matches!(wal.append(1, b"later"), Err(Error::Poisoned(_))));
            assert!(matches!(wal.flush(lsn), Err(Error::Poisoned(_))));
            assert!(matches!(wal.close(), Err(Error::Poisoned(_))));
        }
    }

    /// The hint refresh after an fdatasync that succeeded is still made when a later round
    /// poisoned the log before it (an fdatasync that failed, or a write whose range never
    /// landed): the records that fdatasync made durable come back at the next open, and a
    /// follower of the files learns that only from the header. (It was skipped in any poisoned
    /// log while flushes were acknowledged before the refresh, and a follower missed such
    /// acknowledged records for good: an outside probe with failing fdatasyncs.)
    #[test]
    fn the_hint_refresh_is_made_when_a_later_round_poisoned_the_log() {
        use crate::{Follower, SyncMode};
        let modes = [Mode::Plaintext, Mode::PerRecord, Mode::PageLevel];
        for (mode, failed_write) in modes.into_iter().flat_map(|m| [(m, false), (m, true)]) {
            let dir = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let config = Config::new(mode)
                .keys(keys.clone())
                .sync(SyncMode::Buffered)
                .page_size(4096);
            let wal = Wal::open(dir.path(), config).unwrap();
            wal.flush(wal.append(1, b"written").unwrap()).unwrap();
            let lsn = wal.append(1, b"made durable").unwrap();
            let end = wal.end_lsn();
            wal.append(1, b"not yet written").unwrap();
            let later = wal.end_lsn();
            // `sync`'s steps, with a failure elsewhere between the fdatasync and the refresh.
            let same = wal.check_process().unwrap();
            let turn = wal.syncs.turn();
            let mut w = wal.write.lock();
            wal.write_locked(&mut w, end, same).unwrap();
            wal.sync_locked(&mut w, &turn).unwrap();
            match failed_write {
                // A later round's fdatasync failed: every range had landed.
                false => {
                    let failed =
                        wal.broken_invariant("fdatasync segment", end, "a later round".into());
                    let _ = wal.poison_error(failed);
                }
                // A later round's write failed: its range (imaging the same page) never lands.
                true => {
                    let range = wal.reserve(&mut w, later).unwrap().expect("a range");
                    drop(range);
                }
            }
            wal.refresh_hint(&mut w, end).unwrap();
            drop((w, turn));
            let mut follower = Follower::open(dir.path(), Some(keys), Lsn(0)).unwrap();
            let mut seen = false;
            while let Some(record) = follower
                .next_timeout(std::time::Duration::from_millis(300))
                .unwrap()
            {
                seen |= record.lsn == lsn;
            }
            assert!(
                seen,
                "{mode:?}, a failed write {failed_write}: a follower never saw the record made durable"
            );
            drop(wal);
        }
    }

    /// After a segment switch, the page holding the switch record is written again with the
    /// new durable hint (`refresh_hint`, at `sync`): with zeros after the record, not what the
    /// page's buffer slot still holds from the page one ring length earlier.
    #[test]
    fn the_hint_rewrite_after_a_switch_writes_zeros_after_the_switch_record() {
        use std::io::{Read, Seek, SeekFrom};
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(Mode::Plaintext)
            .sync(crate::SyncMode::Buffered)
            .page_size(512)
            .segment_size(64 * 1024)
            .buffer_size(2048);
        let wal = Wal::open(dir.path(), config).unwrap();
        // Past the ring's first lap (4 slots of 512 bytes), every slot holds records.
        for i in 0..60u32 {
            wal.append(1, &[0xA5; 90][..(40 + i as usize % 50)])
                .unwrap();
        }
        wal.flush(wal.end_lsn()).unwrap();
        let end = wal.end_lsn();
        wal.switch_segment().unwrap();
        let switch_end = wal.write.lock().data_end;
        assert!(switch_end > end, "the switch record follows the log's end");
        wal.sync().unwrap();
        let page = wal.geo.page_start(switch_end - 1);
        let segment = wal.geo.segment_start(page);
        let rest = ((page + wal.geo.page_size) - switch_end) as usize;
        assert!(rest > 0, "the switch record ends inside its page");
        let path = dir.path().join(crate::format::segment_file_name(segment));
        let mut file = std::fs::File::open(path).unwrap();
        file.seek(SeekFrom::Start(switch_end - segment)).unwrap();
        let mut after = vec![0u8; rest];
        file.read_exact(&mut after).unwrap();
        assert!(
            after.iter().all(|&b| b == 0),
            "bytes after the switch record in its page: {:?}",
            &after[..after.len().min(32)]
        );
    }
}
