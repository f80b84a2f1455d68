//! Reading ahead for crash recovery: segment bytes read in large chunks instead of one page
//! per system call ([`ReadAhead`]), and a second thread that reads, checks and decrypts pages
//! ahead of the cursor that parses them, and for perrecord and perrecord-gcm logs checks each
//! record's CRC (and tag) and decrypts its payload ahead ([`prefetch_pages`], [`PageFeed`]).
//!
//! Both only change how bytes reach a [`Cursor`](super::Cursor), never what it decides: a page
//! the prefetcher did not deliver (a header that does not check, a key that is not listed, a
//! read that failed) is read again by the cursor itself, which then reports exactly what and
//! where it always did. Recovery uses them because it holds the log directory: no writer
//! changes the files under it, so a page read early is the page read late. Readers of live
//! logs keep reading one page at a time.
//!
//! For a perrecord record the prefetcher makes one of two things, kept in a per-batch buffer
//! of its own (the page images stay ciphertext: the tail page goes back to the writer):
//! * the record lies wholly in the pages it holds (the batch and the next): it computes the
//!   CRC over the header and the stored payload and, only if it matches the header's, decrypts
//!   the payload (an authenticated record's only if its tag also matches, by the same
//!   `seal` code the cursor would call, over the same associated data). The cursor, finding a record at that LSN with exactly those 32 header bytes,
//!   still walks the record's pages (page loads, continuation lengths, in the same order) and
//!   makes every other check, then copies the decrypted payload out instead of reading,
//!   checksumming and decrypting it: the CRC verdict is the same because the bytes are.
//! * the record runs past those pages (and is at most [`AHEAD_MAX_RECORD`]): its keystream,
//!   which the cursor XORs in only after it verified the record's CRC itself. An
//!   authenticated record gets none: the cursor opens it, tag first.
//!
//! A record whose CRC or tag does not match there gets nothing, and so does any record the
//! prefetcher cannot follow: the cursor reads it as before and reports what it finds, at the
//! same record, with the same error. No decrypted byte reaches the cursor before its CRC (and
//! its tag) was verified. The
//! prefetcher also leaves an adaptive share of the records to the cursor (see `Walker`), so
//! that when it is the slower thread the cursor takes on part of the AES work.
//!
//! Memory (the bounds hold for any input): the prefetcher is at most six batches of
//! [`READ_AHEAD_BYTES`] (1.5 MiB of pages) ahead of the cursor, and a replay holds at most
//! about 2.5 MiB of pages ([`PREFETCH_DEPTH`]). A record buffer holds the decrypted payloads
//! and keystreams of the records that start in one batch, which is at most the batch's bytes
//! and one record running past it (at most the next batch, or [`AHEAD_MAX_RECORD`]): 768 KiB
//! with pages of up to 256 KiB (a batch is [`READ_AHEAD_BYTES`]), twice the page size with
//! larger pages (a batch is one page). At most 8 are alive: four in the channel, the one the
//! prefetcher holds back and the one it fills, and the cursor's (the record it is at and the
//! batch where that record ends). So 6 MiB at most with the default 8 KiB pages. When a buffer
//! is reused, its old bytes are overwritten by the new batch's or wiped (zeroized) before that
//! batch is sent; it is wiped when dropped, and never reallocated in place. The payloads
//! handed to the replay callback are the caller's.

use std::collections::VecDeque;

use super::files::{LogFiles, check_page_header, read_full};
use super::made::{AHEAD_MAX_RECORD, Made, Records, SHARE_MAX, Walker, Wiped};
use super::prefetched::{Prefetched, READ_AHEAD_BYTES};
use crate::Lsn;
use crate::format::PAGE_FLAG_ENCRYPTED;
use crate::seal;
use crate::storage::StorageFile;
use crossbeam::channel::{Receiver, Sender};

/// Page batches in flight between the prefetching thread and the cursor. With the batch it
/// holds back and the one it is reading, the prefetcher is at most six batches of
/// [`READ_AHEAD_BYTES`] (1.5 MiB of pages) ahead of the cursor. With the recycled page buffers,
/// its read buffer and the cursor's, a replay holds at most about 2.5 MiB of pages; the
/// perrecord record buffers add at most 6 MiB with 8 KiB pages (see the module docs).
pub(crate) const PREFETCH_DEPTH: usize = 4;
/// A window of one segment file's bytes, refilled with one large read when a page outside it
/// is asked for.
pub(crate) struct ReadAhead {
    segment: Lsn,
    offset: u64,
    len: usize,
    buf: Vec<u8>,
}

