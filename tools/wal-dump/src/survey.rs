//! What a cut at the first damage would remove: the records before the damage (kept), the
//! damaged record and every record still readable after it (cut), and the bytes of log they
//! span. Only written log counts: segment files prepared ahead and never written are not log.

use walcrypt::inspect::{self, RecordHeader};
use walcrypt::{Error, Lsn, Mode, Position, Reader};

use crate::fail::Fail;
use crate::source::Disk;

/// The first damage of a log and what a cut there removes.
pub struct Survey {
    /// Records before the damage: a cut keeps them.
    pub kept: u64,
    /// Where the log would end: the start of the first damaged record.
    pub cut_at: u64,
    /// The first damage and what it is; `None` for a clean log (a torn tail is no damage).
    pub damage: Option<(Position, String)>,
    /// The damaged record and the records read after it.
    pub cut_records: u64,
    /// Some stretch after the damage could not be read, so `cut_records` is a lower bound.
    pub cut_uncounted: bool,
    /// End of the last record read after the damage (or of the last written page when none
    /// could be read): the cut removes `[cut_at, cut_end)` of log.
    pub cut_end: u64,
    /// For a log without damage: written pages after the page where the valid log ends. An
    /// open takes them for a torn tail and cuts them (damage in a log whose durable hints
    /// prove nothing reads the same way).
    pub pages_after_end: u64,
}

impl Survey {
    /// Bytes of written log the cut removes.
    pub fn cut_bytes(&self) -> u64 {
        self.cut_end.saturating_sub(self.cut_at)
    }
}

/// Reads `reader`'s log from its oldest record to its first damage, then on past it.
/// Key errors (wrong or missing key) come back as they are, for the caller to name the file.
pub fn survey(reader: &Reader) -> Result<Survey, Error> {
    let mut kept = 0;
    let mut last_end = None;
    let mut damage = None;
    let (first, last) = crate::progress::span(reader);
    let mut progress = crate::progress::Progress::new("repair: reading", first, last);
    for item in reader.raw_records_from(Lsn::default()) {
        match item {
            Ok(rec) => {
                progress.at(u64::from(rec.lsn));
                kept += 1;
                last_end = Some(u64::from(rec.end_lsn));
            }
            Err(Error::Corrupt { at, kind }) => {
                damage = Some((at, kind.to_string()));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    let cut_at = match last_end {
        Some(end) => end,
        None => u64::from(reader.first_lsn()?),
    };
    let mut survey = Survey {
        kept,
        cut_at,
        damage,
        cut_records: 0,
        cut_uncounted: false,
        cut_end: cut_at,
        pages_after_end: 0,
    };
    if survey.damage.is_some() {
        survey.count_cut(reader)?;
    } else {
        let geo = reader.geometry();
        let tail = geo.page_start(Lsn(cut_at)).0;
        survey.pages_after_end = written_pages(reader)?
            .iter()
            .filter(|(page, _)| *page > tail)
            .count() as u64;
    }
    Ok(survey)
}

impl Survey {
    /// Counts the damaged record and the records after it: first from where the damaged
    /// record's own header says the next one starts, and after any damage from the next page
    /// where a record starts.
    fn count_cut(&mut self, reader: &Reader) -> Result<(), Error> {
        let geo = reader.geometry();
        let pages = written_pages(reader)?;
        if let Some(&(last_page, _)) = pages.last() {
            self.cut_end = self.cut_end.max(last_page + geo.page_size);
        }
        self.cut_records = 1;
        let mut guess = after_damaged_record(reader, self.cut_at);
        let mut damaged_at = self.cut_at;
        let mut last_end = None;
        let (first, last) = crate::progress::span(reader);
        let mut progress = crate::progress::Progress::new("repair: counting the cut", first, last);
        loop {
            let guessed = guess.is_some();
            let from = match guess.take() {
                Some(from) => from,
                None => match boundary_after(geo, &pages, damaged_at) {
                    // Records starting between the damage and this page are not seen.
                    Some(from) => {
                        self.cut_uncounted = true;
                        from
                    }
                    None => break,
                },
            };
            let mut read = 0u64;
            let mut stopped = None;
            for item in reader.raw_records_from(Lsn(from)) {
                match item {
                    Ok(rec) => {
                        progress.at(u64::from(rec.lsn));
                        read += 1;
                        last_end = Some(u64::from(rec.end_lsn));
                    }
                    Err(Error::Corrupt { at, .. }) => {
                        stopped = Some(u64::from(at.lsn).max(u64::from(at.segment) + at.offset));
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            self.cut_records += read;
            let Some(at) = stopped else { break };
            // A guess from a damaged header that reads nothing proves no record of its own.
            if !(guessed && read == 0) {
                self.cut_records += 1;
            }
            damaged_at = at.max(from);
        }
        if let Some(end) = last_end {
            self.cut_end = end.max(self.cut_at);
        }
        Ok(())
    }
}

/// Valid page headers of the log, in LSN order: page start and continuation length.
fn written_pages(reader: &Reader) -> Result<Vec<(u64, u64)>, Error> {
    let mut pages: Vec<(u64, u64)> = reader
        .page_headers()?
        .into_iter()
        .filter_map(|p| p.header.map(|h| (u64::from(p.page_lsn), h.rem_len as u64)))
        .collect();
    pages.sort_unstable();
    Ok(pages)
}

/// The first record boundary on a page after the one holding `at`.
fn boundary_after(geo: inspect::Geometry, pages: &[(u64, u64)], at: u64) -> Option<u64> {
    pages
        .iter()
        .filter(|(page, _)| *page > geo.page_start(Lsn(at)).0)
        .map(|&(page, rem)| (page, geo.advance(geo.skip_headers(Lsn(page)), rem).0))
        .find(|&(page, b)| b < page + geo.page_size)
        .map(|(_, b)| b)
}

/// Where the record after the damaged one at `start` begins, by its header as stored (record
/// headers are plaintext except in pagelevel). `None` when the header cannot be read.
fn after_damaged_record(reader: &Reader, start: u64) -> Option<u64> {
    if reader.mode() == Mode::PageLevel {
        return None;
    }
    let geo = reader.geometry();
    let mut disk = Disk::new(reader);
    let max = inspect::RECORD_HEADER_ENCRYPTED;
    let plain = disk
        .stream(start, inspect::RECORD_HEADER_PLAIN)
        .ok()
        .and_then(|b| b.get(inspect::REC_FLAGS_AT).copied())?;
    let hlen = inspect::header_len_for_flags(plain).min(max);
    let bytes = disk.stream(start, hlen).ok()?;
    let header = RecordHeader::decode(&bytes).ok()?;
    let next = geo
        .advance(
            Lsn(start),
            (header.len_bytes() + header.len as usize) as u64,
        )
        .0;
    (next > start).then_some(next)
}

/// Maps a survey's library error to the tool's failure.
pub fn fail(e: &Error, keys: &crate::fail::KeyContext<'_>) -> Fail {
    Fail::from_wal_with_keys(e, keys)
}
