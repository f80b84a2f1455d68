//! Recovery: what a writer opening an existing log resumes from. `recover` finds the end of
//! the valid log, replays records on the way when asked, and truncates the torn tail; the
//! writer's open (`writer/open.rs`) claims the directory before and decides how to resume
//! after.
//!
//! Recovery reads forward from a record boundary near the end (or from the replay start) with
//! the reader's own cursor. The first record that is not valid ends the log, unless a later
//! page proves the log was durable beyond it: then it is corruption and the open fails rather
//! than silently dropping acknowledged records (that rule, the proven start and the truncation
//! are in `crate::tail`). Everything after the end is zeroed (the tail
//! segment) or removed (later segments) before writing resumes, so stale bytes can never be
//! read as part of the log again. The scan reports its progress to the listener (`Progress`).

use std::time::{Duration, Instant};

use crate::Lsn;
use crate::config::RecoveryMode;
use crate::crypto::Keys;
use crate::error::{Error, Result};
use crate::events::{EventListener, RecoveryProgress, Salvage};
use crate::format::{self, Geometry};
use crate::reader::ahead::{PageFeed, prefetch_pages};
use crate::reader::{
    Cursor, LogFiles, Record, Step, Stored, check_record_start, classify, durable_past,
};
use crate::tail;

/// A replay callback and the LSN from which it wants records.
pub(crate) type Replay<'a> = Option<(Lsn, &'a mut dyn FnMut(Record) -> Result<()>)>;

/// What recovery found and did: where the writer resumes, and what the open reports.
pub(crate) struct Recovered {
    /// Where reading started.
    pub(crate) scanned_from: Lsn,
    /// End of the valid log: the next record goes here.
    pub(crate) end: Lsn,
    /// The valid prefix of the page holding `end`, decrypted, and its continuation length.
    pub(crate) tail_page: Option<(Vec<u8>, u32)>,
    /// Damage cut away by [`RecoveryMode::TruncateAtDamage`].
    pub(crate) salvaged: Option<Salvage>,
    /// Records handed to the replay callback.
    pub(crate) replayed: u64,
}

/// Finds the end of the valid log in `files`, hands every record from the replay's `from` on
/// to its callback, and truncates everything after the end (`tail::truncate_after`). Nothing is
/// truncated when the scan or the callback fails. The listener hears of the scan's progress.
pub(crate) fn recover(
    files: &LogFiles,
    keys: &Keys,
    policy: RecoveryMode,
    replay: Replay<'_>,
    listener: Option<&dyn EventListener>,
) -> Result<Recovered> {
    let proven = authenticated_start(files, keys, tail::proven_start(files)?)?;
    // Salvage looks for the first damage anywhere in the log, so it reads from the oldest record.
    let scan_base = match policy {
        RecoveryMode::RefuseDamage => proven,
        RecoveryMode::TruncateAtDamage => replay_start(files, Lsn::default(), proven)?,
    };
    let checkpoint = replay.as_ref().map(|(from, _)| *from);
    let scan_from = match checkpoint {
        None => scan_base,
        Some(from) => replay_start(files, from, scan_base)?,
    };
    let mut progress = Progress::new(listener, scan_from, files.end_of_files());
    let (scanned, replayed) = match replay {
        None => {
            let cursor = Cursor::reading_ahead(files, scan_from);
            // Nothing is replayed: a record the scan authenticated (decrypted) is wiped.
            let deliver = |stored: Stored| {
                stored.discard();
                Ok(())
            };
            (
                read_to_end(cursor, (files, keys), policy, &mut progress, deliver)?,
                0,
            )
        }
        Some((from, replay)) => {
            let scan = Scan {
                start: scan_from,
                policy,
                progress: &mut progress,
            };
            replay_records(files, keys, scan, from, replay)?
        }
    };
    progress.finish();
    let ScanEnd {
        end,
        tail_page,
        salvaged,
    } = scanned;
    // A checkpoint past the end: the log is not the one the engine checkpointed. Refused
    // before anything is truncated.
    if let Some(checkpoint) = checkpoint
        && files.geo.skip_headers(checkpoint) > files.geo.skip_headers(end)
    {
        return Err(Error::CheckpointBeyondEnd {
            dir: files.dir.clone(),
            checkpoint,
            end: Some(end),
        });
    }
    tail::truncate_after(files, end, proven)?;
    Ok(Recovered {
        scanned_from: scan_from,
        end,
        tail_page,
        salvaged,
        replayed,
    })
}

/// Where the valid log ends, and the valid prefix of the page holding the end.
struct ScanEnd {
    end: Lsn,
    tail_page: Option<(Vec<u8>, u32)>,
    /// Damage cut away by [`RecoveryMode::TruncateAtDamage`].
    salvaged: Option<Salvage>,
}

