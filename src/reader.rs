//! Sequential reading across segments: page validation, decryption and record parsing.
//!
//! [`Reader`] is the public face; the [`Cursor`] underneath is shared with crash recovery,
//! so the reader and recovery agree byte for byte on what a valid record is.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::Lsn;
use crate::config::Mode;
use crate::crypto::{KeyRing, Keys};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::{
    self, Geometry, HeaderError, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, PageHeader,
    RECORD_FLAG_SWITCH, RECORD_HEADER_PLAIN, RecordHeader, SegmentHeader,
};
use crate::storage::{FsStorage, Storage, StorageFile};

/// One record as the embedder appended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Where the record starts; what `append` returned for it.
    pub lsn: Lsn,
    /// Where the next record starts.
    pub end_lsn: Lsn,
    /// The embedder's record type.
    pub kind: u8,
    /// The payload, decrypted.
    pub payload: Vec<u8>,
}

/// A record as stored, for inspection tools: header fields, stored bytes and, when the key was
/// available, the decrypted payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// Where the record starts.
    pub lsn: Lsn,
    /// Where the next record starts.
    pub end_lsn: Lsn,
    /// The decoded record header.
    pub header: RecordHeader,
    /// The payload as stored on disk (ciphertext in perrecord; plaintext in the other modes,
    /// since pagelevel pages are decrypted before records are parsed).
    pub stored: Vec<u8>,
    /// The plaintext payload: `Some` unless the payload is encrypted and its key is missing.
    pub payload: Option<Vec<u8>>,
}

/// A segment file of the log and its header.
#[derive(Debug, Clone)]
pub struct SegmentInfo {
    /// Path of the file.
    pub path: PathBuf,
    /// The decoded segment header.
    pub header: SegmentHeader,
}

/// A page header as found on disk, for inspection tools.
#[derive(Debug, Clone)]
pub struct PageInfo {
    /// Start LSN of the segment holding the page.
    pub segment: Lsn,
    /// Byte offset of the page in its segment file.
    pub offset: u64,
    /// The expected page address.
    pub page_lsn: Lsn,
    /// The decoded header, `None` when the page holds no valid header (never written, torn,
    /// or damaged).
    pub header: Option<PageHeader>,
}

/// What a log directory holds: its segments, geometry and keys.
pub(crate) struct LogFiles {
    pub(crate) dir: PathBuf,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) mode: Mode,
    pub(crate) geo: Geometry,
    pub(crate) log_id: u64,
    pub(crate) keys: Option<Arc<Keys>>,
    pub(crate) segments: Vec<SegmentInfo>,
}

/// Lists the segment files in `dir`, sorted by start LSN.
pub(crate) fn list_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<Lsn>> {
    let names = storage
        .list(dir)
        .map_err(|e| Error::io("list log directory", dir, e))?;
    let mut starts: Vec<Lsn> = names
        .iter()
        .filter_map(|n| format::parse_segment_file_name(n))
        .collect();
    starts.sort();
    Ok(starts)
}

/// Reads and checks the header of the segment file at `path`, named as starting at `start`.
pub(crate) fn read_segment_header(
    storage: &dyn Storage,
    path: &Path,
    start: Lsn,
) -> Result<SegmentHeader> {
    let file = storage
        .open(path, false)
        .map_err(|e| Error::io("open segment", path, e))?;
    // The fixed part says how many key check values follow; read exactly that much.
    let mut buf = vec![0u8; format::SEGMENT_HEADER_FIXED];
    let mut n = read_full(file.as_ref(), &mut buf, 0)
        .map_err(|e| Error::io("read segment header", path, e))?;
    if n == buf.len() {
        let keys = u16::from_le_bytes([buf[14], buf[15]]) as usize;
        buf.resize(
            format::SEGMENT_HEADER_FIXED + keys * format::KCV_ENTRY + 4,
            0,
        );
        n += read_full(file.as_ref(), &mut buf[n..], n as u64)
            .map_err(|e| Error::io("read segment header", path, e))?;
    }
    let header = SegmentHeader::decode(&buf[..n]).map_err(|e| match e {
        HeaderError::Version(found) => Error::UnsupportedVersion {
            path: path.to_path_buf(),
            found,
            supported: format::FORMAT_VERSION,
        },
        HeaderError::Corrupt(kind) => Error::corrupt(start, 0, start, kind),
    })?;
    if header.start != start {
        return Err(Error::corrupt(
            start,
            0,
            start,
            CorruptionKind::SegmentAddress {
                expected: start,
                got: header.start,
            },
        ));
    }
    Ok(header)
}

