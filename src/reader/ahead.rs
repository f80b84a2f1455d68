//! Reading ahead for crash recovery: segment bytes read in large chunks instead of one page
//! per system call ([`ReadAhead`]), and a second thread that reads, checks and decrypts pages
//! ahead of the cursor that parses them ([`prefetch_pages`], [`PageFeed`]).
//!
//! Both only change how page bytes reach a [`Cursor`](super::Cursor), never what it decides:
//! a page the prefetcher did not deliver (a header that does not check, a key that is not
//! listed, a read that failed) is read again by the cursor itself, which then reports exactly
//! what and where it always did. Recovery uses them because it holds the log directory: no
//! writer changes the files under it, so a page read early is the page read late. Readers of
//! live logs keep reading one page at a time.

use crossbeam::channel::{Receiver, Sender};

use super::files::{LogFiles, check_page_header, read_full};
use crate::format::{PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, PageHeader};
use crate::storage::StorageFile;

/// Bytes one read-ahead system call asks for (32 pages of 8 KiB).
pub(crate) const READ_AHEAD_BYTES: usize = 256 << 10;
/// Page batches in flight between the prefetching thread and the cursor: with
/// [`READ_AHEAD_BYTES`] per batch, at most about 1.25 MiB of pages are read ahead.
pub(crate) const PREFETCH_DEPTH: usize = 4;

/// A window of one segment file's bytes, refilled with one large read when a page outside it
/// is asked for.
pub(crate) struct ReadAhead {
    segment: u64,
    offset: u64,
    len: usize,
    buf: Vec<u8>,
}

impl ReadAhead {
    pub(crate) fn new() -> ReadAhead {
        ReadAhead {
            segment: u64::MAX,
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
        segment: u64,
        offset: u64,
        out: &mut [u8],
    ) -> std::io::Result<usize> {
        let end = offset + out.len() as u64;
        let inside = segment == self.segment
            && offset >= self.offset
            && end <= self.offset + self.len as u64;
        if !inside {
            self.buf.resize(READ_AHEAD_BYTES.max(out.len()), 0);
            self.segment = u64::MAX;
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

/// A page read, checked and (pagelevel) decrypted ahead of the cursor.
pub(crate) struct Prefetched {
    pub(crate) lsn: u64,
    pub(crate) header: PageHeader,
    /// The whole page, body decrypted.
    pub(crate) image: Vec<u8>,
}

/// The cursor's end of the prefetching thread: pages in ascending order, some possibly
/// missing (those the cursor reads itself).
pub(crate) struct PageFeed {
    pages: Receiver<Vec<Prefetched>>,
    /// Page buffers the cursor is done with, back to the prefetcher.
    spent: Sender<Vec<u8>>,
    batch: std::vec::IntoIter<Prefetched>,
    next: Option<Prefetched>,
}

impl PageFeed {
    /// The channels between a cursor and [`prefetch_pages`]: the feed, and the prefetcher's
    /// ends.
    pub(crate) fn channels() -> (PageFeed, Sender<Vec<Prefetched>>, Receiver<Vec<u8>>) {
        let (pages_tx, pages) = crossbeam::channel::bounded(PREFETCH_DEPTH);
        let (spent, spent_rx) = crossbeam::channel::bounded(PREFETCH_DEPTH * 64);
        let feed = PageFeed {
            pages,
            spent,
            batch: Vec::new().into_iter(),
            next: None,
        };
        (feed, pages_tx, spent_rx)
    }

    /// The prefetched page at `page`, if the prefetcher delivered it; pages before it are
    /// dropped. `None` leaves the page to the cursor.
    pub(crate) fn take(&mut self, page: u64) -> Option<Prefetched> {
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
            if let Some(p) = self.batch.next() {
                return Some(p);
            }
            self.batch = self.pages.recv().ok()?.into_iter();
        }
    }
}

/// The prefetching thread: reads the log's pages from `from_page` to the end of the files in
/// large reads, checks each page header against its position and decrypts pagelevel bodies,
/// and sends them in batches. A page that does not check is left out, and so is the rest of
/// its segment (the cursor reads those itself and decides what they mean); the first failed
/// read ends the prefetching. It also ends when the cursor's side is dropped.
pub(crate) fn prefetch_pages(
    files: &LogFiles,
    from_page: u64,
    pages: Sender<Vec<Prefetched>>,
    spent: Receiver<Vec<u8>>,
) {
    let geo = files.geo;
    let page_size = geo.page_size as usize;
    let per_batch = (READ_AHEAD_BYTES / page_size).max(1);
    let mut chunk = vec![0u8; per_batch * page_size];
    let mut page = from_page;
    while page < files.end_of_files() {
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
            return;
        };
        let seg_end = seg_start + geo.segment_size;
        while page < seg_end {
            let count = (((seg_end - page) / geo.page_size) as usize).min(per_batch);
            let bytes = &mut chunk[..count * page_size];
            let Ok(n) = read_full(file.as_ref(), bytes, page - seg_start) else {
                return;
            };
            bytes[n..].fill(0);
            let mut batch = Vec::with_capacity(count);
            let mut whole = true;
            for raw in bytes.chunks_exact(page_size) {
                match checked_page(files, page, raw, &spent) {
                    Some(p) => batch.push(p),
                    None => {
                        whole = false;
                        break;
                    }
                }
                page += geo.page_size;
            }
            if !batch.is_empty() && pages.send(batch).is_err() {
                return;
            }
            if !whole || n < bytes.len() {
                break;
            }
        }
        page = seg_end;
    }
}

/// The page at `page` as the cursor would load it, if its header checks and (pagelevel) its
/// key is listed and present; `None` otherwise.
fn checked_page(
    files: &LogFiles,
    page: u64,
    raw: &[u8],
    spent: &Receiver<Vec<u8>>,
) -> Option<Prefetched> {
    let header = check_page_header(files.log_id, files.mode, page, raw).ok()?;
    let mut image = spent.try_recv().unwrap_or_default();
    image.clear();
    image.extend_from_slice(raw);
    if header.flags & PAGE_FLAG_ENCRYPTED != 0 {
        files.check_key_listed(header.key_id, page).ok()?;
        let keys = files.keys.as_ref()?;
        keys.apply_keystream(header.key_id, &header.iv, &mut image[PAGE_HEADER_LEN..])
            .ok()?;
    }
    Some(Prefetched {
        lsn: page,
        header,
        image,
    })
}