/// Reads every record from the cursor's position to the end of the valid log, handing each to
/// `deliver`. Damage that later pages prove was durable is an error under
/// [`RecoveryMode::RefuseDamage`] and the end of the log under [`RecoveryMode::TruncateAtDamage`];
/// otherwise the first invalid record is the end (a torn tail).
fn read_to_end<E: From<Error>>(
    mut cursor: Cursor<'_>,
    files: (&LogFiles, &Keys),
    policy: RecoveryMode,
    progress: &mut Progress<'_>,
    mut deliver: impl FnMut(Stored) -> std::result::Result<(), E>,
) -> std::result::Result<ScanEnd, E> {
    loop {
        let until = Lsn(u64::MAX);
        if let Some(end) = read_until(&mut cursor, files, policy, until, progress, &mut deliver)? {
            return Ok(end);
        }
    }
}

/// Like [`read_to_end`], but stops (returning `None`) at the first record boundary at or
/// past `until` when the log goes on beyond it.
///
/// In a perrecord-gcm log every record read is authenticated here, whether it is replayed or
/// not (a plain open replays nothing): a record whose tag fails is the end of the log when no
/// page vouches for the log beyond it (the torn tail's rule; a record forged past the end,
/// its checksum made right without the key, is cut away with the tail), and the error when one
/// does. Before, the writer's open took such a record for part of the log, resumed after it,
/// and every record it then acknowledged sat behind a record no reader gets past.
fn read_until<E: From<Error>>(
    cursor: &mut Cursor<'_>,
    (files, keys): (&LogFiles, &Keys),
    policy: RecoveryMode,
    until: Lsn,
    progress: &mut Progress<'_>,
    deliver: &mut impl FnMut(Stored) -> std::result::Result<(), E>,
) -> std::result::Result<Option<ScanEnd>, E> {
    let mut salvaged = None;
    let end = loop {
        if cursor.position() >= until {
            return Ok(None);
        }
        match cursor.next()? {
            Step::Record(mut stored) => {
                if let Some(end) = authenticate(&mut stored, files, keys)? {
                    break end;
                }
                deliver(stored)?;
                progress.record_read(cursor.position());
            }
            Step::End(invalid) => {
                if let Some(error) = classify(files, invalid.clone())? {
                    salvaged = Some(salvage(files, policy, invalid.lsn, error)?);
                }
                break invalid.lsn;
            }
        }
    };
    let tail_page = tail_prefix(cursor, files.geo, end)?;
    Ok(Some(ScanEnd {
        end,
        tail_page,
        salvaged,
    }))
}

/// Checks the tag of an authenticated record (perrecord-gcm) and decrypts it in place, as the
/// replay's delivery would first (which then has only a compressed payload's decompression
/// left; a record not delivered is wiped). `Some(lsn)`: the tag failed and no page header
/// vouches for the log past the record, so the log ends at it. A failure a page vouches for is
/// the error. Records of the other modes are left as they are.
fn authenticate(stored: &mut Stored, files: &LogFiles, keys: &Keys) -> Result<Option<Lsn>> {
    if stored.authenticate(keys)? {
        return Ok(None);
    }
    let lsn = stored.lsn;
    if durable_past(files, lsn)? {
        let key_id = stored.header.encryption.map_or(0, |(id, _)| id);
        return Err(Error::AuthenticationFailed {
            at: stored.at,
            key_id,
        });
    }
    Ok(Some(lsn))
}

/// The recovery policy's decision about damage proven to lie inside the durable log: the
/// damage itself as the error, or (when the configuration asked for it) a cut at `end`, the
/// start of the first damaged record.
fn salvage(files: &LogFiles, policy: RecoveryMode, end: Lsn, damage: Error) -> Result<Salvage> {
    match (policy, damage) {
        (RecoveryMode::TruncateAtDamage, Error::Corrupt { at, kind }) => Ok(Salvage {
            at,
            kind,
            cut_at: end,
            files_ended_at: files.end_of_files(),
        }),
        (_, damage) => Err(damage),
    }
}

/// Log bytes a replay reads on the caller's thread alone before it starts a second thread:
/// small logs (tests, a short tail after a checkpoint) do not pay for a thread.
const PIPELINE_AFTER_BYTES: u64 = 1 << 20;
/// Where a scan starts, what it does with damage, and whom it tells how far it has come.
struct Scan<'a, 'l> {
    start: Lsn,
    policy: RecoveryMode,
    progress: &'a mut Progress<'l>,
}