/// Reads as much of `buf` as the file holds at `offset`.
pub(crate) fn read_full(
    file: &dyn StorageFile,
    buf: &mut [u8],
    offset: u64,
) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

impl LogFiles {
    /// Opens the segments of `dir` and checks that they form one log and that every key in
    /// `ring` matches the check values recorded for its id.
    pub(crate) fn open(
        dir: &Path,
        storage: Arc<dyn Storage>,
        ring: Option<&KeyRing>,
    ) -> Result<LogFiles> {
        let starts = list_segments(storage.as_ref(), dir)?;
        if starts.is_empty() {
            return Err(Error::NoLog(dir.to_path_buf()));
        }
        let mut segments = Vec::with_capacity(starts.len());
        for start in starts {
            let path = dir.join(format::segment_file_name(start));
            let header = read_segment_header(storage.as_ref(), &path, start)?;
            segments.push(SegmentInfo { path, header });
        }
        let first = segments[0].header.clone();
        for (seg, expected) in segments[1..].iter().zip(
            segments
                .iter()
                .map(|s| u64::from(s.header.start) + first.geometry.segment_size),
        ) {
            let h = &seg.header;
            if h.log_id != first.log_id {
                return Err(Error::corrupt(
                    h.start,
                    0,
                    h.start,
                    CorruptionKind::ForeignSegment {
                        expected: first.log_id,
                        got: h.log_id,
                    },
                ));
            }
            if h.mode != first.mode || h.geometry != first.geometry {
                return Err(Error::corrupt(
                    h.start,
                    0,
                    h.start,
                    CorruptionKind::SegmentHeaderField(
                        "mode or geometry differs from the first segment",
                    ),
                ));
            }
            if u64::from(h.start) != expected {
                // Segments are created in order and purged oldest first: a gap is damage.
                return Err(Error::corrupt(
                    Lsn(expected),
                    0,
                    Lsn(expected),
                    CorruptionKind::MissingSegment,
                ));
            }
            if u64::from(h.start) % first.geometry.segment_size != 0 {
                return Err(Error::corrupt(
                    h.start,
                    0,
                    h.start,
                    CorruptionKind::SegmentHeaderField(
                        "start is not a multiple of the segment size",
                    ),
                ));
            }
        }
        let keys = ring.map(|r| Arc::new(Keys::new(r)));
        if let Some(keys) = &keys {
            check_keys(keys, &segments)?;
        }
        Ok(LogFiles {
            dir: dir.to_path_buf(),
            storage,
            mode: first.mode,
            geo: first.geometry,
            log_id: first.log_id,
            keys,
            segments,
        })
    }

    pub(crate) fn segment(&self, start: u64) -> Option<&SegmentInfo> {
        self.segments
            .binary_search_by_key(&start, |s| u64::from(s.header.start))
            .ok()
            .map(|i| &self.segments[i])
    }

    /// The end of the last segment file: nothing of this log lies beyond.
    pub(crate) fn end_of_files(&self) -> u64 {
        self.segments
            .last()
            .map(|s| u64::from(s.header.start) + self.geo.segment_size)
            .unwrap_or(0)
    }