impl ReadAhead {
    pub(crate) fn new() -> ReadAhead {
        ReadAhead {
            segment: Lsn(u64::MAX),
            offset: 0,
            len: 0,
            buf: Vec::new(),
        }
    }

    /// Fills `out` from byte `offset` of the file of the segment at `segment`, as
    /// [`read_full`] would: the count is short only at the end of the file. A failed large
    /// read is retried for `out` alone, so an error is the one a page-sized read meets.
    pub(crate) fn read(
        &mut self,
        file: &dyn StorageFile,
        segment: Lsn,
        offset: u64,
        out: &mut [u8],
    ) -> std::io::Result<usize> {
        let end = offset + out.len() as u64;
        let inside = segment == self.segment
            && offset >= self.offset
            && end <= self.offset + self.len as u64;
        if !inside {
            self.buf.resize(READ_AHEAD_BYTES.max(out.len()), 0);
            self.segment = Lsn(u64::MAX);
            self.len = match read_full(file, &mut self.buf, offset) {
                Ok(n) => n,
                Err(_) => return read_full(file, out, offset),
            };
            self.segment = segment;
            self.offset = offset;
        }
        let from = (offset - self.offset) as usize;
        let n = out.len().min(self.len - from);
        out[..n].copy_from_slice(&self.buf[from..from + n]);
        Ok(n)
    }
}

/// What the prefetching thread sends: pages in ascending order and what was made for the
/// perrecord records that start in them.
pub(crate) struct Batch {
    pages: Vec<Prefetched>,
    records: Records,
}

/// The cursor's end of the prefetching thread: pages in ascending order, some possibly
/// missing (those the cursor reads itself), and decrypted payloads or keystreams for records.
pub(crate) struct PageFeed {
    batches: Receiver<Batch>,
    /// Page buffers the cursor is done with, back to the prefetcher.
    spent: Sender<Vec<u8>>,
    /// Record byte buffers the cursor is done with, back to the prefetcher, which wipes them
    /// before reuse (so the wiping costs the cursor nothing).
    spent_bytes: Sender<Wiped>,
    pages: std::vec::IntoIter<Prefetched>,
    next: Option<Prefetched>,
    records: VecDeque<Records>,
}

/// The prefetcher's ends of the channels to a [`PageFeed`].
pub(crate) struct FeedEnds {
    batches: Sender<Batch>,
    spent: Receiver<Vec<u8>>,
    spent_bytes: Receiver<Wiped>,
}

/// Spent record byte buffers that wait for reuse: one for each batch that can be in flight, so
/// the cursor never has to drop (and wipe) one itself.
const SPENT_BYTES_DEPTH: usize = PREFETCH_DEPTH + 2;

impl PageFeed {
    /// The channels between a cursor and [`prefetch_pages`]: the feed, and the prefetcher's
    /// ends.
    pub(crate) fn channels() -> (PageFeed, FeedEnds) {
        let (batches_tx, batches) = crossbeam::channel::bounded(PREFETCH_DEPTH);
        let (spent, spent_rx) = crossbeam::channel::bounded(2 * READ_AHEAD_BYTES / 4096);
        let (spent_bytes, spent_bytes_rx) = crossbeam::channel::bounded(SPENT_BYTES_DEPTH);
        let feed = PageFeed {
            batches,
            spent,
            spent_bytes,
            pages: Vec::new().into_iter(),
            next: None,
            records: VecDeque::new(),
        };
        let ends = FeedEnds {
            batches: batches_tx,
            spent: spent_rx,
            spent_bytes: spent_bytes_rx,
        };
        (feed, ends)
    }

    /// What was made for the record at `lsn` whose header is `head`, if anything; what was
    /// made for records before `lsn` is dropped.
    fn made_for(&mut self, lsn: Lsn, head: &[u8]) -> Option<(&Made, &[u8])> {
        loop {
            let front = self.records.front_mut()?;
            while front.made.front().is_some_and(|m| m.lsn < lsn) {
                front.made.pop_front();
            }
            if front.made.is_empty() {
                if let Some(done) = self.records.pop_front() {
                    self.give_back_bytes(done.bytes);
                }
                continue;
            }
            break;
        }
        let front = self.records.front()?;
        let made = front.made.front()?;
        (made.lsn == lsn && made.head[..] == *head).then(|| (made, front.bytes_of(made)))
    }

