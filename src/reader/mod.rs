//! Sequential reading across segments: page validation, decryption and record parsing.
//!
//! [`Reader`] is the public face; the [`Cursor`] underneath is shared with crash recovery,
//! so the reader and recovery agree byte for byte on what a valid record is.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::Lsn;
use crate::config::Mode;
use crate::crypto::KeyRing;
use crate::error::{Error, Result};
use crate::format::{Geometry, PageHeader, RecordHeader, SegmentHeader};
use crate::storage::{FsStorage, Storage};

mod cursor;
mod files;

pub(crate) use cursor::{Cursor, Step, Stored};
pub(crate) use files::{LogFiles, list_segments, read_segment_header};
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
        Ok(Lsn(
            first.unwrap_or_else(|| self.files.geo.skip_headers(oldest))
        ))
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
        let keys = self.walk.files.keys.as_deref();
        let payload = match rec.plaintext(keys) {
            Ok(plain) => Some(plain),
            Err(Error::MissingKey(_)) => None,
            Err(e) => {
                self.walk.cursor = None;
                return Some(Err(e));
            }
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
