//! What the read-ahead thread makes for the records of a perrecord or perrecord-gcm log
//! ([`Walker`]): each record's payload decrypted after its CRC (and tag) matched, or for a
//! record without a tag its keystream, in per-batch buffers
//! ([`Records`]) that are wiped when reused or dropped. The rules the cursor relies on (what
//! is made for which record, and when it is used) are in the docs of `reader::ahead`.

use std::collections::VecDeque;

use zeroize::Zeroize;

use super::files::LogFiles;
use super::prefetched::{Prefetched, READ_AHEAD_BYTES};
use crate::Lsn;
use crate::error::Position;
use crate::format::{
    self, Geometry, RECORD_FLAG_AUTHENTICATED, RECORD_FLAG_SWITCH, RECORD_FLAGS_CONTROL,
    RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN, RecordHeader,
};
use crate::seal;

/// The granularity at which the AES work of a perrecord replay is shared between the threads,
/// and the largest share the cursor takes on.
const SHARE_STEPS: u32 = 16;
pub(super) const SHARE_MAX: u32 = 12;
/// Records with a longer payload get nothing made ahead; the cursor reads and decrypts them
/// itself. It bounds what a damaged length field can make the prefetcher allocate.
pub(crate) const AHEAD_MAX_RECORD: usize = 2 * READ_AHEAD_BYTES;

/// What the prefetcher made for one perrecord record.
pub(super) struct Made {
    /// Where the record starts.
    pub(super) lsn: Lsn,
    /// The record's header as the prefetcher read it: what was made is used only for a record
    /// whose header bytes the cursor finds to be exactly these.
    pub(super) head: [u8; RECORD_HEADER_ENCRYPTED],
    /// Where in its batch's bytes, and how long (the payload length).
    at: usize,
    pub(super) len: usize,
    /// The bytes are the decrypted payload, made only after the record's CRC matched over
    /// these header bytes and the stored payload (and an authenticated record's tag over its
    /// associated data and ciphertext); otherwise they are the payload's keystream.
    pub(super) verified: bool,
}

/// What was made for the records that start in one batch of pages, in LSN order. The bytes
/// are decrypted payloads and keystream: when the buffer is reused they are overwritten by the
/// new batch's or wiped before it is sent, they are wiped when it is dropped, and a buffer
/// that must grow is copied into a larger one and the old one wiped.
pub(super) struct Records {
    pub(super) made: VecDeque<Made>,
    pub(super) bytes: Wiped,
    /// How many of the buffer's bytes hold this batch's records; any after them are a
    /// previous batch's, until [`Records::finish`] wipes them.
    used: usize,
}

/// A byte buffer wiped (zeroized) when it is dropped. Bytes are only ever written below its
/// length, and it never reallocates ([`Records::slot`] moves to a new buffer), so wiping the
/// bytes in use wipes everything it ever held, and an unused buffer costs nothing to drop.
#[derive(Default)]
pub(super) struct Wiped(Vec<u8>);

impl Wiped {
    /// Whether the buffer was ever allocated.
    pub(super) fn is_allocated(&self) -> bool {
        self.0.capacity() > 0
    }
}

impl Drop for Wiped {
    fn drop(&mut self) {
        wipe(&mut self.0);
    }
}

impl Records {
    /// A record list whose byte buffer is `bytes` (a spent one) if it has room for `room`
    /// bytes, else a new one of that capacity. A spent buffer's old bytes are overwritten by
    /// the new records' or wiped when the batch is finished ([`Records::finish`]).
    pub(super) fn reusing(bytes: Option<Wiped>, room: usize) -> Records {
        let bytes = match bytes {
            Some(bytes) if bytes.0.capacity() >= room => bytes,
            _ => Wiped(Vec::with_capacity(room)),
        };
        Records {
            made: VecDeque::new(),
            bytes,
            used: 0,
        }
    }

    /// Room for `len` more bytes after those in use (old bytes or zeros, to be overwritten);
    /// returns where it starts. The buffer is made large enough for a batch's records (see
    /// `prefetch_pages`) and never reallocates in place: should it be short, a larger one is
    /// made and the old one wiped.
    fn slot(&mut self, len: usize) -> usize {
        let at = self.used;
        let end = at + len;
        if end > self.bytes.0.capacity() {
            let room = end.max(2 * self.bytes.0.capacity());
            let mut bigger = Vec::with_capacity(room);
            bigger.extend_from_slice(&self.bytes.0[..at]);
            // The old buffer is wiped as it drops.
            self.bytes = Wiped(bigger);
        }
        if end > self.bytes.0.len() {
            self.bytes.0.resize(end, 0);
        }
        self.used = end;
        at
    }