    /// The first record boundary in the segment that starts at `start`, if page 1's header is
    /// valid (its continuation length says how far the previous segment's last record runs).
    pub(crate) fn first_record_in_segment(&self, start: u64) -> Result<Option<u64>> {
        let page = start + self.geo.page_size;
        let Some(header) = self.read_page_header(page)? else {
            return Ok(None);
        };
        Ok(Some(self.geo.advance(
            self.geo.first_body_position(page),
            header.rem_len as u64,
        )))
    }

    /// Reads and checks the header of the page at `page`; `None` when it is not valid.
    pub(crate) fn read_page_header(&self, page: u64) -> Result<Option<PageHeader>> {
        let seg_start = self.geo.segment_start(page);
        let Some(seg) = self.segment(seg_start) else {
            return Ok(None);
        };
        let file = self
            .storage
            .open(&seg.path, false)
            .map_err(|e| Error::io("open segment", &seg.path, e))?;
        let mut buf = [0u8; PAGE_HEADER_LEN];
        let n = read_full(file.as_ref(), &mut buf, page - seg_start)
            .map_err(|e| Error::io("read page header", &seg.path, e))?;
        Ok(PageHeader::decode(self.log_id, &buf[..n]).filter(|h| u64::from(h.page_lsn) == page))
    }

    /// Every page header from `from_page` to the end of the files, in order.
    pub(crate) fn page_headers_from(&self, from_page: u64) -> Result<Vec<PageInfo>> {
        let mut out = Vec::new();
        let mut buf = [0u8; PAGE_HEADER_LEN];
        for seg in &self.segments {
            let start = u64::from(seg.header.start);
            if start + self.geo.segment_size <= from_page {
                continue;
            }
            let file = self
                .storage
                .open(&seg.path, false)
                .map_err(|e| Error::io("open segment", &seg.path, e))?;
            let len = file
                .file_len()
                .map_err(|e| Error::io("stat segment", &seg.path, e))?;
            let mut offset = self.geo.page_size.max(from_page.saturating_sub(start));
            while offset < self.geo.segment_size && offset < len {
                let n = read_full(file.as_ref(), &mut buf, offset)
                    .map_err(|e| Error::io("read page header", &seg.path, e))?;
                let page_lsn = start + offset;
                let header = PageHeader::decode(self.log_id, &buf[..n])
                    .filter(|h| u64::from(h.page_lsn) == page_lsn);
                out.push(PageInfo {
                    segment: Lsn(start),
                    offset,
                    page_lsn: Lsn(page_lsn),
                    header,
                });
                offset += self.geo.page_size;
            }
        }
        Ok(out)
    }

    /// Decides what an invalid record at `lsn` means. A valid page at or after the page
    /// holding `lsn` whose durable hint lies beyond `lsn` was written after the record had been
    /// made durable: the record was complete once, so this is corruption, never a torn tail.
    /// That includes the pages the record itself was read from: a crash cannot damage bytes
    /// that were durable before a page was rewritten, except by tearing a pagelevel rewrite
    /// (the new header over old sectors), which must be reported, not truncated away.
    /// Otherwise the record is the torn tail of a crash, the end of the log.
    pub(crate) fn classify(&self, invalid: Invalid) -> Result<Option<Error>> {
        let start_page = self.geo.page_start(invalid.lsn);
        for page in self.page_headers_from(start_page)? {
            if let Some(h) = page.header
                && u64::from(h.durable_hint) > invalid.lsn
            {
                return Ok(Some(self.position_error(
                    invalid.at,
                    invalid.lsn,
                    invalid.kind,
                )));
            }
        }
        Ok(None)
    }