/// Hands every record from `from` on (reading from `scan.start`) to `replay`, in LSN order, and
/// finds the end of the valid log. The first [`PIPELINE_AFTER_BYTES`] are read on the caller's
/// thread; past them a second thread takes part ([`replay_prefetched`]).
/// Every error, and every decision between a torn tail and damage, is made by the same cursor
/// code at the same record either way.
fn replay_records(
    files: &LogFiles,
    keys: &Keys,
    scan: Scan<'_, '_>,
    from: Lsn,
    replay: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<(ScanEnd, u64)> {
    let Scan {
        start,
        policy,
        progress,
    } = scan;
    let mut replayed = 0;
    let mut deliver = |stored: Stored| -> Result<()> {
        if stored.lsn >= from {
            replay(stored.into_record(Some(keys))?)?;
            replayed += 1;
        } else {
            stored.discard();
        }
        Ok(())
    };
    let mut cursor = Cursor::reading_ahead(files, start);
    let until = start.saturating_add(PIPELINE_AFTER_BYTES);
    let scope = (files, keys);
    if let Some(scanned) = read_until(&mut cursor, scope, policy, until, progress, &mut deliver)? {
        return Ok((scanned, replayed));
    }
    let scanned = replay_prefetched(cursor, scope, policy, progress, &mut deliver)?;
    Ok((scanned, replayed))
}

/// Replays in two stages on two threads. A prefetching thread (`reader::ahead`) reads pages in
/// large chunks, checks their headers, decrypts pagelevel bodies and, for perrecord logs,
/// checks each record's CRC and decrypts its payload into buffers of its own (or makes its
/// keystream); the caller's thread parses records, makes every other check, takes the
/// decrypted payloads (or checks the CRC and decrypts itself) and applies them, in LSN order.
/// The AES work encryption adds to a replay thus runs beside the parsing and applying, on the
/// thread that a plaintext replay leaves nearly idle; how the two threads share it is in
/// `prefetch_pages`.
fn replay_prefetched(
    cursor: Cursor<'_>,
    (files, keys): (&LogFiles, &Keys),
    policy: RecoveryMode,
    progress: &mut Progress<'_>,
    deliver: &mut impl FnMut(Stored) -> Result<()>,
) -> Result<ScanEnd> {
    let from = cursor.position();
    let (feed, ends) = PageFeed::channels();
    std::thread::scope(|scope| {
        let prefetcher = scope.spawn(move || prefetch_pages(files, from, ends));
        // Returning (or unwinding) drops the cursor and with it the feed, so the prefetching
        // thread's next send fails and it returns: the join below (or the scope's own wait
        // when `deliver` panicked) cannot block on it.
        let scanned = read_to_end(
            cursor.with_feed(feed),
            (files, keys),
            policy,
            progress,
            deliver,
        );
        if let Err(panic) = prefetcher.join() {
            std::panic::resume_unwind(panic);
        }
        scanned
    })
}

/// The proven start (`tail::proven_start`) as a perrecord-gcm log may rely on it: page headers
/// carry no tag, and a segment file added past the end with a durable hint in its first page
/// (its checksums made right without the key) was a proven start past the real end of the log,
/// so the open scanned (and checked the tags of) none of what lay between. The writer then
/// resumed in the added segment, and every record it acknowledged sat behind the gap or a
/// forged record that readers stop at. So the start is taken only when the records from the
/// nearest record boundary before it, tags checked, lead to it (records sealed at their
/// LSNs, which only the key's holder makes: the log ran on to the start); otherwise the scan
/// starts at the oldest record and meets whatever broke the walk. Other modes promise nothing
/// against a writer of the files, and keep the start as it is.
fn authenticated_start(files: &LogFiles, keys: &Keys, proven: Lsn) -> Result<Lsn> {
    let geo = files.geo;
    let oldest = files.segments[0].header.start;
    let oldest_first = crate::reader::first_record_in_segment(files, oldest)?
        .unwrap_or_else(|| geo.skip_headers(oldest));
    if files.mode != crate::Mode::PerRecordGcm || proven <= oldest_first {
        return Ok(proven);
    }
    // The nearest record boundary before `proven`: the first record starting in the nearest
    // page before it where one starts (as far back as the longest record reaches, at most to
    // the oldest record). A continuation length rewritten to point elsewhere fails the walk
    // and the scan goes back to the oldest record.
    let mut page = geo.page_start(proven);
    let walk_from = loop {
        if page <= oldest_first {
            break oldest_first;
        }
        page = page - geo.page_size;
        if geo.is_header_page(page) {
            continue;
        }
        // A page never written (after a segment switch, the rest of its segment) or damaged:
        // further back, and the walk steps over it as a reader does, or fails.
        let Some(header) = files.read_page_header(page)? else {
            continue;
        };
        // A continuation that fills the page body leaves no record start in it (no `advance`
        // over the pages it runs on: a long record would make this walk quadratic).
        let body = geo.page_size - format::PAGE_HEADER_LEN as u64;
        if u64::from(header.rem_len) < body {
            let first = page + format::PAGE_HEADER_LEN as u64 + u64::from(header.rem_len);
            if first < proven {
                break first;
            }
        }
    };
    match crate::reader::authenticated_walk_reaches(files, keys, walk_from, proven)? {
        true => Ok(proven),
        false => Ok(oldest_first),
    }
}

/// Where a replay from `from` starts reading: the earlier of `from` (which must be where a
/// record starts, or `Lsn::default()` for the oldest record) and the proven start.
fn replay_start(files: &LogFiles, from: Lsn, proven: Lsn) -> Result<Lsn> {
    let oldest = files.segments[0].header.start;
    // The first record of the oldest segment, checked (`record_start` says how).
    if from == Lsn(0) || from == oldest {
        return Ok(crate::reader::first_record_in_segment(files, oldest)?
            .unwrap_or_else(|| files.geo.skip_headers(oldest)));
    }
    // Purged: as a reader says it, naming the oldest segment left (an older control file put
    // back names a checkpoint a later purge removed).
    if from < oldest {
        return Err(Error::Purged {
            needed: from,
            oldest,
        });
    }
    // A position on a page or segment boundary (a record's end, `end_lsn()`) stands for the
    // first record after the headers there.
    let pos = files.geo.skip_headers(from);
    if pos >= files.end_of_files() {
        // Past the files: nothing to replay, and `recover` refuses it unless the log's end
        // turns out to be there (a log ending on the last segment's boundary).
        return Ok(proven);
    }
    check_record_start(files, pos)?;
    Ok(pos.min(proven))
}

/// The valid bytes of the page holding `end` (decrypted) and its continuation length, so the
/// writer can rewrite that page with the old records intact.
fn tail_prefix(cursor: &mut Cursor<'_>, geo: Geometry, end: Lsn) -> Result<Option<(Vec<u8>, u32)>> {
    let page = geo.page_start(end);
    if end.0.is_multiple_of(geo.page_size) || end <= page + format::PAGE_HEADER_LEN as u64 {
        return Ok(None);
    }
    if !cursor.load(page)? {
        return Ok(None);
    }
    Ok(cursor
        .loaded_page(page)
        .map(|(header, image)| (image[..(end - page) as usize].to_vec(), header.rem_len)))
}

/// Log bytes scanned between two progress reports at most.
const PROGRESS_EVERY_BYTES: u64 = 64 << 20;
/// Time between two progress reports at most (the clock is read once per
/// [`PROGRESS_CLOCK_EVERY_BYTES`]).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// Log bytes scanned between two looks at the clock: a record costs a comparison, not a clock
/// read.
const PROGRESS_CLOCK_EVERY_BYTES: u64 = 1 << 20;

/// Counts what the scan read and tells the listener at a bounded rate
/// ([`EventListener::on_recovery_progress`]), and once more at the end.
struct Progress<'l> {
    listener: Option<&'l dyn EventListener>,
    /// Where the scan started.
    from: Lsn,
    /// Bytes from `from` to the end of the last segment file.
    total_bytes: u64,
    records: u64,
    /// `bytes_read` of the last report.
    reported_bytes: u64,
    reported_at: Instant,
    /// `bytes_read` at which to look at the clock next.
    next_clock_bytes: u64,
}

