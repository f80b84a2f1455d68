//! Sequential reading across segments: page validation, decryption and record parsing.
//!
//! [`Reader`] is the public face; the [`Cursor`] underneath is shared with crash recovery,
//! so the reader and recovery agree byte for byte on what a valid record is.

use std::path::Path;
use std::sync::Arc;

use crate::Lsn;
use crate::config::Mode;
use crate::crypto::{KeyRing, Keys};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::{Geometry, RecordHeader};
use crate::keys::KeyStore;
use crate::storage::{FsStorage, Storage};

pub(crate) mod ahead;
mod cursor;
mod files;
mod follow;
mod made;
mod prefetched;

pub(crate) use cursor::{
    Cursor, Invalid, Step, Stored, authenticated_walk_reaches, check_record_start,
    first_record_in_segment, reached_record_start, record_start, record_start_reached,
};
pub(crate) use files::{LogFiles, changed_under_reader, list_segments, read_segment_header};
pub use files::{PageInfo, SegmentInfo, check_page_header};
pub use follow::{Follower, Visibility};
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
    /// Format version of the segment the record starts in: it says how the header's checksum
    /// is computed (see [`crate::inspect::record_crc`]).
    pub format_version: u32,
    /// The payload as stored on disk (ciphertext in perrecord; plaintext in the other modes,
    /// since pagelevel pages are decrypted before records are parsed).
    pub stored: Vec<u8>,
    /// The plaintext payload: `Some` unless the payload is encrypted and its key is missing.
    pub payload: Option<Vec<u8>>,
}