    /// The bytes of the slot at `at`, up to the end of those in use.
    fn slot_mut(&mut self, at: usize) -> &mut [u8] {
        &mut self.bytes.0[at..self.used]
    }

    /// Gives up the slot at `at` (and any after it), wiping it.
    fn cut(&mut self, at: usize) {
        self.bytes.0[at..self.used].zeroize();
        self.used = at;
    }

    /// Wipes what the buffer held beyond the bytes now in use (a previous batch's records),
    /// before the batch is sent.
    pub(super) fn finish(&mut self) {
        self.bytes.0[self.used..].zeroize();
        self.bytes.0.truncate(self.used);
    }

    /// The bytes made for `made`.
    pub(super) fn bytes_of(&self, made: &Made) -> &[u8] {
        &self.bytes.0[made.at..made.at + made.len]
    }
}

/// Zeroes the bytes in use and empties the buffer. Bytes are only ever written below the
/// length, so this leaves nothing in the allocation.
fn wipe(bytes: &mut Vec<u8>) {
    bytes.as_mut_slice().zeroize();
    bytes.clear();
}

/// Follows the record headers of a perrecord or perrecord-gcm log through the prefetched pages
/// and, for each encrypted record, decrypts its payload once its CRC (and tag) matched or makes
/// its keystream (see the module docs). Anything it cannot follow (a header it cannot read or decode, a page that was
/// not prefetched) ends the walk; the cursor then reads and decrypts the remaining records
/// itself.
pub(super) struct Walker<'a> {
    files: &'a LogFiles,
    /// How many of every [`SHARE_STEPS`] records the walk leaves to the cursor (which then
    /// reads and decrypts them itself), adjusted per batch by how many batches wait in the
    /// channel (see `prefetch_pages`).
    pub(super) share: u32,
    /// Carries the spreading of left records from one record and batch to the next.
    spread: u32,
    /// The next record boundary, or `None` when the walk ended (or the log is not perrecord).
    pos: Option<Lsn>,
}