    /// Checks that `pos` is where a record starts, by walking from the first record boundary of
    /// its page (the page header's continuation length says where that is). Positions in a
    /// part of the log not written yet are left for the iteration to end at.
    pub(crate) fn check_record_start(&self, pos: u64) -> Result<()> {
        let geo = self.geo;
        let not_a_record = || Error::NotRecordStart(Lsn(pos));
        let page = geo.page_start(pos);
        let body = page + PAGE_HEADER_LEN as u64;
        if geo.is_header_page(page) || pos < body {
            return Err(not_a_record());
        }
        let Some(header) = self.read_page_header(page)? else {
            return Ok(());
        };
        let mut at = geo.advance(body, header.rem_len as u64);
        let mut cursor = Cursor::new(self, at);
        while geo.skip_headers(at) < pos {
            match cursor.next()? {
                Step::Record(stored) => at = u64::from(stored.end_lsn),
                Step::End(_) => return Ok(()),
            }
        }
        if geo.skip_headers(at) == pos {
            Ok(())
        } else {
            Err(not_a_record())
        }
    }

    pub(crate) fn position_error(&self, at: u64, lsn: u64, kind: CorruptionKind) -> Error {
        let segment = self.geo.segment_start(at);
        Error::corrupt(Lsn(segment), at - segment, Lsn(lsn), kind)
    }
}

fn check_keys(keys: &Keys, segments: &[SegmentInfo]) -> Result<()> {
    for seg in segments {
        for (id, kcv) in &seg.header.key_checks {
            if let Some(mine) = keys.check_value(*id)
                && mine != *kcv
            {
                return Err(Error::WrongKey {
                    key_id: *id,
                    segment: seg.header.start,
                });
            }
        }
    }
    Ok(())
}

/// Why reading stopped before a complete, valid record.
#[derive(Debug, Clone)]
pub(crate) struct Invalid {
    /// Start of the record that could not be read: the end of the valid log if this is a tail.
    pub(crate) lsn: u64,
    /// Where the problem was found.
    pub(crate) at: u64,
    pub(crate) kind: CorruptionKind,
}

/// A valid record as stored: for perrecord logs the payload is still ciphertext.
pub(crate) struct Stored {
    pub(crate) lsn: Lsn,
    pub(crate) end_lsn: Lsn,
    pub(crate) header: RecordHeader,
    pub(crate) stored: Vec<u8>,
}

impl Stored {
    /// Decrypts the payload in place (perrecord); afterwards it is plaintext.
    pub(crate) fn decrypt(&mut self, keys: Option<&Keys>) -> Result<()> {
        if let Some((key_id, iv)) = self.header.encryption.take() {
            keys.ok_or(Error::MissingKey(key_id))?.apply_keystream(
                key_id,
                &iv,
                &mut self.stored,
            )?;
        }
        Ok(())
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
    lsn: u64,
    header: PageHeader,
    image: Vec<u8>,
}

/// Walks the record stream from a record boundary.
pub(crate) struct Cursor<'a> {
    files: &'a LogFiles,
    pos: u64,
    page: Option<LoadedPage>,
    file: Option<(u64, Box<dyn StorageFile>)>,
}

/// Result of trying to read bytes: `Err` is a hard error (I/O, missing key), `Ok(Err)` a place
/// where the log is not valid.
type Try<T> = Result<std::result::Result<T, Invalid>>;

