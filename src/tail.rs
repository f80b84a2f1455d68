//! The end of the log: the rule that tells a torn tail from corruption, and what follows from
//! it. Both the reader and recovery stop at the first record that is not valid; this module
//! decides whether that record is the end of the log (a write torn by a crash) or damage to
//! bytes that had been durable, from the durable hints of the page headers written after it
//! (`classify`). Recovery also asks here where reading must start so that every hole a crash
//! may have left is seen (`proven_start`), and cuts the log at the end it found
//! (`truncate_after`), making everything from the proven start durable before writing resumes.

use crate::error::{Error, Result};
use crate::reader::{Invalid, LogFiles};

/// Decides what an invalid record at `lsn` means. A valid page at or after the page
/// holding `lsn` whose durable hint lies beyond `lsn` was written after the record had been
/// made durable: the record was complete once, so this is corruption, never a torn tail.
/// That includes the pages the record itself was read from: a crash cannot damage bytes
/// that were durable before a page was rewritten, since every mode rewrites them byte for
/// byte (pagelevel keeps a page's IV within an open), and a page's hint never exceeds what
/// earlier writes had put on disk. So a torn rewrite ends the log at or after every hint,
/// and damage below a hint comes from outside (bit rot, a lost or misdirected write).
/// Otherwise the record is the torn tail of a crash, the end of the log.
pub(crate) fn classify(files: &LogFiles, invalid: Invalid) -> Result<Option<Error>> {
    let start_page = files.geo.page_start(invalid.lsn);
    for page in files.page_headers_from(start_page)? {
        if let Some(h) = page.header
            && u64::from(h.durable_hint) > invalid.lsn
        {
            return Ok(Some(files.position_error(
                invalid.at,
                invalid.lsn,
                invalid.kind,
            )));
        }
    }
    Ok(None)
}

/// A record boundary from which reading surely passes every record that reaches into the last
/// segment and every hole a crash may have left. Walking back from the newest segment, a
/// candidate is the first record boundary of a segment, or, when a record runs into that
/// segment from the one before, the first record boundary of the one before (so the crossing
/// record is read and checked). A candidate is taken only when a page from there on was written
/// after the log was durable through it: otherwise an unsynced page of an earlier segment may
/// have been lost in a crash while later ones survived, and the scan must reach that hole.
/// Everything before the returned position is known to be durable.
pub(crate) fn proven_start(files: &LogFiles) -> Result<u64> {
    let geo = files.geo;
    let oldest = u64::from(files.segments[0].header.start);
    let oldest_first = files
        .first_record_in_segment(oldest)?
        .unwrap_or_else(|| geo.skip_headers(oldest));
    let mut tail = oldest_first;
    for (i, seg) in files.segments.iter().enumerate().skip(1).rev() {
        let start = u64::from(seg.header.start);
        let page1 = start + geo.page_size;
        let candidate = match files.read_page_header(page1)? {
            Some(h) if h.rem_len == 0 => Some(geo.skip_headers(page1)),
            Some(_) => {
                let previous = u64::from(files.segments[i - 1].header.start);
                files
                    .first_record_in_segment(previous)?
                    .filter(|&first| first < start)
            }
            None => None,
        };
        let Some(first) = candidate else {
            continue;
        };
        let proven = files
            .page_headers_from(geo.page_start(first))?
            .iter()
            .filter_map(|p| p.header)
            .any(|h| u64::from(h.durable_hint) >= first);
        if proven {
            tail = first;
            break;
        }
    }
    Ok(tail)
}

/// Zeroes the tail segment after `end`, removes every later segment, and fdatasyncs every
/// segment from the one holding `synced_before` (before which the log is proven durable) to the
/// end: whatever the previous writer left in the page cache becomes durable before new pages
/// claim, through their durable hint, that the log is durable up to `end`.
pub(crate) fn truncate_after(files: &LogFiles, end: u64, synced_before: u64) -> Result<()> {
    let geo = files.geo;
    let tail_segment = if end.is_multiple_of(geo.segment_size) {
        end - geo.segment_size
    } else {
        geo.segment_start(end)
    };
    let storage = files.storage.as_ref();
    for seg in files.segments.iter().rev() {
        let start = u64::from(seg.header.start);
        if start > tail_segment {
            storage
                .remove(&seg.path)
                .map_err(|e| Error::io("remove segment after the end of the log", &seg.path, e))?;
        } else {
            let file = storage
                .open(&seg.path, true)
                .map_err(|e| Error::io("open segment", &seg.path, e))?;
            if start == tail_segment {
                let keep = end - start;
                file.set_len(keep)
                    .and_then(|()| file.set_len(geo.segment_size))
                    .map_err(|e| Error::io("truncate torn tail of segment", &seg.path, e))?;
            }
            file.sync_data()
                .map_err(|e| Error::io("fdatasync segment", &seg.path, e))?;
            if start <= geo.segment_start(synced_before) {
                break;
            }
        }
    }
    storage
        .sync_dir(&files.dir)
        .map_err(|e| Error::io("sync directory", &files.dir, e))
}