impl<'a> Walker<'a> {
    pub(super) fn new(files: &'a LogFiles, from: Lsn) -> Walker<'a> {
        let walks = files.mode.is_per_record();
        Walker {
            files,
            share: 0,
            spread: 0,
            pos: walks.then_some(from),
        }
    }

    /// Whether this log's records are walked (perrecord and perrecord-gcm).
    pub(super) fn walks(&self) -> bool {
        self.pos.is_some()
    }

    /// Walks the records that start before `limit` in `pages` (whose bytes may run into
    /// `next`), adding what it makes for them to `out`, but for `share` of every
    /// [`SHARE_STEPS`] records (the cursor reads and decrypts those itself).
    pub(super) fn walk(
        &mut self,
        pages: &[Prefetched],
        next: &[Prefetched],
        limit: Lsn,
        out: &mut Records,
    ) {
        let geo = self.files.geo;
        let mut window = Window {
            batches: [pages, next],
            hint: (0, 0),
        };
        while let Some(pos) = self.pos {
            // `share` of every SHARE_STEPS records are left to the cursor, spread evenly.
            self.spread += self.share;
            let make = self.spread < SHARE_STEPS;
            if !make {
                self.spread -= SHARE_STEPS;
            }
            // Only a position at a page or segment start has headers to skip.
            let start = if pos.0.is_multiple_of(geo.page_size) {
                geo.skip_headers(pos)
            } else {
                pos
            };
            if start >= limit {
                return;
            }
            self.pos = self.step(geo, start, &mut window, make, out);
        }
    }

    /// One record at `start`: what is made for it if it is encrypted, and where the next
    /// starts.
    fn step(
        &self,
        geo: Geometry,
        start: Lsn,
        window: &mut Window<'_>,
        make: bool,
        out: &mut Records,
    ) -> Option<Lsn> {
        let mut head = [0u8; RECORD_HEADER_ENCRYPTED];
        let page = geo.page_start(start);
        let in_page = (start - page) as usize;
        let page_size = geo.page_size as usize;
        // Most headers lie within one page: read them straight from it.
        let hlen = match window.page(page) {
            Some(image) if in_page + RECORD_HEADER_ENCRYPTED <= page_size => {
                let flags = image[in_page + format::REC_FLAGS_AT];
                let hlen = format::header_len_for_flags(flags);
                head[..hlen].copy_from_slice(&image[in_page..in_page + hlen]);
                hlen
            }
            _ => {
                window.stream_bytes(geo, start, &mut head[..RECORD_HEADER_PLAIN])?;
                let hlen = format::header_len_for_flags(head[format::REC_FLAGS_AT]);
                window.stream_bytes(geo, start, &mut head[..hlen])?;
                hlen
            }
        };
        let header = RecordHeader::decode(&head[..hlen]).ok()?;
        if header.flags & RECORD_FLAG_SWITCH != 0 {
            return Some(geo.after_switch(start, (hlen + header.len as usize) as u64));
        }
        let len = header.len as usize;
        if make
            && header.encryption.is_some()
            && header.flags & RECORD_FLAGS_CONTROL == 0
            && len <= AHEAD_MAX_RECORD
            && let Ok(head) = <[u8; RECORD_HEADER_ENCRYPTED]>::try_from(&head[..hlen])
        {
            self.make(geo, start, &head, &header, window, out)?;
        }
        let total = hlen + len;
        if in_page + total < page_size {
            // Ends inside the same page, short of its end: the next record starts right here.
            return Some(start + total as u64);
        }
        Some(geo.advance(start, total as u64))
    }

    /// Makes the encrypted record at `start` (header `head`, decoded as `header`) ready for the
    /// cursor: when the whole record lies in the window, its CRC is checked over `head` and the
    /// stored payload and, if it matches, the payload is opened (an authenticated record's
    /// only if its tag matches too); when the record runs past the window, its keystream is
    /// made instead (for a record without a tag: an authenticated one gets nothing). A CRC or
    /// tag that does not match makes nothing: the cursor reads that record itself and reports
    /// what it finds. `None` when the record's key is not in the ring (the walk ends there).
    fn make(
        &self,
        geo: Geometry,
        start: Lsn,
        head: &[u8; RECORD_HEADER_ENCRYPTED],
        header: &RecordHeader,
        window: &mut Window<'_>,
        out: &mut Records,
    ) -> Option<()> {
        let (key_id, iv) = header.encryption?;
        let keys = self.files.keys.as_ref()?;
        let len = header.len as usize;
        let at = out.slot(len);
        let payload = geo.advance(start, RECORD_HEADER_ENCRYPTED as u64);
        let slot = out.slot_mut(at);
        let verified = window.stream_bytes(geo, payload, slot).is_some();
        let version = self.files.version_at(start);
        if verified && format::record_crc(version, start, head, slot) != header.crc {
            out.cut(at);
            return Some(());
        }
        let len = if header.flags & RECORD_FLAG_AUTHENTICATED != 0 {
            let found = seal::Found {
                log_id: self.files.log_id,
                geo,
                version,
                at: Position::of(&geo, start),
            };
            let opened = match verified {
                true => seal::open_authenticated(keys, found, header, slot),
                false => Ok(None),
            };
            match opened {
                Ok(Some(plain)) => {
                    // The tag's bytes after the plaintext are given up (and wiped).
                    out.cut(at + plain);
                    plain
                }
                Ok(None) => {
                    out.cut(at);
                    return Some(());
                }
                Err(_) => {
                    out.cut(at);
                    return None;
                }
            }
        } else {
            if !verified {
                slot.fill(0);
            }
            if seal::open_ctr(keys, (key_id, &iv), slot).is_err() {
                out.cut(at);
                return None;
            }
            len
        };
        out.made.push_back(Made {
            lsn: start,
            head: *head,
            at,
            len,
            verified,
        });
        Some(())
    }
}

/// The prefetched pages a walk reads record headers from: one batch and the next.
struct Window<'p> {
    batches: [&'p [Prefetched]; 2],
    /// The batch and index of the page found last: most headers are on the same page or the
    /// next, so a lookup rarely needs a search.
    hint: (usize, usize),
}

impl<'p> Window<'p> {
    fn page(&mut self, page: Lsn) -> Option<&'p [u8]> {
        let (b, i) = self.hint;
        for (b, i) in [(b, i), (b, i + 1), (b + 1, 0)] {
            if let Some(p) = self.batches.get(b).and_then(|pages| pages.get(i))
                && p.lsn == page
            {
                self.hint = (b, i);
                return Some(&p.image);
            }
        }
        for (b, pages) in self.batches.iter().enumerate() {
            if let Ok(i) = pages.binary_search_by_key(&page, |p| p.lsn) {
                self.hint = (b, i);
                return Some(&pages[i].image);
            }
        }
        None
    }

    /// Copies the record stream's bytes from `pos` (skipping page and segment headers);
    /// `None` if a page is not in the window.
    fn stream_bytes(&mut self, geo: Geometry, mut pos: Lsn, out: &mut [u8]) -> Option<()> {
        let mut done = 0;
        while done < out.len() {
            pos = geo.skip_headers(pos);
            let page = geo.page_start(pos);
            let image = self.page(page)?;
            let in_page = (pos - page) as usize;
            let n = (out.len() - done).min(image.len() - in_page);
            out[done..done + n].copy_from_slice(&image[in_page..in_page + n]);
            done += n;
            pos += n as u64;
        }
        Some(())
    }
}