/// Reads a log directory: records in LSN order across segments, decrypted with the key ring.
///
/// The reader never changes the files. It may run while a `Wal` (in this process or another)
/// writes the same directory: it then sees a prefix of the log as the files held it while
/// it read, ending at the live end, and never reports damage because the writer moved on
/// (see *Live logs* below). Segments created after [`Reader::open`] are not seen;
/// to keep reading as the log grows, use a [`Follower`].
///
/// # Live logs
///
/// When a record cannot be read, the page headers decide between the end of the log and
/// damage: a valid header whose durable hint lies past the record proves the record was
/// complete once. A writer can produce such a header between the reader's two looks, so the
/// reader reads the record again (after pauses of 0, 1 and 10 ms) before it reports damage.
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
        let files = LogFiles::open(dir.as_ref(), storage.clone(), keys.as_ref())
            .map_err(|e| LogFiles::open_failed(storage.as_ref(), dir.as_ref(), e))?;
        Ok(Reader { files })
    }

    /// Opens the log in `dir` with the keys of `store`. When a segment lists a key id the store
    /// in memory lacks (the log was rotated to a key through another handle of the store or in
    /// another process), the store file is read again once ([`KeyStore::reload`]) first.
    pub fn open_with_key_store(dir: impl AsRef<Path>, store: &KeyStore) -> Result<Reader> {
        let mut files = LogFiles::open(dir.as_ref(), Arc::new(FsStorage), None)
            .map_err(|e| LogFiles::open_failed(&FsStorage, dir.as_ref(), e))?;
        let lacks_one = files
            .segments
            .iter()
            .flat_map(|s| s.header.key_checks.iter())
            .any(|(id, _)| !store.has_key(*id));
        if lacks_one {
            store.reload()?;
        }
        let ring = store.ring();
        files.share_keys(Some(Arc::new(Keys::new(&ring, files.log_id)?)))?;
        Ok(Reader { files })
    }

    /// Requires the log to be of `mode`, so that files relabelled with another mode (a
    /// perrecord-gcm log rewritten as perrecord, or a plaintext log given the log's id) are
    /// refused instead of read under that mode's weaker rules. A log of another mode is
    /// [`Error::Mismatch`] naming both modes and the first segment. For
    /// [`Mode::PerRecordGcm`], every segment must also be of format version 5 or later: the
    /// segment switches of versions before 4 are not authenticated, and before 5 the tags do
    /// not bind the log's geometry (docs/SECURITY.md).
    ///
    /// ```no_run
    /// # use walcrypt::{KeyRing, Mode, Reader};
    /// # fn main() -> walcrypt::Result<()> {
    /// # let ring = KeyRing::generate()?;
    /// let reader = Reader::open("/var/lib/engine/wal", Some(ring))?.require_mode(Mode::PerRecordGcm)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn require_mode(mut self, mode: Mode) -> Result<Reader> {
        self.files.require_mode(mode)?;
        Ok(self)
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
        self.files.page_headers_from(Lsn(0))
    }

    /// The first record boundary of the oldest segment.
    pub fn first_lsn(&self) -> Result<Lsn> {
        record_start(&self.files, Lsn(0)).map_err(|e| self.purged_instead(Lsn(0), e))
    }

    /// `error`, or [`Error::Purged`] when a purge removed the segment holding `lsn` (the
    /// oldest segment for `Lsn(0)`) after this reader listed the files.
    fn purged_instead(&self, lsn: Lsn, error: Error) -> Error {
        let needed = match (lsn, self.files.segments.first()) {
            (Lsn(0), Some(oldest)) => oldest.header.start,
            _ => lsn,
        };
        self.files.purged_instead(needed, error)
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
        let (cursor, pending) = match record_start(&self.files, lsn) {
            Ok(pos) => (Some(Cursor::new(&self.files, pos)), None),
            Err(e) => (None, Some(self.purged_instead(lsn, e))),
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
        let cursor = self.cursor.as_mut()?;
        let at = cursor.position();
        let step = cursor.next();
        match step {
            Ok(Step::Record(stored)) => Some(Ok(stored)),
            Ok(Step::End(invalid)) => {
                self.cursor = None;
                match settle(self.files, invalid) {
                    Ok(Settled::End(lsn)) => {
                        self.end = Some(lsn);
                        None
                    }
                    Ok(Settled::Resume(cursor, stored)) => {
                        self.cursor = Some(*cursor);
                        Some(Ok(*stored))
                    }
                    // The second look (a fresh cursor) and the page headers it weighs meet the
                    // same moves of the writer as the first look does.
                    Err(e) => self.failed(at, e),
                }
            }
            Err(e) => {
                self.cursor = None;
                self.failed(at, e)
            }
        }
    }

    /// An error met reading on from `at`, unless the writer moved on under the reader:
    /// - a record under a key its segment's header (as listed) does not name, in a segment
    ///   whose header has changed since: a key rotation replaced the segment prepared ahead
    ///   under the old key after the reader listed it. These files end before that segment,
    ///   as `settle` ends them before a segment remade by an open. In a segment nobody
    ///   replaced it is damage;
    /// - a listed segment file gone, from before the oldest segment left: purged (and perhaps
    ///   renamed for reuse) after the reader listed it. That is [`Error::Purged`].
    fn failed(&mut self, at: Lsn, e: Error) -> Option<Result<Stored>> {
        if let Error::Corrupt {
            at: pos,
            kind: CorruptionKind::UnlistedKey { .. },
        } = &e
            && self.files.segment_remade(pos.lsn).unwrap_or(false)
        {
            self.end = Some(pos.lsn);
            return None;
        }
        Some(Err(self.files.purged_instead(at, e)))
    }
}

/// How a walk that stopped at an invalid record goes on.
pub(crate) enum Settled<'a> {
    /// The end of the valid log, at this position.
    End(Lsn),
    /// The record was read in full on a second look: the writer had moved on.
    Resume(Box<Cursor<'a>>, Box<Stored>),
}

/// Pauses before each further look at a record that the page headers say was complete; the
/// first look again is immediate. Only damage (or a writer racing the reader) takes this path.
const SETTLE_PAUSES: [std::time::Duration; 3] = [
    std::time::Duration::ZERO,
    std::time::Duration::from_millis(1),
    std::time::Duration::from_millis(10),
];

