//! The cursor: walks the record stream across pages and segments, validating page headers,
//! decrypting pagelevel pages and checking record checksums; and the record boundaries a read
//! may start from (`record_start`, `check_record_start`).

use super::Record;
use super::ahead::{PageFeed, ReadAhead};
use super::files::{LogFiles, check_page_header, read_full};
use crate::Lsn;
use crate::config::Mode;
use crate::crypto::Keys;
use crate::error::{CorruptionKind, Error, Position, Result};
use crate::format::Geometry;
use crate::format::{
    self, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, PageHeader, RECORD_FLAG_AUTHENTICATED,
    RECORD_FLAG_RESUME, RECORD_FLAG_SWITCH, RECORD_HEADER_PLAIN, RESUME_PAYLOAD_LEN, RecordHeader,
};
use crate::seal::{self, Disagreement, Found, Seal};
use crate::storage::StorageFile;

/// Why reading stopped before a complete, valid record.
#[derive(Debug, Clone)]
pub(crate) struct Invalid {
    /// Start of the record that could not be read: the end of the valid log if this is a tail.
    pub(crate) lsn: Lsn,
    /// Where the problem was found.
    pub(crate) at: Lsn,
    pub(crate) kind: CorruptionKind,
}

/// A valid record as stored: for perrecord logs the payload is still ciphertext.
pub(crate) struct Stored {
    pub(crate) lsn: Lsn,
    pub(crate) end_lsn: Lsn,
    pub(crate) header: RecordHeader,
    pub(crate) stored: Vec<u8>,
    /// The log id, part of an authenticated record's associated data.
    pub(crate) log_id: u64,
    /// The log's geometry, part of it too (format version 5 on).
    pub(crate) geo: Geometry,
    /// Format version of the segment the record starts in (its checksum's rule).
    pub(crate) version: u32,
    /// Where the record is, for errors found while decoding its payload.
    pub(crate) at: Position,
}

impl Stored {
    /// Drops a record that is not handed out, wiping its payload first: past the start of a
    /// replay it may be plaintext that the read-ahead thread decrypted.
    pub(crate) fn discard(mut self) {
        zeroize::Zeroize::zeroize(&mut self.stored);
    }

    /// Decrypts the payload in place (perrecord modes), checking the tag of an authenticated
    /// record first, and decompresses it if it was stored compressed; afterwards it is the
    /// payload as appended ([`seal::open_record`]).
    pub(crate) fn decrypt(&mut self, keys: Option<&Keys>) -> Result<()> {
        let found = Found {
            log_id: self.log_id,
            geo: self.geo,
            version: self.version,
            at: self.at,
        };
        seal::open_record(keys, found, &mut self.header, &mut self.stored)
    }