    /// Whether the prefetcher verified the CRC of the record at `lsn`, whose header bytes are
    /// `head`, and decrypted its payload: then [`PageFeed::take_plaintext`] hands it out.
    pub(crate) fn verified(&mut self, lsn: Lsn, head: &[u8]) -> bool {
        self.made_for(lsn, head).is_some_and(|(m, _)| m.verified)
    }

    /// Appends the payload of the record at `lsn` (header `head`), decrypted by the prefetcher
    /// after its CRC matched, to `out`. False when there is none.
    pub(crate) fn take_plaintext(&mut self, lsn: Lsn, head: &[u8], out: &mut Vec<u8>) -> bool {
        match self.made_for(lsn, head) {
            Some((made, plain)) if made.verified => out.extend_from_slice(plain),
            _ => return false,
        }
        self.pop_made();
        true
    }

    /// Decrypts `stored`, the CRC-verified payload of the record at `lsn` whose header bytes
    /// are `head`, with the keystream made ahead for exactly this record. False when there is
    /// none: the caller then decrypts it as usual.
    pub(crate) fn decrypt(&mut self, lsn: Lsn, head: &[u8], stored: &mut [u8]) -> bool {
        match self.made_for(lsn, head) {
            Some((made, stream)) if !made.verified && made.len == stored.len() => {
                for (b, s) in stored.iter_mut().zip(stream) {
                    *b ^= s;
                }
            }
            _ => return false,
        }
        self.pop_made();
        true
    }

    /// Returns a record byte buffer to the prefetcher, which wipes it before reuse; one that
    /// was never used is simply dropped.
    fn give_back_bytes(&self, bytes: Wiped) {
        if bytes.is_allocated() {
            let _ = self.spent_bytes.try_send(bytes);
        }
    }

    /// Drops what was made for the record just handed out, and gives the batch's buffer back
    /// once nothing is left in it, so the cursor holds at most two: that of the record it is
    /// at and that of the batch where the record ends.
    fn pop_made(&mut self) {
        let Some(front) = self.records.front_mut() else {
            return;
        };
        front.made.pop_front();
        if front.made.is_empty()
            && let Some(done) = self.records.pop_front()
        {
            self.give_back_bytes(done.bytes);
        }
    }

    /// The prefetched page at `page`, if the prefetcher delivered it; pages before it are
    /// dropped. `None` leaves the page to the cursor.
    pub(crate) fn take(&mut self, page: Lsn) -> Option<Prefetched> {
        loop {
            let next = match self.next.take() {
                Some(p) => p,
                None => self.pull()?,
            };
            if next.lsn == page {
                return Some(next);
            }
            if next.lsn > page {
                self.next = Some(next);
                return None;
            }
            self.give_back(next.image);
        }
    }

    /// Returns a page buffer for reuse (dropped if the prefetcher is gone or has enough).
    pub(crate) fn give_back(&self, image: Vec<u8>) {
        let _ = self.spent.try_send(image);
    }

    fn pull(&mut self) -> Option<Prefetched> {
        loop {
            if let Some(p) = self.pages.next() {
                return Some(p);
            }
            let batch = self.batches.recv().ok()?;
            self.pages = batch.pages.into_iter();
            if batch.records.made.is_empty() {
                self.give_back_bytes(batch.records.bytes);
            } else {
                self.records.push_back(batch.records);
            }
        }
    }
}