impl<'l> Progress<'l> {
    fn new(listener: Option<&'l dyn EventListener>, from: Lsn, end_of_files: Lsn) -> Self {
        Progress {
            listener,
            from,
            total_bytes: end_of_files.checked_distance(from).unwrap_or(0),
            records: 0,
            reported_bytes: 0,
            reported_at: Instant::now(),
            next_clock_bytes: PROGRESS_CLOCK_EVERY_BYTES,
        }
    }

    /// A record was read; the scan is now at `position`.
    fn record_read(&mut self, position: Lsn) {
        self.records += 1;
        let bytes = position
            .checked_distance(self.from)
            .unwrap_or(0)
            .min(self.total_bytes);
        if self.listener.is_none() || bytes < self.next_clock_bytes {
            return;
        }
        self.next_clock_bytes = bytes.saturating_add(PROGRESS_CLOCK_EVERY_BYTES);
        if bytes - self.reported_bytes >= PROGRESS_EVERY_BYTES
            || self.reported_at.elapsed() >= PROGRESS_EVERY
        {
            self.report(bytes, false);
        }
    }

    /// The scan ended: the last report, at the total.
    fn finish(&mut self) {
        self.report(self.total_bytes, true);
    }

    fn report(&mut self, bytes_read: u64, done: bool) {
        let Some(listener) = self.listener else {
            return;
        };
        listener.on_recovery_progress(&RecoveryProgress {
            bytes_read,
            bytes_total: self.total_bytes,
            records_read: self.records,
            done,
        });
        self.reported_bytes = bytes_read;
        self.reported_at = Instant::now();
    }
}