    /// Checks the tag of an authenticated record (perrecord-gcm) and decrypts its payload in
    /// place, as [`Stored::decrypt`] would first, leaving a compressed payload compressed (that
    /// one, too, then has only the decompression left). True for any other record, untouched.
    /// False when the tag fails: the ciphertext is left zeroed, nothing decrypted.
    pub(crate) fn authenticate(&mut self, keys: &Keys) -> Result<bool> {
        if self.header.encryption.is_none()
            || seal::RecordSeal::of_flags(self.header.flags) != seal::RecordSeal::Gcm
        {
            return Ok(true);
        }
        let found = Found {
            log_id: self.log_id,
            geo: self.geo,
            version: self.version,
            at: self.at,
        };
        match seal::open_authenticated(keys, found, &self.header, &mut self.stored)? {
            Some(plain) => {
                self.stored.truncate(plain);
                self.header.encryption = None;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The decrypted payload, leaving the stored bytes as they are.
    pub(crate) fn plaintext(&self, keys: Option<&Keys>) -> Result<Vec<u8>> {
        let mut copy = Stored {
            header: self.header,
            stored: self.stored.clone(),
            ..*self
        };
        copy.decrypt(keys)?;
        Ok(copy.stored)
    }

    /// Decrypts the payload in place if needed and returns the record.
    pub(crate) fn into_record(mut self, keys: Option<&Keys>) -> Result<Record> {
        self.decrypt(keys)?;
        Ok(Record {
            lsn: self.lsn,
            end_lsn: self.end_lsn,
            kind: self.header.kind,
            payload: self.stored,
        })
    }
}

/// One step of a [`Cursor`].
pub(crate) enum Step {
    Record(Stored),
    End(Invalid),
}

struct LoadedPage {
    lsn: Lsn,
    header: PageHeader,
    image: Vec<u8>,
}

/// Walks the record stream from a record boundary.
pub(crate) struct Cursor<'a> {
    files: &'a LogFiles,
    pos: Lsn,
    page: Option<LoadedPage>,
    file: Option<(Lsn, Box<dyn StorageFile>)>,
    /// Large reads instead of one per page (recovery only; see `reader::ahead`).
    ahead: Option<Box<ReadAhead>>,
    /// Pages read, checked and decrypted by another thread (recovery only).
    feed: Option<Box<PageFeed>>,
    /// The segment and key id last found listed, so a run of records under one key in one
    /// segment looks the segment up once.
    listed: Option<(Lsn, u32)>,
    /// The segment last looked up for its format version, and that version.
    version: Option<(Lsn, u32)>,
    /// True once this cursor has read a record (of any kind): a resume record can then only
    /// be reached through the end it names, never by reading on.
    read_before: bool,
    /// With `Some`, every position [`Cursor::next`] looks for a record at, control records'
    /// and resumed ends included ([`check_record_start`]).
    looked_at: Option<Vec<Lsn>>,
}

/// A cursor's state without its borrow of the files, so an owner of the files (a follower)
/// can keep its place, its open segment and its last page between calls.
#[derive(Default)]
pub(crate) struct Parked {
    page: Option<LoadedPage>,
    file: Option<(Lsn, Box<dyn StorageFile>)>,
}

/// Result of trying to read bytes: `Err` is a hard error (I/O, missing key), `Ok(Err)` a place
/// where the log is not valid.
type Try<T> = Result<std::result::Result<T, Invalid>>;

impl<'a> Cursor<'a> {
    pub(crate) fn new(files: &'a LogFiles, pos: Lsn) -> Cursor<'a> {
        Cursor {
            files,
            pos,
            page: None,
            file: None,
            ahead: None,
            feed: None,
            listed: None,
            version: None,
            read_before: false,
            looked_at: None,
        }
    }

    /// A cursor at `pos` that reads its segment files in large chunks. Only for a log no one
    /// writes while it reads (recovery holds the directory).
    pub(crate) fn reading_ahead(files: &'a LogFiles, pos: Lsn) -> Cursor<'a> {
        Cursor {
            ahead: Some(Box::new(ReadAhead::new())),
            ..Cursor::new(files, pos)
        }
    }

    /// Takes pages from `feed` where it has them; the others are read as before.
    pub(crate) fn with_feed(mut self, feed: PageFeed) -> Cursor<'a> {
        self.feed = Some(Box::new(feed));
        self
    }

    /// Where the next record is read from.
    pub(crate) fn position(&self) -> Lsn {
        self.pos
    }

    /// A cursor at `pos` that reuses what `parked` kept: the open segment file and, unless
    /// forgotten, the last page read.
    pub(crate) fn resume(files: &'a LogFiles, pos: Lsn, parked: Parked) -> Cursor<'a> {
        Cursor {
            page: parked.page,
            file: parked.file,
            ..Cursor::new(files, pos)
        }
    }

    /// Gives up the borrow of the files. With `keep` false it also forgets the last page read
    /// and the open segment file, so the next read sees what the writer has written since,
    /// even in a segment file that was replaced (removed by recovery and created again).
    pub(crate) fn park(self, keep: bool) -> Parked {
        if !keep {
            return Parked::default();
        }
        Parked {
            page: self.page,
            file: self.file,
        }
    }

    /// Reads the next record as stored. Segment-switch and resume records are followed, never
    /// returned.
    pub(crate) fn next(&mut self) -> Result<Step> {
        loop {
            let start = self.files.geo.skip_headers(self.pos);
            if let Some(looked_at) = self.looked_at.as_mut() {
                looked_at.push(start);
            }
            let step = self.read_record(start)?;
            let read_before = std::mem::replace(&mut self.read_before, step.is_ok());
            match step {
                Ok(rec) if rec.header.flags & RECORD_FLAG_SWITCH != 0 => {
                    let stored = format::header_len_for_flags(rec.header.flags) as u64
                        + u64::from(rec.header.len);
                    self.check_switch_tag(rec)?;
                    self.pos = self.files.geo.after_switch(start, stored);
                }
                Ok(rec) if rec.header.flags & RECORD_FLAG_RESUME != 0 => {
                    self.check_resume_read_on(&rec, read_before)?;
                    self.pos = rec.end_lsn;
                }
                Ok(rec) => {
                    // The cursor's postcondition: a record read where it was looked for, ending
                    // past its start, and the cursor moved to its end.
                    debug_assert!(
                        rec.lsn == start && rec.end_lsn > start,
                        "record read at {} for {} ending at {}",
                        rec.lsn,
                        start,
                        rec.end_lsn
                    );
                    self.pos = rec.end_lsn;
                    return Ok(Step::Record(rec));
                }
                Err(invalid) => match self.resumed_after(start)? {
                    Some(next) => {
                        self.read_before = true;
                        self.pos = next;
                    }
                    None => return Ok(Step::End(invalid)),
                },
            }
        }
    }

    /// Checks the tag of a sealed segment switch (perrecord-gcm, format version 4 on) before
    /// the cursor follows it. Without keys nothing is authenticated, as for data records read
    /// raw; an unsealed switch where a sealed one belongs never gets here (`check_header`).
    fn check_switch_tag(&self, mut rec: Stored) -> Result<()> {
        if rec.header.flags & RECORD_FLAG_AUTHENTICATED == 0 {
            return Ok(());
        }
        match self.files.keys.as_deref() {
            Some(keys) => rec.decrypt(Some(keys)),
            None => Ok(()),
        }
    }

    /// A resume record met by reading on rather than through the end it names
    /// ([`Cursor::resumed_after`]) is valid only as the first record a read starts at, and
    /// only when the end it names lies inside the body of the page before: after any other
    /// record it would skip what that record's end says comes next.
    fn check_resume_read_on(&self, rec: &Stored, read_before: bool) -> Result<()> {
        let start = rec.lsn;
        if read_before {
            return Err(self.control_corrupt(start, "resume record right after another record"));
        }
        let geo = self.files.geo;
        let named: [u8; RESUME_PAYLOAD_LEN] = rec.stored.as_slice().try_into().map_err(|_| {
            self.control_corrupt(start, "resume record whose payload is not 8 bytes")
        })?;
        let end = Lsn(u64::from_le_bytes(named));
        let page = geo.page_start(end);
        let inside = end < start
            && end > page + PAGE_HEADER_LEN as u64
            && geo.skip_headers(page + geo.page_size) == start;
        if !inside {
            return Err(self.control_corrupt(
                start,
                "resume record naming an end outside the body of the page before",
            ));
        }
        Ok(())
    }

    /// Where the log continues when no valid record starts at `start`: after the resume record
    /// at the start of the next page's body, if there is one naming exactly `start` (a pagelevel
    /// writer reopened the log there and left the rest of this page unwritten). `None` otherwise,
    /// and always in the other modes, which never write a resume record.
    fn resumed_after(&mut self, start: Lsn) -> Result<Option<Lsn>> {
        let geo = self.files.geo;
        let page = geo.page_start(start);
        if self.files.mode != Mode::PageLevel || start <= page + PAGE_HEADER_LEN as u64 {
            return Ok(None);
        }
        let next_body = geo.skip_headers(page + geo.page_size);
        Ok(match self.read_record(next_body)? {
            Ok(rec)
                if rec.header.flags & RECORD_FLAG_RESUME != 0
                    && rec.stored == start.0.to_le_bytes() =>
            {
                Some(rec.end_lsn)
            }
            Ok(other) => {
                other.discard();
                None
            }
            Err(_) => None,
        })
    }

    /// Checks a record whose checksum matched against the log's mode ([`Seal::check_header`]):
    /// a data record whose flags disagree is invalid there (`Ok(Err)`); a control record the
    /// format does not allow is corruption, or in perrecord-gcm `AuthenticationFailed`: no
    /// writer of the log wrote it, and it would delete what follows it.
    fn check_header(
        &self,
        header: &RecordHeader,
        version: u32,
        start: Lsn,
    ) -> Result<std::result::Result<(), Invalid>> {
        let body_start = self.files.geo.page_start(start) + PAGE_HEADER_LEN as u64;
        let seal = Seal::new(self.files.mode, self.files.log_id, self.files.geo);
        match seal.check_header(header, version, start == body_start) {
            Ok(()) => Ok(Ok(())),
            Err(Disagreement::Header(what)) => Ok(Err(invalid(
                start,
                start,
                CorruptionKind::BadRecordHeader(what),
            ))),
            Err(Disagreement::Control(what)) => Err(self.control_corrupt(start, what)),
            Err(Disagreement::Unauthenticated) => Err(Error::AuthenticationFailed {
                at: self.position_of(start),
                key_id: header.encryption.map_or(0, |(id, _)| id),
            }),
        }
    }

    /// Corruption of the control record at `start`.
    fn control_corrupt(&self, start: Lsn, what: &'static str) -> Error {
        Error::Corrupt {
            at: self.position_of(start),
            kind: CorruptionKind::BadControlRecord(what),
        }
    }

    /// Segment, offset and LSN of a record starting at `start`.
    fn position_of(&self, start: Lsn) -> Position {
        Position::of(&self.files.geo, start)
    }

    fn read_record(&mut self, start: Lsn) -> Try<Stored> {
        let mut pos = start;
        let mut head = [0u8; format::RECORD_HEADER_ENCRYPTED];
        let hlen = match self.header_in_loaded_page(start, &mut head) {
            Some(hlen) => {
                pos += hlen as u64;
                hlen
            }
            None => match self.read_header(&mut pos, &mut head, start)? {
                Ok(hlen) => hlen,
                Err(inv) => return Ok(Err(inv)),
            },
        };
        let header = match RecordHeader::decode(&head[..hlen]) {
            Ok(h) => h,
            Err(what) => {
                return Ok(Err(invalid(
                    start,
                    start,
                    CorruptionKind::BadRecordHeader(what),
                )));
            }
        };
        let total = (hlen + header.len as usize) as u64;
        let segment = self.files.geo.segment_start(start);
        let version = self.version_of(segment);
        // A record whose CRC (and, authenticated, tag) the prefetcher verified over these header
        // bytes and the payload of the same pages: the cursor still walks its pages (page
        // loads, continuation lengths) but leaves the bytes where they are and takes the
        // decrypted payload below.
        let ahead = header.encryption.is_some()
            && self
                .feed
                .as_mut()
                .is_some_and(|feed| feed.verified(start, &head[..hlen]));
        let mut stored = Vec::new();
        if ahead {
            let len = header.len as usize;
            if let Err(inv) = self.pass_over(&mut pos, len, start, hlen, total)? {
                return Ok(Err(inv));
            }
        } else if let Err(inv) = self.read_payload(
            &mut pos,
            &head[..hlen],
            (&header, version),
            start,
            &mut stored,
        )? {
            return Ok(Err(inv));
        }
        if let Err(inv) = self.check_header(&header, version, start)? {
            return Ok(Err(inv));
        }
        if let Some((key_id, _)) = header.encryption
            && self.listed != Some((segment, key_id))
        {
            self.files.check_key_listed(key_id, start)?;
            self.listed = Some((segment, key_id));
        }
        let mut header = header;
        if let Some(feed) = self.feed.as_mut()
            && header.encryption.is_some()
        {
            let head = &head[..hlen];
            // An authenticated record's payload comes from the feed only opened (its tag
            // checked there), never as a keystream.
            if ahead {
                if !feed.take_plaintext(start, head, &mut stored) {
                    // Not reached: nothing since `verified` drops what the feed holds for this
                    // record. Should it happen, the record is read again without the feed.
                    let feed = self.feed.take();
                    let again = self.read_record(start);
                    self.feed = feed;
                    return again;
                }
                header.encryption = None;
            } else if header.flags & RECORD_FLAG_AUTHENTICATED == 0
                && feed.decrypt(start, head, &mut stored)
            {
                header.encryption = None;
            }
        }
        Ok(Ok(Stored {
            lsn: start,
            end_lsn: pos,
            header,
            stored,
            log_id: self.files.log_id,
            geo: self.files.geo,
            version,
            at: Position::of(&self.files.geo, start),
        }))
    }

    /// The header of the record at `start` copied into `head` when it lies wholly inside the
    /// body of the page loaded last, past its first byte (what [`Cursor::read_header`] would
    /// copy without loading a page or skipping a header); returns its length.
    fn header_in_loaded_page(
        &self,
        start: Lsn,
        head: &mut [u8; format::RECORD_HEADER_ENCRYPTED],
    ) -> Option<usize> {
        let p = self.page.as_ref()?;
        let end = p.lsn + self.files.geo.page_size;
        if start <= p.lsn + PAGE_HEADER_LEN as u64 || start + RECORD_HEADER_PLAIN as u64 > end {
            return None;
        }
        let at = (start - p.lsn) as usize;
        let hlen = format::header_len_for_flags(p.image[at + format::REC_FLAGS_AT]);
        if start + hlen as u64 > end {
            return None;
        }
        head[..hlen].copy_from_slice(&p.image[at..at + hlen]);
        Some(hlen)
    }

    /// Reads the header of the record at `start` into `head`, loading pages as needed;
    /// returns its length.
    fn read_header(
        &mut self,
        pos: &mut Lsn,
        head: &mut [u8; format::RECORD_HEADER_ENCRYPTED],
        start: Lsn,
    ) -> Try<usize> {
        if let Err(inv) = self.read_into(pos, &mut head[..RECORD_HEADER_PLAIN], start, 0, None)? {
            return Ok(Err(inv));
        }
        let hlen = format::header_len_for_flags(head[format::REC_FLAGS_AT]);
        if hlen > RECORD_HEADER_PLAIN
            && let Err(inv) = self.read_into(
                pos,
                &mut head[RECORD_HEADER_PLAIN..hlen],
                start,
                RECORD_HEADER_PLAIN,
                None,
            )?
        {
            return Ok(Err(inv));
        }
        Ok(Ok(hlen))
    }

    /// The format version of the segment starting at `segment`, looked up once per segment.
    fn version_of(&mut self, segment: Lsn) -> u32 {
        match self.version {
            Some((s, version)) if s == segment => version,
            _ => {
                let version = self.files.version_at(segment);
                self.version = Some((segment, version));
                version
            }
        }
    }

    /// Reads the payload of the record at `start` (header bytes `head`, decoded as `header`,
    /// in a segment of format `version`) into `stored` and checks the record's CRC.
    fn read_payload(
        &mut self,
        pos: &mut Lsn,
        head: &[u8],
        (header, version): (&RecordHeader, u32),
        start: Lsn,
        stored: &mut Vec<u8>,
    ) -> Try<()> {
        let total = (head.len() + header.len as usize) as u64;
        // Grow the payload as pages are actually read, so an absurd length never allocates
        // more than the files hold.
        let mut left = header.len as usize;
        let mut consumed = head.len();
        while left > 0 {
            let chunk = left.min(self.files.geo.body_len() as usize);
            let at = stored.len();
            stored.resize(at + chunk, 0);
            if let Err(inv) =
                self.read_into(pos, &mut stored[at..], start, consumed, Some(total))?
            {
                return Ok(Err(inv));
            }
            left -= chunk;
            consumed += chunk;
        }
        let crc = format::record_crc(version, start, head, stored);
        if crc != header.crc {
            let kind = CorruptionKind::RecordChecksum {
                expected: header.crc,
                got: crc,
            };
            return Ok(Err(invalid(start, start, kind)));
        }
        Ok(Ok(()))
    }

    /// Copies `out.len()` stream bytes from `*pos`, loading pages as needed. `consumed` is how
    /// many bytes of the record at `record` came before; `total`, when known, lets page
    /// continuation lengths be checked.
    fn read_into(
        &mut self,
        pos: &mut Lsn,
        out: &mut [u8],
        record: Lsn,
        consumed: usize,
        total: Option<u64>,
    ) -> Try<()> {
        let len = out.len();
        self.walk_bytes(pos, len, Some(out), record, consumed, total)
    }

    /// Moves `*pos` over `len` payload bytes of the record at `record` as [`Cursor::read_into`]
    /// would read them (the same page loads and checks, in the same order), without copying.
    fn pass_over(
        &mut self,
        pos: &mut Lsn,
        len: usize,
        record: Lsn,
        consumed: usize,
        total: u64,
    ) -> Try<()> {
        self.walk_bytes(pos, len, None, record, consumed, Some(total))
    }

    /// Walks `len` stream bytes from `*pos`, loading pages as needed, and copies them into
    /// `out` if there is one. `consumed` is how many bytes of the record at `record` came
    /// before; `total`, when known, lets page continuation lengths be checked.
    fn walk_bytes(
        &mut self,
        pos: &mut Lsn,
        len: usize,
        mut out: Option<&mut [u8]>,
        record: Lsn,
        consumed: usize,
        total: Option<u64>,
    ) -> Try<()> {
        let geo = self.files.geo;
        let mut done = 0;
        while done < len {
            let page = match self.page.as_ref() {
                // Inside the body of the page loaded last, past its first byte: no header to
                // skip, and no division to find the page (the common case, once per field).
                Some(p)
                    if *pos > p.lsn + PAGE_HEADER_LEN as u64 && *pos < p.lsn + geo.page_size =>
                {
                    p.lsn
                }
                _ => {
                    *pos = geo.skip_headers(*pos);
                    geo.page_start(*pos)
                }
            };
            let fresh_page = *pos == page + PAGE_HEADER_LEN as u64;
            let loaded = match self.load_page(page, record)? {
                Ok(p) => p,
                Err(inv) => return Ok(Err(inv)),
            };
            let so_far = (consumed + done) as u64;
            if fresh_page
                && so_far > 0
                && let Some(total) = total
                && loaded.header.rem_len as u64 != total - so_far
            {
                return Ok(Err(invalid(
                    record,
                    page,
                    CorruptionKind::ContinuationMismatch {
                        expected: total - so_far,
                        got: loaded.header.rem_len as u64,
                    },
                )));
            }
            let in_page = (*pos - page) as usize;
            let n = (len - done).min(geo.page_size as usize - in_page);
            if let Some(out) = out.as_deref_mut() {
                out[done..done + n].copy_from_slice(&loaded.image[in_page..in_page + n]);
            }
            done += n;
            *pos += n as u64;
        }
        Ok(Ok(()))
    }

    fn load_page(&mut self, page: Lsn, record: Lsn) -> Try<&LoadedPage> {
        if self.page.as_ref().is_some_and(|p| p.lsn == page) {
            return Ok(Ok(self.page.as_ref().expect("checked just above")));
        }
        if let Some(feed) = self.feed.as_mut()
            && let Some(fetched) = feed.take(page)
        {
            if let Some(old) = self.page.take() {
                feed.give_back(old.image);
            }
            let mut image = fetched.image;
            if fetched.encrypted {
                self.decrypt_page_body(&fetched.header, &mut image)?;
            }
            return Ok(Ok(self.page.insert(LoadedPage {
                lsn: fetched.lsn,
                header: fetched.header,
                image,
            })));
        }
        let geo = self.files.geo;
        let seg_start = geo.segment_start(page);
        let Some(seg) = self.files.segment(seg_start) else {
            let kind = if seg_start < self.files.end_of_files() {
                CorruptionKind::MissingSegment
            } else {
                CorruptionKind::Truncated
            };
            return Ok(Err(invalid(record, page, kind)));
        };
        if self.file.as_ref().is_none_or(|(s, _)| *s != seg_start) {
            let file = self
                .files
                .storage
                .open(&seg.path, false)
                .map_err(|e| Error::io("open segment", &seg.path, e))?;
            self.file = Some((seg_start, file));
        }
        let (_, file) = self.file.as_ref().expect("opened just above");
        let mut image = self.page.take().map(|p| p.image).unwrap_or_default();
        image.resize(geo.page_size as usize, 0);
        let n = match self.ahead.as_mut() {
            Some(ahead) => ahead.read(file.as_ref(), seg_start, page - seg_start, &mut image),
            None => read_full(file.as_ref(), &mut image, page - seg_start),
        }
        .map_err(|e| Error::io("read page", &seg.path, e))?;
        // Bytes past the end of a shortened file read as never written (zeros): records
        // wholly before the cut stay readable, the rest fail their checksums.
        image[n..].fill(0);
        let header = match check_page_header(self.files.log_id, self.files.mode, page, &image) {
            Ok(header) => header,
            Err(kind) => return Ok(Err(invalid(record, page, kind))),
        };
        let encrypted = header.flags & PAGE_FLAG_ENCRYPTED != 0;
        if encrypted {
            self.files.check_key_listed(header.key_id, page)?;
            self.decrypt_page_body(&header, &mut image)?;
        }
        self.page = Some(LoadedPage {
            lsn: page,
            header,
            image,
        });
        Ok(Ok(self.page.as_ref().expect("stored just above")))
    }

    /// Decrypts the pagelevel body of the page `image` (whose header is `header`) in place.
    fn decrypt_page_body(&self, header: &PageHeader, image: &mut [u8]) -> Result<()> {
        seal::open_page(self.files.keys.as_deref(), header, image)
            .map_err(|e| e.located(Position::of(&self.files.geo, header.page_lsn)))
    }

    /// The decrypted image of the page at `page`, if it is the page last loaded.
    pub(crate) fn loaded_page(&self, page: Lsn) -> Option<(&PageHeader, &[u8])> {
        self.page
            .as_ref()
            .filter(|p| p.lsn == page)
            .map(|p| (&p.header, p.image.as_slice()))
    }

    /// Loads the page at `page` (for recovery, to keep the valid prefix of the tail page).
    pub(crate) fn load(&mut self, page: Lsn) -> Result<bool> {
        Ok(self.load_page(page, page)?.is_ok())
    }
}

/// The record boundary where reading from `lsn` starts: the first record of the oldest
/// segment for `Lsn(0)` or the oldest segment's start, else `lsn` itself once checked. A
/// record's `end_lsn` that falls on a page or segment boundary starts the next record after
/// the headers there; the end of the last segment file is where the log goes on.
///
/// The first record of the oldest segment comes from its first page's continuation length,
/// which carries no tag: [`first_record_in_segment`] checks it against the pages it runs over
/// and, in perrecord-gcm, against a record sealed at the page's first body position, so a
/// length rewritten there cannot move a reader past records after the position it asked for.
pub(crate) fn record_start(files: &LogFiles, lsn: Lsn) -> Result<Lsn> {
    record_start_reached(files, lsn).map(|(pos, _)| pos)
}

/// [`record_start`], and whether the log reaches the position yet: false when it lies past
/// the valid records the files hold, where whether a record will start there is not known
/// until the log reaches it ([`reached_record_start`] tells then).
pub(crate) fn record_start_reached(files: &LogFiles, lsn: Lsn) -> Result<(Lsn, bool)> {
    let oldest = files.segments.first().map_or(Lsn(0), |s| s.header.start);
    if lsn == Lsn(0) || lsn == oldest {
        let first = first_record_in_segment(files, oldest)?;
        return Ok((
            first.unwrap_or_else(|| files.geo.skip_headers(oldest)),
            true,
        ));
    }
    // Past the files, a position in the segment right after the last is one the writer may
    // have handed out already (a log ending on the boundary, a pagelevel writer resuming on a
    // fresh page there): the log goes on there once that segment is made. Farther is not the log.
    if lsn < oldest {
        return Err(Error::Purged {
            needed: lsn,
            oldest,
        });
    }
    let files_end = files.end_of_files();
    let farthest = files_end.saturating_add(files.geo.segment_size);
    if lsn >= farthest {
        return Err(Error::LsnNotAvailable { lsn, end: farthest });
    }
    let pos = files.geo.skip_headers(lsn);
    let reached = pos < files.end_of_files() && reached_record_start(files, pos)?;
    Ok((pos, reached))
}

/// Checks that `pos` is where a record starts, by walking from the first record boundary of
/// its page (the page header's continuation length says where that is). Positions in a
/// part of the log not written yet are left for the iteration to end at.
pub(crate) fn check_record_start(files: &LogFiles, pos: Lsn) -> Result<()> {
    reached_record_start(files, pos).map(|_| ())
}

/// [`check_record_start`], saying whether the walk reached `pos` (true: a record starts
/// there, or the valid log ends exactly there) or ended before it, in a part of the log not
/// written yet (false). [`Error::NotRecordStart`] when `pos` lies inside a record or headers.
pub(crate) fn reached_record_start(files: &LogFiles, pos: Lsn) -> Result<bool> {
    let geo = files.geo;
    let not_a_record = || Error::NotRecordStart(pos);
    let page = geo.page_start(pos);
    let body = page + PAGE_HEADER_LEN as u64;
    if geo.is_header_page(page) || pos < body {
        return Err(not_a_record());
    }
    let Some(header) = files.read_page_header(page)? else {
        return Ok(false);
    };
    let at = geo.advance(body, header.rem_len as u64);
    if geo.skip_headers(at) > pos {
        // Inside the part of a record the page continues from the one before.
        return Err(not_a_record());
    }
    let mut cursor = Cursor::new(files, at);
    // The cursor steps over switch and resume records without returning them, and over the
    // unwritten rest of a page a pagelevel writer resumed after: every position it looked for
    // a record at is a boundary, the end of such a control record or stretch included (a
    // checkpoint taken at `end_lsn()` right after a resume record, before the writer resumed
    // again on the next page, is one).
    cursor.looked_at = Some(Vec::new());
    loop {
        let step = cursor.next()?;
        let looked_at = cursor.looked_at.replace(Vec::new()).unwrap_or_default();
        if looked_at.contains(&pos) {
            return Ok(true);
        }
        match step {
            Step::Record(stored) if stored.end_lsn <= pos => {}
            Step::Record(_) => return Err(not_a_record()),
            Step::End(_) => return Ok(false),
        }
    }
}

/// The first record boundary of the segment at `start`, as [`LogFiles::first_record_in_segment`]
/// finds it from its first page's continuation length, checked against the pages it runs
/// over. In perrecord-gcm also against the record at the page's first body position: one
/// whose tag checks was sealed there by the key's holder, so nothing continued into the
/// page, and a continuation length there is `ContinuationMismatch`.
pub(crate) fn first_record_in_segment(files: &LogFiles, start: Lsn) -> Result<Option<Lsn>> {
    let first = files.first_record_in_segment(start)?;
    let body = files.geo.skip_headers(start);
    if let Some(first) = first
        && first != body
        && files.mode == Mode::PerRecordGcm
        && authenticated_record_at(files, body)?
    {
        let page = files.geo.page_start(body);
        let got = files
            .read_page_header(page)?
            .map_or(0, |header| header.rem_len.into());
        return Err(files.position_error(
            page,
            page,
            CorruptionKind::ContinuationMismatch { expected: 0, got },
        ));
    }
    Ok(first)
}

/// Whether a record whose checksum and tag check starts at `at` (perrecord-gcm): one that
/// the key's holder sealed at that LSN. Anything else there (no record, damage, a failed tag)
/// is `false`; the payload decrypted to check the tag is wiped.
fn authenticated_record_at(files: &LogFiles, at: Lsn) -> Result<bool> {
    let Some(keys) = files.keys.as_deref() else {
        return Ok(false);
    };
    match Cursor::new(files, at).next() {
        Ok(Step::Record(stored)) if stored.lsn == at => genuine(stored, keys),
        Ok(Step::Record(stored)) => {
            stored.discard();
            Ok(false)
        }
        Ok(Step::End(_)) => Ok(false),
        Err(e) if is_damage(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `stored`'s tag checks (perrecord-gcm; the checksum was checked as it was read), its
/// payload wiped either way.
fn genuine(mut stored: Stored, keys: &Keys) -> Result<bool> {
    let genuine = stored.authenticate(keys)?;
    stored.discard();
    Ok(genuine)
}

/// Damage a read met (a checksum, a tag or a structure that does not check), as opposed to a
/// failure to read at all.
fn is_damage(error: &Error) -> bool {
    matches!(
        error,
        Error::Corrupt { .. } | Error::AuthenticationFailed { .. }
    )
}

/// Whether the records from the boundary `from` on, each checked whole (checksum and, in
/// perrecord-gcm, tag), lead to a record boundary at `to`: the log runs on from `from` to
/// `to` as its writer wrote it. Damage, a failed tag or the end of the log before `to` is
/// `false`, as is a walk that steps over `to`. Payloads decrypted on the way are wiped.
pub(crate) fn authenticated_walk_reaches(
    files: &LogFiles,
    keys: &Keys,
    from: Lsn,
    to: Lsn,
) -> Result<bool> {
    let mut cursor = Cursor::new(files, from);
    cursor.looked_at = Some(Vec::new());
    loop {
        let step = cursor.next();
        let looked_at = cursor.looked_at.replace(Vec::new()).unwrap_or_default();
        // `to` may be a page boundary (a continuation that fills its page exactly): the
        // cursor looks for the next record past the headers there.
        if looked_at.contains(&files.geo.skip_headers(to)) {
            return Ok(true);
        }
        match step {
            Ok(Step::Record(stored)) if stored.end_lsn <= to => {
                if !genuine(stored, keys)? {
                    return Ok(false);
                }
            }
            Ok(Step::Record(stored)) => {
                stored.discard();
                return Ok(false);
            }
            Ok(Step::End(_)) => return Ok(false),
            // Damage the walk cannot read past: the scan from further back meets it.
            Err(e) if is_damage(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

fn invalid(lsn: Lsn, at: Lsn, kind: CorruptionKind) -> Invalid {
    Invalid { lsn, at, kind }
}