impl<'a> Cursor<'a> {
    pub(crate) fn new(files: &'a LogFiles, pos: u64) -> Cursor<'a> {
        Cursor {
            files,
            pos,
            page: None,
            file: None,
        }
    }

    /// Reads the next record as stored. Segment-switch records are followed, never returned.
    pub(crate) fn next(&mut self) -> Result<Step> {
        loop {
            let start = self.files.geo.skip_headers(self.pos);
            match self.read_record(start)? {
                Ok(rec) if rec.header.flags & RECORD_FLAG_SWITCH != 0 => {
                    let next_segment =
                        self.files.geo.segment_start(start) + self.files.geo.segment_size;
                    self.pos = next_segment;
                }
                Ok(rec) => {
                    self.pos = u64::from(rec.end_lsn);
                    return Ok(Step::Record(rec));
                }
                Err(invalid) => return Ok(Step::End(invalid)),
            }
        }
    }

    fn read_record(&mut self, start: u64) -> Try<Stored> {
        let mut pos = start;
        let mut head = [0u8; format::RECORD_HEADER_ENCRYPTED];
        if let Err(inv) =
            self.read_into(&mut pos, &mut head[..RECORD_HEADER_PLAIN], start, 0, None)?
        {
            return Ok(Err(inv));
        }
        let hlen = format::header_len_for_flags(head[9]);
        if hlen > RECORD_HEADER_PLAIN
            && let Err(inv) = self.read_into(
                &mut pos,
                &mut head[RECORD_HEADER_PLAIN..hlen],
                start,
                RECORD_HEADER_PLAIN,
                None,
            )?
        {
            return Ok(Err(inv));
        }
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
        // Grow the payload as pages are actually read, so an absurd length never allocates
        // more than the files hold.
        let mut stored = Vec::new();
        let mut left = header.len as usize;
        let mut consumed = hlen;
        while left > 0 {
            let chunk = left.min(self.files.geo.body_len() as usize);
            let at = stored.len();
            stored.resize(at + chunk, 0);
            if let Err(inv) =
                self.read_into(&mut pos, &mut stored[at..], start, consumed, Some(total))?
            {
                return Ok(Err(inv));
            }
            left -= chunk;
            consumed += chunk;
        }
        let crc = format::record_crc(&head[..hlen], &stored);
        if crc != header.crc {
            let kind = CorruptionKind::RecordChecksum {
                expected: header.crc,
                got: crc,
            };
            return Ok(Err(invalid(start, start, kind)));
        }
        if header.encryption.is_some()
            != (self.files.mode == Mode::PerRecord && header.flags & RECORD_FLAG_SWITCH == 0)
        {
            return Ok(Err(invalid(
                start,
                start,
                CorruptionKind::BadRecordHeader("encryption flag does not match the log's mode"),
            )));
        }
        Ok(Ok(Stored {
            lsn: Lsn(start),
            end_lsn: Lsn(pos),
            header,
            stored,
        }))
    }

    /// Copies `out.len()` stream bytes from `*pos`, loading pages as needed. `consumed` is how
    /// many bytes of the record at `record` came before; `total`, when known, lets page
    /// continuation lengths be checked.
    fn read_into(
        &mut self,
        pos: &mut u64,
        out: &mut [u8],
        record: u64,
        consumed: usize,
        total: Option<u64>,
    ) -> Try<()> {
        let geo = self.files.geo;
        let mut done = 0;
        while done < out.len() {
            *pos = geo.skip_headers(*pos);
            let page = geo.page_start(*pos);
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
            let n = (out.len() - done).min(geo.page_size as usize - in_page);
            out[done..done + n].copy_from_slice(&loaded.image[in_page..in_page + n]);
            done += n;
            *pos += n as u64;
        }
        Ok(Ok(()))
    }

    fn load_page(&mut self, page: u64, record: u64) -> Try<&LoadedPage> {
        if self.page.as_ref().is_some_and(|p| p.lsn == page) {
            return Ok(Ok(self.page.as_ref().expect("checked just above")));
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
        let n = read_full(file.as_ref(), &mut image, page - seg_start)
            .map_err(|e| Error::io("read page", &seg.path, e))?;
        // Bytes past the end of a shortened file read as never written (zeros): records
        // wholly before the cut stay readable, the rest fail their checksums.
        image[n..].fill(0);
        let Some(header) = PageHeader::decode(self.files.log_id, &image) else {
            return Ok(Err(invalid(record, page, CorruptionKind::BadPageHeader)));
        };
        if u64::from(header.page_lsn) != page {
            return Ok(Err(invalid(
                record,
                page,
                CorruptionKind::PageAddress {
                    expected: Lsn(page),
                    got: header.page_lsn,
                },
            )));
        }
        let encrypted = header.flags & PAGE_FLAG_ENCRYPTED != 0;
        if encrypted != (self.files.mode == Mode::PageLevel) {
            return Ok(Err(invalid(record, page, CorruptionKind::BadPageHeader)));
        }
        if encrypted {
            let keys = self
                .files
                .keys
                .as_ref()
                .ok_or(Error::MissingKey(header.key_id))?;
            keys.apply_keystream(header.key_id, &header.iv, &mut image[PAGE_HEADER_LEN..])?;
        }
        self.page = Some(LoadedPage {
            lsn: page,
            header,
            image,
        });
        Ok(Ok(self.page.as_ref().expect("stored just above")))
    }

    /// The decrypted image of the page at `page`, if it is the page last loaded.
    pub(crate) fn loaded_page(&self, page: u64) -> Option<(&PageHeader, &[u8])> {
        self.page
            .as_ref()
            .filter(|p| p.lsn == page)
            .map(|p| (&p.header, p.image.as_slice()))
    }

    /// Loads the page at `page` (for recovery, to keep the valid prefix of the tail page).
    pub(crate) fn load(&mut self, page: u64) -> Result<bool> {
        Ok(self.load_page(page, page)?.is_ok())
    }
}

fn invalid(lsn: u64, at: u64, kind: CorruptionKind) -> Invalid {
    Invalid { lsn, at, kind }
}

/// Reads a log directory: records in LSN order across segments, decrypted with the key ring.
///
/// The reader never changes the files; it may run while a `Wal` writes the same directory
/// and then sees a prefix of the log.
pub struct Reader {
    files: LogFiles,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("dir", &self.files.dir)
            .field("mode", &self.files.mode)
            .field("segments", &self.files.segments.len())
            .finish()
    }
}

impl Reader {
    /// Opens the log in `dir`. Without a key ring, plaintext logs read fully and perrecord
    /// logs yield [`Error::MissingKey`] at the first record (use [`Reader::raw_records_from`]
    /// to see headers); a key that does not match the log gives [`Error::WrongKey`] here.
    pub fn open(dir: impl AsRef<Path>, keys: Option<KeyRing>) -> Result<Reader> {
        Self::open_with_storage(dir, keys, Arc::new(FsStorage))
    }