/// The torn-tail rule: decides what an invalid record at `lsn` means. A valid page at or after the page
/// holding `lsn` whose durable hint lies beyond `lsn` was written after the record had been
/// made durable: the record was complete once, so this is corruption, never a torn tail.
/// That includes the pages the record itself was read from: a crash cannot damage bytes
/// that were durable before a page was rewritten, since every mode rewrites them byte for
/// byte (pagelevel keeps a page's IV within an open), and a page's hint never exceeds what
/// earlier writes had put on disk. So a torn rewrite ends the log at or after every hint,
/// and damage below a hint comes from outside (bit rot, a lost or misdirected write).
/// Otherwise the record is the torn tail of a crash, the end of the log.
///
/// Only page headers valid at their address count. A reused segment file of an encrypted log
/// is not wiped: the
/// pages the log has not reached (or a crash kept from reaching) still carry the headers of
/// the file's earlier life, with their old LSNs and old durable hints. Each names another page
/// (an earlier start in the same 4 GiB window), so it is no page of the log and its hint
/// vouches for nothing here: old pages past the end read as the end of the log, never as damage.
pub(crate) fn classify(files: &LogFiles, invalid: Invalid) -> Result<Option<Error>> {
    if durable_past(files, invalid.lsn)? {
        return Ok(Some(files.position_error(
            invalid.at,
            invalid.lsn,
            invalid.kind,
        )));
    }
    Ok(None)
}

/// Whether a valid page header from the page holding `lsn` on vouches for the log past `lsn`
/// (its durable hint lies beyond it): a record there that does not check is then damage, not
/// the torn tail ([`classify`]; recovery's tag check of perrecord-gcm records).
pub(crate) fn durable_past(files: &LogFiles, lsn: Lsn) -> Result<bool> {
    Ok(files.max_hint_from(files.geo.page_start(lsn))? > lsn)
}

/// Decides what an invalid record means when a writer may be appending to the same files.
///
/// A valid page header whose durable hint lies past the record says the record was complete
/// before that page was written. On a log no one writes, that is damage. On a live log it may
/// only mean the writer moved on between the read of the record and the read of the headers
/// (or a page was read while it was being rewritten). So the record is read again, from fresh
/// pages; it is reported as damage only if it is still invalid after every pause.
pub(crate) fn settle(files: &LogFiles, mut invalid: Invalid) -> Result<Settled<'_>> {
    for pause in SETTLE_PAUSES {
        if classify(files, invalid.clone())?.is_none() {
            return Ok(Settled::End(invalid.lsn));
        }
        std::thread::sleep(pause);
        let mut cursor = Cursor::new(files, invalid.lsn);
        match cursor.next()? {
            Step::Record(stored) => {
                return Ok(Settled::Resume(Box::new(cursor), Box::new(stored)));
            }
            Step::End(again) => invalid = again,
        }
    }
    match classify(files, invalid.clone())? {
        None => Ok(Settled::End(invalid.lsn)),
        // A segment a writer's open removed and made anew since these files read its header
        // (one prepared ahead by a build of an older format version): its records follow
        // another header's rules, so these files end before it.
        Some(_) if files.segment_remade(invalid.lsn).unwrap_or(false) => {
            Ok(Settled::End(invalid.lsn))
        }
        Some(e) => Err(e),
    }
}

/// The stored record as inspection tools see it, decrypted (and decompressed) when the key is
/// there. A missing key leaves the payload out; a failed authentication tag or a damaged
/// compressed payload is an error, never a payload.
pub(crate) fn raw_record(rec: Stored, keys: Option<&crate::crypto::Keys>) -> Result<RawRecord> {
    let payload = match rec.plaintext(keys) {
        Ok(plain) => Some(plain),
        Err(Error::MissingKey { .. }) => None,
        Err(e) => return Err(e),
    };
    Ok(RawRecord {
        lsn: rec.lsn,
        end_lsn: rec.end_lsn,
        header: rec.header,
        format_version: rec.version,
        stored: rec.stored,
        payload,
    })
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
        match raw_record(rec, self.walk.files.keys.as_deref()) {
            Ok(raw) => Some(Ok(raw)),
            Err(e) => {
                self.walk.cursor = None;
                Some(Err(e))
            }
        }
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
