//! The files of a log: segment headers, page headers and key checks. Nothing here reads
//! records; the cursor (`cursor.rs`) does, and the rule that tells a torn tail from corruption
//! is in `crate::tail`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::Lsn;
use crate::config::Mode;
use crate::crypto::{KeyRing, Keys};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::{self, Geometry, HeaderError, PAGE_HEADER_LEN, PageHeader, SegmentHeader};
use crate::storage::Storage;
pub(crate) use crate::storage::read_full;

/// A segment file opened for reading: where the segment starts, its path (for errors) and
/// the file.
struct SegmentFile {
    start: Lsn,
    path: PathBuf,
    file: Box<dyn crate::storage::StorageFile>,
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
    /// The mode a reader or follower requires (`require_mode`); checked again whenever the
    /// files are read anew.
    pub(crate) required: Option<Mode>,
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

/// Checks the page header in `bytes`, read from the page at `page` of the log with `log_id`
/// and `mode`: it decodes (magic, checksum seeded with the log id, known flags and reserved
/// bytes), carries its own address, and has the encryption flag of the mode (set in pagelevel
/// only). Whether the segment lists the page's key is the caller's check (`lists_key`).
pub fn check_page_header(
    log_id: u64,
    mode: Mode,
    page: Lsn,
    bytes: &[u8],
) -> std::result::Result<PageHeader, CorruptionKind> {
    let header = PageHeader::decode(log_id, bytes).ok_or(CorruptionKind::BadPageHeader)?;
    if header.page_lsn != page {
        return Err(CorruptionKind::PageAddress {
            expected: page,
            got: header.page_lsn,
        });
    }
    let encrypted = header.flags & format::PAGE_FLAG_ENCRYPTED != 0;
    if encrypted != (mode == Mode::PageLevel) {
        return Err(CorruptionKind::BadPageHeader);
    }
    Ok(header)
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
    if let Some(len) = SegmentHeader::len_from_fixed(&buf[..n]) {
        buf.resize(len, 0);
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

/// The start of the segment whose file `error` says was not found, if it says so.
fn missing_segment(error: &Error) -> Option<Lsn> {
    match error {
        Error::Io { path, source, .. } if source.kind() == std::io::ErrorKind::NotFound => path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(format::parse_segment_file_name),
        _ => None,
    }
}

/// When `error` says a segment file of `dir` was not found and that segment lies before the
/// oldest one listed now (a purge removed it), that segment and the oldest one left.
fn purged_segment(storage: &dyn Storage, dir: &Path, error: &Error) -> Option<(Lsn, Lsn)> {
    let missing = missing_segment(error)?;
    let oldest = list_segments(storage, dir).ok()?.first().copied()?;
    (missing < oldest).then_some((missing, oldest))
}

/// How many times [`read_listed_headers`] lists the directory again when a listed segment
/// changed under it, before it takes the change for damage (a `Reader` reports a segment a
/// purge removed as [`Error::Purged`]). Each purge between a listing and its header reads
/// costs one.
const RELIST_TRIES: usize = 16;

/// Lists the segments of `dir` and reads each one's header. A purge (and the reuse of its
/// files) may run beside a reader: a listed segment may be gone by the time its header is
/// read, or its file may already hold a newer segment's header, or half of one (its header
/// page being rewritten), read through a handle opened by the old name. Either way the
/// directory is listed again; the same failure on a listing that still names the segment, or
/// past [`RELIST_TRIES`] listings, is returned.
pub(crate) fn read_listed_headers(storage: &dyn Storage, dir: &Path) -> Result<Vec<SegmentInfo>> {
    let mut tries = 0;
    'listing: loop {
        let starts = list_segments(storage, dir)?;
        if starts.is_empty() {
            return Err(Error::NoLog(dir.to_path_buf()));
        }
        let mut segments = Vec::with_capacity(starts.len());
        for &start in &starts {
            let path = dir.join(format::segment_file_name(start));
            match read_segment_header(storage, &path, start) {
                Ok(header) => segments.push(SegmentInfo { path, header }),
                Err(e) if maybe_reused_under_reader(&e) && tries + 1 < RELIST_TRIES => {
                    tries += 1;
                    if list_segments(storage, dir)? != starts {
                        continue 'listing;
                    }
                    // Still listed as it was: read it once more before calling it damage (a
                    // reused file is renamed before its header is rewritten, so a second read
                    // by name sees the new header only if the name is the new one).
                    match read_segment_header(storage, &path, start) {
                        Ok(header) => segments.push(SegmentInfo { path, header }),
                        Err(e) if maybe_reused_under_reader(&e) => continue 'listing,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        return Ok(fill_listing_gaps(storage, dir, segments));
    }
}

/// How many segments missing between two listed ones [`fill_listing_gaps`] looks for by name.
/// A listing misses only segments made while it ran; more than this many missing is damage
/// (or a stray file named far ahead), reported as a gap without a read per missing name.
const GAP_PROBES: u64 = 16;

/// Adds the segments a listing missed between two it returned, read by name. A directory
/// listing does not promise to return entries added while it runs (POSIX `readdir`; ext4
/// skips some of them): a writer that made two segments during one listing can leave the
/// first out and the second in, and a reader of the live log would take the gap for a
/// missing segment. Each missing start is read by its name; one that is not there (or whose
/// header does not check) ends the filling, and the gap stays for [`LogFiles::open`] to
/// report as damage. In a directory no writer changes, a listed gap is never filled: the
/// files are not there.
fn fill_listing_gaps(
    storage: &dyn Storage,
    dir: &Path,
    listed: Vec<SegmentInfo>,
) -> Vec<SegmentInfo> {
    let Some(size) = listed
        .first()
        .map(|s| s.header.geometry.segment_size)
        .filter(|&size| size > 0)
    else {
        return listed;
    };
    let mut segments: Vec<SegmentInfo> = Vec::with_capacity(listed.len());
    for seg in listed {
        if let Some(prev) = segments.last() {
            let mut expected = prev.header.start.checked_add(size);
            for _ in 0..GAP_PROBES {
                let Some(start) = expected.filter(|&e| e < seg.header.start) else {
                    break;
                };
                let path = dir.join(format::segment_file_name(start));
                match read_segment_header(storage, &path, start) {
                    Ok(header) => segments.push(SegmentInfo { path, header }),
                    Err(_) => break,
                }
                expected = start.checked_add(size);
            }
        }
        segments.push(seg);
    }
    segments
}

/// [`changed_under_reader`], or a header that does not decode (a checksum or a field out of
/// place): what a read through a handle opened by a purged segment's name sees while a reuse
/// rewrites the file's header page. Only for a caller that confirms it by listing the
/// directory again (a segment still listed is read again, by name, and damage stays damage).
fn maybe_reused_under_reader(e: &Error) -> bool {
    changed_under_reader(e)
        || matches!(
            e,
            Error::Corrupt {
                kind: CorruptionKind::SegmentHeaderChecksum { .. }
                    | CorruptionKind::SegmentHeaderField(_),
                ..
            }
        )
}

/// True for the errors a segment gives when a purge removed it, or a reuse gave its file to a
/// newer segment, between listing and reading: not found, or a header naming another start.
pub(crate) fn changed_under_reader(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        Error::Corrupt { kind, .. } => matches!(kind, CorruptionKind::SegmentAddress { .. }),
        _ => false,
    }
}

/// The durable hint of a page with a valid header (0 without one).
fn page_hint(page: &PageInfo) -> Lsn {
    page.header.as_ref().map_or(Lsn(0), |h| h.durable_hint)
}

impl LogFiles {
    /// `error`, or [`Error::Purged`] when it is a segment file not found, and that segment
    /// and the one holding `needed` lie before the segments listed now: a purge removed them
    /// after these files were listed (a reader or follower opened at the oldest segment while
    /// a purge ran).
    pub(crate) fn purged_instead(&self, needed: Lsn, error: Error) -> Error {
        match purged_segment(self.storage.as_ref(), &self.dir, &error) {
            Some((_, oldest)) if self.geo.segment_start(needed) < oldest => {
                Error::Purged { needed, oldest }
            }
            _ => error,
        }
    }

    /// What a failed [`LogFiles::open`] says to a `Reader`: a listed segment gone, older than
    /// the oldest left after every listing the open took, is [`Error::Purged`] (a writer
    /// purging faster than the open reads); any other error as it is.
    pub(crate) fn open_failed(storage: &dyn Storage, dir: &Path, error: Error) -> Error {
        match purged_segment(storage, dir, &error) {
            Some((missing, oldest)) => Error::Purged {
                needed: missing,
                oldest,
            },
            None => error,
        }
    }

    /// Opens the segments of `dir` and checks that they form one log and that every key in
    /// `ring` matches the check values recorded for its id.
    pub(crate) fn open(
        dir: &Path,
        storage: Arc<dyn Storage>,
        ring: Option<&KeyRing>,
    ) -> Result<LogFiles> {
        let segments = read_listed_headers(storage.as_ref(), dir)?;
        let first = segments[0].header.clone();
        // Every start is checked before any arithmetic on it: a hand-made file named for a
        // start near 2^64, or one not on a segment boundary, is refused, never wrapped around.
        for seg in &segments {
            check_segment_start(seg, first.geometry)?;
        }
        for (seg, (expected, version_before)) in
            segments[1..].iter().zip(segments.iter().map(|s| {
                (
                    s.header.start + first.geometry.segment_size,
                    s.header.version,
                )
            }))
        {
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
            if h.mode != first.mode {
                return Err(Error::corrupt(
                    h.start,
                    0,
                    h.start,
                    CorruptionKind::ModeChanged {
                        expected: first.mode.name(),
                        got: h.mode.name(),
                    },
                ));
            }
            if h.geometry != first.geometry {
                return Err(Error::corrupt(
                    h.start,
                    0,
                    h.start,
                    CorruptionKind::SegmentHeaderField("geometry differs from the first segment"),
                ));
            }
            if h.version < version_before {
                // A writer moves to a new format version in a new segment and never back.
                return Err(Error::corrupt(
                    h.start,
                    0,
                    h.start,
                    CorruptionKind::SegmentHeaderField(
                        "format version older than the segment before",
                    ),
                ));
            }
            if h.start != expected {
                // Segments are created in order and purged oldest first: a gap is damage.
                return Err(Error::corrupt(
                    expected,
                    0,
                    expected,
                    CorruptionKind::MissingSegment,
                ));
            }
        }
        let keys = match ring {
            Some(r) => Some(Arc::new(Keys::new(r, first.log_id)?)),
            None => None,
        };
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
            required: None,
        })
    }

    /// Refuses these files unless their log is of `mode` (`Error::Mismatch` naming both modes
    /// and the first segment). A perrecord-gcm log must also be of format version 5 or later
    /// in every segment: earlier versions do not authenticate their segment switches (before
    /// 4) or the geometry (before 5), so a segment relabelled as one of them, or an old
    /// segment's geometry rewritten, could hide records. Kept and checked again by every later
    /// read of the directory.
    pub(crate) fn require_mode(&mut self, mode: Mode) -> Result<()> {
        self.required = Some(mode);
        self.check_required()
    }

    fn check_required(&self) -> Result<()> {
        let (Some(mode), Some(first)) = (self.required, self.segments.first()) else {
            return Ok(());
        };
        if self.mode != mode {
            return Err(Error::Mismatch {
                what: "mode",
                on_disk: format!("{} (segment {})", self.mode, first.path.display()),
                configured: mode.to_string(),
            });
        }
        if !mode.is_authenticated() {
            return Ok(());
        }
        match self
            .segments
            .iter()
            .find(|s| s.header.version < format::GEOMETRY_BOUND_VERSION)
        {
            Some(old) => Err(Error::Mismatch {
                what: "mode",
                on_disk: format!(
                    "{mode} of format version {} (segment {}), whose {} not authenticated",
                    old.header.version,
                    old.path.display(),
                    match old.header.version < format::AUTHENTICATED_CONTROL_VERSION {
                        true => "segment switches and geometry are",
                        false => "geometry is",
                    }
                ),
                configured: format!(
                    "{mode} of format version {} or later",
                    format::GEOMETRY_BOUND_VERSION
                ),
            }),
            None => Ok(()),
        }
    }

    /// The format version of the segment holding `lsn`, which decides how the checksum of a
    /// record starting there is computed; the current version for a position in no segment.
    pub(crate) fn version_at(&self, lsn: Lsn) -> u32 {
        self.segment(self.geo.segment_start(lsn))
            .map_or(format::FORMAT_VERSION, |s| s.header.version)
    }

    /// True when the segment holding the record at `lsn`, or the one holding the next page
    /// (where a pagelevel log may go on after a resume record), now holds another header than
    /// the one these files read: a writer's open removed it (it lay after the end of the log)
    /// and made it anew. A segment prepared ahead by a build of an older format version comes
    /// back at the current one, whose records the old header's checksum rule fails; one
    /// prepared under an older key comes back listing the active key. A segment whose file is
    /// gone does not count.
    pub(crate) fn segment_remade(&self, lsn: Lsn) -> Result<bool> {
        let here = self.geo.segment_start(lsn);
        let next_page = self.geo.page_start(lsn) + self.geo.page_size;
        let next = self.geo.segment_start(self.geo.skip_headers(next_page));
        Ok(self.header_changed(here)? || next != here && self.header_changed(next)?)
    }

    /// True when the file of the segment at `start` (one of these files) holds another header
    /// than the one these files read; false when the file is gone or not one of these files.
    fn header_changed(&self, start: Lsn) -> Result<bool> {
        let Some(seg) = self.segment(start) else {
            return Ok(false);
        };
        match read_segment_header(self.storage.as_ref(), &seg.path, start) {
            Ok(header) => Ok(header != seg.header),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn segment(&self, start: Lsn) -> Option<&SegmentInfo> {
        self.segments
            .binary_search_by_key(&start, |s| s.header.start)
            .ok()
            .map(|i| &self.segments[i])
    }

    /// The end of the last segment file: nothing of this log lies beyond.
    pub(crate) fn end_of_files(&self) -> Lsn {
        self.segments
            .last()
            .map(|s| s.header.start + self.geo.segment_size)
            .unwrap_or_default()
    }

    /// The first record boundary in the segment that starts at `start`, if page 1's header is
    /// valid (its continuation length says how far the previous segment's last record runs).
    pub(crate) fn first_record_in_segment(&self, start: Lsn) -> Result<Option<Lsn>> {
        let page = start + self.geo.page_size;
        let Some(header) = self.read_page_header(page)? else {
            return Ok(None);
        };
        // Nothing comes before the segment at LSN 0, so no record continues into its first
        // page. A page header's checksum needs no key: a continuation length written there
        // would otherwise move the first record past the records it skips, without an error
        // even in perrecord-gcm, whose tags cover records, not page headers.
        if start == Lsn(0) && header.rem_len != 0 {
            return Err(self.position_error(
                page,
                page,
                CorruptionKind::ContinuationMismatch {
                    expected: 0,
                    got: header.rem_len.into(),
                },
            ));
        }
        if header.rem_len != 0 {
            self.check_continuation(page, header.rem_len.into())?;
        }
        Ok(Some(self.first_record_past(page, header.rem_len)))
    }

    /// The first record boundary of the page at `page` whose header says `rem_len` bytes of a
    /// record continue at its body's start (they may run on over later pages).
    fn first_record_past(&self, page: Lsn, rem_len: u32) -> Lsn {
        self.geo
            .advance(self.geo.skip_headers(page), rem_len.into())
    }

    /// Where the first page of the segment at `start` says its first record starts, taken as
    /// it stands (no check): for a caller that only needs to know whether that lies inside
    /// the segment before calling [`LogFiles::first_record_in_segment`].
    pub(crate) fn first_record_in_segment_unchecked(&self, start: Lsn) -> Result<Option<Lsn>> {
        let page = start + self.geo.page_size;
        Ok(self
            .read_page_header(page)?
            .map(|header| self.first_record_past(page, header.rem_len)))
    }

    /// Checks a continuation length of `rem_len` at `page` (a segment's first page) against
    /// the pages it runs over: each later page it reaches whose header is valid must say how
    /// much of it is left there. A continuation length rewritten to move the first record
    /// (past records, or past the end of the log) disagrees with them. Pages without a valid
    /// header prove nothing (not written yet), and the walk stops at the first.
    fn check_continuation(&self, page: Lsn, rem_len: u64) -> Result<()> {
        let body = self.geo.page_size - PAGE_HEADER_LEN as u64;
        let mut left = rem_len;
        let mut at = page;
        // One open file per segment: a continuation may run over many pages.
        let mut segment: Option<SegmentFile> = None;
        while left > body {
            left -= body;
            at += self.geo.page_size;
            if self.geo.is_header_page(at) {
                at += self.geo.page_size;
            }
            if segment
                .as_ref()
                .is_none_or(|s| s.start != self.geo.segment_start(at))
            {
                segment = self.open_segment_of(at)?;
            }
            let Some(open) = segment.as_ref() else {
                return Ok(());
            };
            let Some(header) = self.page_header_in(open, at)? else {
                return Ok(());
            };
            if u64::from(header.rem_len) != left {
                return Err(self.position_error(
                    at,
                    at,
                    CorruptionKind::ContinuationMismatch {
                        expected: left,
                        got: header.rem_len.into(),
                    },
                ));
            }
        }
        Ok(())
    }

    /// Reads and checks the header of the page at `page`; `None` when it is not valid.
    pub(crate) fn read_page_header(&self, page: Lsn) -> Result<Option<PageHeader>> {
        let Some(file) = self.open_segment_of(page)? else {
            return Ok(None);
        };
        self.page_header_in(&file, page)
    }

    /// The segment holding `page`, opened for reading with its start; `None` when it is not
    /// among the files.
    fn open_segment_of(&self, page: Lsn) -> Result<Option<SegmentFile>> {
        let start = self.geo.segment_start(page);
        let Some(seg) = self.segment(start) else {
            return Ok(None);
        };
        let file = self
            .storage
            .open(&seg.path, false)
            .map_err(|e| Error::io("open segment", &seg.path, e))?;
        Ok(Some(SegmentFile {
            start,
            path: seg.path.clone(),
            file,
        }))
    }

    /// Reads and checks the header of the page at `page` in `segment`, the segment's file
    /// opened already; `None` when it is not valid.
    fn page_header_in(&self, segment: &SegmentFile, page: Lsn) -> Result<Option<PageHeader>> {
        let mut buf = [0u8; PAGE_HEADER_LEN];
        let n = read_full(segment.file.as_ref(), &mut buf, page - segment.start)
            .map_err(|e| Error::io("read page header", &segment.path, e))?;
        Ok(PageHeader::decode(self.log_id, &buf[..n]).filter(|h| h.page_lsn == page))
    }

    /// The largest durable hint among every valid page header from `from_page` to the end of
    /// the files, past pages without a valid header too (0 when there is none).
    pub(crate) fn max_hint_from(&self, from_page: Lsn) -> Result<Lsn> {
        let mut hint = Lsn(0);
        self.each_page_header_from(from_page, |page| hint = hint.max(page_hint(&page)))?;
        Ok(hint)
    }

    /// Every page header from `from_page` to the end of the files, in order.
    pub(crate) fn page_headers_from(&self, from_page: Lsn) -> Result<Vec<PageInfo>> {
        let mut out = Vec::new();
        self.each_page_header_from(from_page, |page| out.push(page))?;
        Ok(out)
    }

    /// Hands `visit` every page header from `from_page` to the end of the files, in order,
    /// keeping none: the callers that want one figure of them (the highest durable hint) need
    /// no memory per page, however large a file (or a sparse one) is.
    pub(crate) fn each_page_header_from(
        &self,
        from_page: Lsn,
        mut visit: impl FnMut(PageInfo),
    ) -> Result<()> {
        for seg in &self.segments {
            self.segment_page_headers(seg, from_page, Lsn(u64::MAX), &mut visit)?;
        }
        Ok(())
    }

    /// Hands `visit` the page headers of segment `seg` (its pages after the header page) from
    /// `from_page` to the end of its file or up to `to_page` (not included), in order.
    pub(crate) fn segment_page_headers(
        &self,
        seg: &SegmentInfo,
        from_page: Lsn,
        to_page: Lsn,
        visit: &mut impl FnMut(PageInfo),
    ) -> Result<()> {
        let start = seg.header.start;
        if start + self.geo.segment_size <= from_page {
            return Ok(());
        }
        let file = self
            .storage
            .open(&seg.path, false)
            .map_err(|e| Error::io("open segment", &seg.path, e))?;
        let len = file
            .file_len()
            .map_err(|e| Error::io("stat segment", &seg.path, e))?;
        let mut buf = [0u8; PAGE_HEADER_LEN];
        let mut offset = self
            .geo
            .page_size
            .max(from_page.checked_distance(start).unwrap_or(0));
        while offset < self.geo.segment_size && offset < len && start + offset < to_page {
            let n = read_full(file.as_ref(), &mut buf, offset)
                .map_err(|e| Error::io("read page header", &seg.path, e))?;
            let page_lsn = start + offset;
            let header =
                PageHeader::decode(self.log_id, &buf[..n]).filter(|h| h.page_lsn == page_lsn);
            visit(PageInfo {
                segment: start,
                offset,
                page_lsn,
                header,
            });
            offset += self.geo.page_size;
        }
        Ok(())
    }

    /// Fails unless the header of the segment holding `at` lists `key_id`. A record or page
    /// naming another key of the ring would decrypt to garbage that still passes its checksum
    /// (the checksum covers ciphertext), so this is damage, not the end of the log.
    pub(crate) fn check_key_listed(&self, key_id: u32, at: Lsn) -> Result<()> {
        let start = self.geo.segment_start(at);
        match self.segment(start) {
            Some(seg) if !seg.header.lists_key(key_id) => {
                Err(self.position_error(at, at, CorruptionKind::UnlistedKey { key_id }))
            }
            _ => Ok(()),
        }
    }

    /// The largest durable hint among the valid page headers from `from_page` on, up to the
    /// first page without one in the last segment: every byte before it had been fdatasync'ed
    /// when that page was written. 0 when there is none.
    ///
    /// A page without a valid header in a segment that has a successor among these files does
    /// not end the look: a segment switch (a key rotation makes one) leaves the rest of its
    /// segment unwritten, and the pages vouching for the segment's last records, written after
    /// the fdatasync that made them durable, lie in the segments after it. The look goes on at
    /// the next segment's first page. (Stopping there left a follower of the files waiting
    /// forever on records written before a rotation and made durable after it.)
    pub(crate) fn latest_hint(&self, from_page: Lsn) -> Result<Lsn> {
        let mut hint = Lsn(0);
        let mut page = from_page;
        // Whether the look went on into a later segment past an unwritten page.
        let mut went_on = false;
        loop {
            if self.geo.is_header_page(page) {
                page += self.geo.page_size;
                continue;
            }
            let header = match self.read_page_header(page) {
                // A later segment gone or given to another segment since these files were
                // listed (a writer's open removes the segments after the end, a purge reuses
                // files): what was found so far stands, as it did before the look went on.
                Err(e) if went_on && changed_under_reader(&e) => return Ok(hint),
                other => other?,
            };
            match header {
                Some(h) => hint = hint.max(h.durable_hint),
                None => {
                    let next = self
                        .geo
                        .segment_start(page)
                        .checked_add(self.geo.segment_size);
                    match next.filter(|&next| self.segment(next).is_some()) {
                        Some(next) => {
                            debug_assert!(next > page, "the look for hints goes forward");
                            page = next;
                            went_on = true;
                            continue;
                        }
                        None => return Ok(hint),
                    }
                }
            }
            page += self.geo.page_size;
        }
    }

    /// The largest durable hint among the valid headers of the page holding `lsn` and of the
    /// page after it (the next body page), 0 when neither has one.
    pub(crate) fn hint_near(&self, lsn: Lsn) -> Result<Lsn> {
        let page = self.geo.page_start(lsn);
        let next = self
            .geo
            .page_start(self.geo.skip_headers(page + self.geo.page_size));
        let mut hint = Lsn(0);
        for p in [page, next] {
            if let Some(h) = self.read_page_header(p)? {
                hint = hint.max(h.durable_hint);
            }
        }
        Ok(hint)
    }

    /// Re-reads the directory when segments newer than the last known one have appeared:
    /// `Some` with the files as they are now, `None` when nothing new is there. The log must
    /// still be the same log.
    pub(crate) fn refreshed(&self, ring: Option<&KeyRing>) -> Result<Option<LogFiles>> {
        let newest = self.segments.last().map(|s| s.header.start);
        let starts = list_segments(self.storage.as_ref(), &self.dir)?;
        if starts.last().copied() <= newest {
            return Ok(None);
        }
        self.reopened(ring).map(Some)
    }

    /// The files as the directory holds them now, which must still be the same log: the keys
    /// of `ring`, or without one the keys these files use.
    pub(crate) fn reopened(&self, ring: Option<&KeyRing>) -> Result<LogFiles> {
        let mut files = LogFiles::open(&self.dir, self.storage.clone(), ring)?;
        if files.log_id != self.log_id {
            return Err(Error::corrupt(
                files.segments[0].header.start,
                0,
                files.segments[0].header.start,
                CorruptionKind::ForeignSegment {
                    expected: self.log_id,
                    got: files.log_id,
                },
            ));
        }
        // The log read so far must not change its mode or geometry under a reader: files
        // relabelled or swapped for another mode's are refused, never read under new rules.
        if files.mode != self.mode {
            return Err(Error::corrupt(
                files.segments[0].header.start,
                0,
                files.segments[0].header.start,
                CorruptionKind::ModeChanged {
                    expected: self.mode.name(),
                    got: files.mode.name(),
                },
            ));
        }
        if files.geo != self.geo {
            return Err(Error::corrupt(
                files.segments[0].header.start,
                0,
                files.segments[0].header.start,
                CorruptionKind::SegmentHeaderField("geometry differs from the log read so far"),
            ));
        }
        if let Some(mode) = self.required {
            files.require_mode(mode)?;
        }
        if ring.is_none() && self.keys.is_some() {
            files.share_keys(self.keys.clone())?;
        }
        Ok(files)
    }

    /// Uses `keys` (already expanded, for example a writer's) and checks them against every
    /// segment's key check values.
    pub(crate) fn share_keys(&mut self, keys: Option<Arc<Keys>>) -> Result<()> {
        if let Some(k) = &keys {
            check_keys(k, &self.segments)?;
        }
        self.keys = keys;
        Ok(())
    }

    pub(crate) fn position_error(&self, at: Lsn, lsn: Lsn, kind: CorruptionKind) -> Error {
        let segment = self.geo.segment_start(at);
        Error::corrupt(segment, at - segment, lsn, kind)
    }
}

/// Refuses a segment whose start is off the segment grid of `geo` or too close to the end of
/// the LSN space. The error names the file (its start) and what is wrong.
fn check_segment_start(seg: &SegmentInfo, geo: Geometry) -> Result<()> {
    let start = seg.header.start;
    format::validate_segment_start(geo, start)
        .map_err(|what| Error::corrupt(start, 0, start, CorruptionKind::SegmentHeaderField(what)))
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