    /// Like [`Reader::open`] over another storage back end.
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        keys: Option<KeyRing>,
        storage: Arc<dyn Storage>,
    ) -> Result<Reader> {
        let files = LogFiles::open(dir.as_ref(), storage, keys.as_ref())?;
        Ok(Reader { files })
    }

    /// The log's encryption mode, from its segment headers.
    pub fn mode(&self) -> Mode {
        self.files.mode
    }

    /// Page and segment sizes.
    pub fn geometry(&self) -> Geometry {
        self.files.geo
    }

    /// The log's random id.
    pub fn log_id(&self) -> u64 {
        self.files.log_id
    }

    /// The segment files, oldest first.
    pub fn segments(&self) -> &[SegmentInfo] {
        &self.files.segments
    }

    /// Every page header of the log, oldest first (valid or not), without needing a key.
    pub fn page_headers(&self) -> Result<Vec<PageInfo>> {
        self.files.page_headers_from(0)
    }

    /// The first record boundary of the oldest segment.
    pub fn first_lsn(&self) -> Result<Lsn> {
        let oldest = u64::from(self.files.segments[0].header.start);
        let first = self.files.first_record_in_segment(oldest)?;
        Ok(Lsn(first.unwrap_or_else(|| {
            self.files.geo.first_body_position(oldest)
        })))
    }

    fn start(&self, lsn: Lsn) -> Result<u64> {
        let oldest = u64::from(self.files.segments[0].header.start);
        if lsn == Lsn(0) || u64::from(lsn) == oldest {
            return Ok(self.first_lsn()?.into());
        }
        if u64::from(lsn) < oldest || u64::from(lsn) > self.files.end_of_files() {
            return Err(Error::LsnNotAvailable(lsn));
        }
        self.files.check_record_start(u64::from(lsn))?;
        Ok(u64::from(lsn))
    }