/// The prefetching thread: reads the log's pages from the record boundary `from` to the end of
/// the files in large reads, checks each page header against its position, decrypts pagelevel
/// bodies, walks the record headers of perrecord logs to check and decrypt each record (or
/// make its keystream), and sends all that in batches. A page that does not check is left out,
/// and so is the rest of its segment (the cursor reads those itself and decides what they
/// mean); the first failed read ends the prefetching. It also ends when the cursor's side is
/// dropped.
pub(crate) fn prefetch_pages(files: &LogFiles, from: Lsn, ends: FeedEnds) {
    let FeedEnds {
        batches,
        spent,
        spent_bytes,
    } = ends;
    let geo = files.geo;
    let page_size = geo.page_size as usize;
    let per_batch = (READ_AHEAD_BYTES / page_size).max(1);
    let mut chunk = vec![0u8; per_batch * page_size];
    let mut walker = Walker::new(files, from);
    // What the records that start in one batch can need: those that end in it hold at most
    // the batch's bytes; the last one adds at most the next batch (decrypted, when it ends
    // there) or its keystream (at most `AHEAD_MAX_RECORD`). Logs it does not walk need none.
    let record_room = if walker.walks() {
        chunk.len() + chunk.len().max(AHEAD_MAX_RECORD)
    } else {
        0
    };
    // Each batch is sent once the next one is read, so the record headers that run over its
    // last page can be walked.
    let mut held: Option<Batch> = None;
    let mut send = |batch: Batch, walker: &mut Walker<'_>| -> bool {
        if let Some(mut prev) = held.take() {
            let limit = batch.pages.first().map_or(Lsn(u64::MAX), |p| p.lsn);
            // Decryption goes to whichever side has slack: with batches waiting, the cursor is
            // the slower side and this thread decrypts; with none, the cursor is (or soon
            // will be) waiting for pages, and decrypting them itself costs it less than the wait.
            let decrypt = !batches.is_empty();
            // No batch queued: the cursor keeps up with this thread (or waits for it), so it
            // takes a larger share of the AES work; half the channel or more queued: a smaller
            // one. Kept so, the cursor seldom blocks. Handing it records only once it had
            // blocked was measured worse: in bulk it then waited about 280 µs at a time, for
            // four batches, while the two threads ran in turn rather than side by side.
            let queued = batches.len();
            if queued == 0 {
                walker.share = (walker.share + 1).min(SHARE_MAX);
            } else if queued >= PREFETCH_DEPTH / 2 {
                walker.share = walker.share.saturating_sub(1);
            }
            walker.walk(&prev.pages, &batch.pages, limit, &mut prev.records);
            prev.records.finish();
            if decrypt {
                decrypt_pages(files, &mut prev.pages);
            }
            if batches.send(prev).is_err() {
                return false;
            }
        }
        held = Some(batch);
        true
    };
    let mut page = geo.page_start(from);
    'segments: while page < files.end_of_files() {
        let seg_start = geo.segment_start(page);
        if geo.is_header_page(page) {
            page += geo.page_size;
            continue;
        }
        let Some(seg) = files.segment(seg_start) else {
            page = seg_start + geo.segment_size;
            continue;
        };
        let Ok(file) = files.storage.open(&seg.path, false) else {
            break;
        };
        let seg_end = seg_start + geo.segment_size;
        while page < seg_end {
            let count = (((seg_end - page) / geo.page_size) as usize).min(per_batch);
            let bytes = &mut chunk[..count * page_size];
            let Ok(n) = read_full(file.as_ref(), bytes, page - seg_start) else {
                break 'segments;
            };
            bytes[n..].fill(0);
            let mut pages = Vec::with_capacity(count);
            let mut whole = true;
            for raw in bytes.chunks_exact(page_size) {
                match checked_page(files, page, raw, &spent) {
                    Some(p) => pages.push(p),
                    None => {
                        whole = false;
                        break;
                    }
                }
                page += geo.page_size;
            }
            if !pages.is_empty() {
                let batch = Batch {
                    pages,
                    records: Records::reusing(spent_bytes.try_recv().ok(), record_room),
                };
                if !send(batch, &mut walker) {
                    return;
                }
            }
            if !whole || n < bytes.len() {
                break;
            }
        }
        page = seg_end;
    }
    if let Some(mut last) = held.take() {
        walker.walk(&last.pages, &[], Lsn(u64::MAX), &mut last.records);
        last.records.finish();
        decrypt_pages(files, &mut last.pages);
        let _ = batches.send(last);
    }
}

/// Decrypts the pagelevel bodies still encrypted in `pages`.
fn decrypt_pages(files: &LogFiles, pages: &mut [Prefetched]) {
    let Some(keys) = files.keys.as_ref() else {
        return;
    };
    for p in pages.iter_mut().filter(|p| p.encrypted) {
        if seal::open_page(Some(keys), &p.header, &mut p.image).is_ok() {
            p.encrypted = false;
        }
    }
}

/// The page at `page` as the cursor would load it (body not yet decrypted), if its header
/// checks and (pagelevel) its key is listed and present; `None` otherwise.
fn checked_page(
    files: &LogFiles,
    page: Lsn,
    raw: &[u8],
    spent: &Receiver<Vec<u8>>,
) -> Option<Prefetched> {
    let header = check_page_header(files.log_id, files.mode, page, raw).ok()?;
    let encrypted = header.flags & PAGE_FLAG_ENCRYPTED != 0;
    if encrypted {
        files.check_key_listed(header.key_id, page).ok()?;
        // A key the ring lacks: the cursor reads the page itself and reports it.
        files.keys.as_ref()?.check_value(header.key_id)?;
    }
    let mut image = spent.try_recv().unwrap_or_default();
    image.clear();
    image.extend_from_slice(raw);
    Some(Prefetched {
        lsn: page,
        header,
        image,
        encrypted,
    })
}