    /// Records from `lsn` (a record boundary, or `Lsn::default()` for the start of the log) to
    /// the end of the valid log. Damage followed by later valid data is an error, not the end.
    pub fn records_from(&self, lsn: Lsn) -> Records<'_> {
        Records {
            walk: self.walk(lsn),
        }
    }

    /// Like [`Reader::records_from`] but yields records as stored, with their headers, and
    /// never fails for a missing perrecord key (the payload is then `None`).
    pub fn raw_records_from(&self, lsn: Lsn) -> RawRecords<'_> {
        RawRecords {
            walk: self.walk(lsn),
        }
    }

    fn walk(&self, lsn: Lsn) -> Walk<'_> {
        let (cursor, pending) = match self.start(lsn) {
            Ok(pos) => (Some(Cursor::new(&self.files, pos)), None),
            Err(e) => (None, Some(e)),
        };
        Walk {
            files: &self.files,
            cursor,
            pending,
            end: None,
        }
    }
}

/// A cursor plus the decision at its end: torn tail (the iteration ends) or corruption (one
/// error, then the end).
struct Walk<'a> {
    files: &'a LogFiles,
    cursor: Option<Cursor<'a>>,
    pending: Option<Error>,
    end: Option<Lsn>,
}

impl Walk<'_> {
    fn next_stored(&mut self) -> Option<Result<Stored>> {
        if let Some(e) = self.pending.take() {
            self.cursor = None;
            return Some(Err(e));
        }
        let step = self.cursor.as_mut()?.next();
        match step {
            Ok(Step::Record(stored)) => Some(Ok(stored)),
            Ok(Step::End(invalid)) => {
                self.cursor = None;
                match self.files.classify(invalid.clone()) {
                    Ok(None) => {
                        self.end = Some(Lsn(invalid.lsn));
                        None
                    }
                    Ok(Some(e)) | Err(e) => Some(Err(e)),
                }
            }
            Err(e) => {
                self.cursor = None;
                Some(Err(e))
            }
        }
    }
}

/// Iterator over [`RawRecord`]s; see [`Reader::raw_records_from`].
pub struct RawRecords<'a> {
    walk: Walk<'a>,
}

impl RawRecords<'_> {
    /// Where the valid log ended, once the iterator is exhausted without error.
    pub fn end_lsn(&self) -> Option<Lsn> {
        self.walk.end
    }
}

impl Iterator for RawRecords<'_> {
    type Item = Result<RawRecord>;

    fn next(&mut self) -> Option<Result<RawRecord>> {
        let rec = match self.walk.next_stored()? {
            Ok(rec) => rec,
            Err(e) => return Some(Err(e)),
        };
        let payload = match rec.header.encryption {
            None => Some(rec.stored.clone()),
            Some((key_id, iv)) => self.walk.files.keys.as_ref().and_then(|keys| {
                let mut plain = rec.stored.clone();
                keys.apply_keystream(key_id, &iv, &mut plain).ok()?;
                Some(plain)
            }),
        };
        Some(Ok(RawRecord {
            lsn: rec.lsn,
            end_lsn: rec.end_lsn,
            header: rec.header,
            stored: rec.stored,
            payload,
        }))
    }
}

/// Iterator over decrypted [`Record`]s; see [`Reader::records_from`].
pub struct Records<'a> {
    walk: Walk<'a>,
}

impl Records<'_> {
    /// Where the valid log ended, once the iterator is exhausted without error.
    pub fn end_lsn(&self) -> Option<Lsn> {
        self.walk.end
    }
}

impl Iterator for Records<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        let stored = match self.walk.next_stored()? {
            Ok(stored) => stored,
            Err(e) => return Some(Err(e)),
        };
        let record = stored.into_record(self.walk.files.keys.as_deref());
        if record.is_err() {
            self.walk.cursor = None;
        }
        Some(record)
    }
}
