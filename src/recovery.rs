//! Opening a log for writing: end-of-log detection, torn-tail truncation and replay.
//!
//! Recovery reads forward from a record boundary near the end (or from the replay start) with
//! the reader's own cursor. The first record that is not valid ends the log, unless a later
//! page proves the log was durable beyond it: then it is corruption and the open fails rather
//! than silently dropping acknowledged records. Everything after the end is zeroed (the tail
//! segment) or removed (later segments) before writing resumes, so stale bytes can never be
//! read as part of the log again.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::Lsn;
use crate::config::{Config, Mode, RecoveryMode};
use crate::crypto::{Keys, random_u64};
use crate::error::{Error, Result};
use crate::events::{RecoverySummary, Salvage};
use crate::format::{self, Geometry, SegmentHeader};
use crate::reader::{Cursor, LogFiles, Record, Step, Stored, list_segments};
use crate::storage::Storage;
use crate::writer::{Resume, TMP_SUFFIX, Wal, create_segment};

impl Wal {
    /// Creates the log in `dir` (an empty or missing directory), or opens the log there: finds
    /// the end of the valid log, truncates a torn tail and continues writing at the end.
    ///
    /// The single-writer lock is an exclusive `flock` on the directory's `LOCK` file. A child
    /// process forked while a `Wal` was open holds a copy of it until it execs or exits.
    ///
    /// Fails with [`Error::Locked`] if another `Wal` has the directory open, with
    /// [`Error::Mismatch`] if the log was created in another mode, with [`Error::WrongKey`] or
    /// [`Error::MissingKey`] for keys that do not fit, and with [`Error::Corrupt`] when valid
    /// records follow a damaged one (unless the configuration's [`RecoveryMode`] says to cut
    /// the log there). Page and segment sizes set in the configuration must match an existing
    /// log's ([`Error::Mismatch`]); left at their defaults, the log's own are used.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Wal> {
        open(dir.as_ref(), config, None)
    }

    /// Opens the log like [`Wal::open`] and, in the same pass that finds the end of the log,
    /// hands every record from `from` on to `replay`, in LSN order. Use `Lsn::default()` to
    /// replay from the oldest record. An error from `replay` aborts the open.
    ///
    /// `replay` runs on the calling thread while a helper thread reads ahead (a few MiB at
    /// most), checks checksums and decrypts, so decoding overlaps with applying.
    pub fn open_and_replay<F>(
        dir: impl AsRef<Path>,
        config: Config,
        from: Lsn,
        mut replay: F,
    ) -> Result<Wal>
    where
        F: FnMut(Record) -> Result<()>,
    {
        open(dir.as_ref(), config, Some((from, &mut replay)))
    }
}

type Replay<'a> = Option<(Lsn, &'a mut dyn FnMut(Record) -> Result<()>)>;

fn open(dir: &Path, config: Config, replay: Replay<'_>) -> Result<Wal> {
    let started = Instant::now();
    let mut config = config;
    if let Some(store) = &config.key_store {
        // The store's current keys, even if it was rotated since the configuration was made.
        config.keys = store.ring();
    }
    config.validate()?;
    let storage = config.storage.clone();
    create_log_dir(storage.as_ref(), dir)?;
    let lock = storage
        .lock_dir(dir)
        .map_err(|e| Error::io("lock log directory", dir, e))?
        .ok_or_else(|| Error::Locked(dir.to_path_buf()))?;
    remove_unfinished_segments(&config, dir)?;

    if list_segments(storage.as_ref(), dir)?.is_empty() {
        let geo = Geometry {
            page_size: config.page_size,
            segment_size: config.segment_size,
        };
        let log_id = random_u64("a log id")?;
        let keys = Arc::new(Keys::new(&config.keys, log_id));
        let header = SegmentHeader {
            mode: config.mode,
            geometry: geo,
            log_id,
            start: Lsn(0),
            key_checks: if config.mode.is_encrypted() {
                keys.active_check_values()
            } else {
                Vec::new()
            },
        };
        create_segment(storage.as_ref(), dir, &header)?;
        let end = geo.skip_headers(0);
        let resume = Resume {
            log_id: header.log_id,
            geo,
            end,
            tail_page: None,
        };
        let wal = Wal::start(dir, &config, keys, resume, lock)?;
        wal.recovered(RecoverySummary {
            created: true,
            scanned_from: Lsn(end),
            end: Lsn(end),
            replayed: 0,
            salvaged: None,
            duration: started.elapsed(),
        });
        return Ok(wal);
    }

    let files = LogFiles::open(dir, storage.clone(), Some(&config.keys))?;
    config.check_existing(files.mode, files.geo)?;
    let keys = Arc::new(Keys::new(&config.keys, files.log_id));
    let proven = proven_start(&files)?;
    // Salvage looks for the first damage anywhere in the log, so it reads from the oldest record.
    let scan_base = match config.recovery {
        RecoveryMode::RefuseDamage => proven,
        RecoveryMode::TruncateAtDamage => replay_start(&files, Lsn::default(), proven)?,
    };
    let scan_from = match replay.as_ref() {
        None => scan_base,
        Some((from, _)) => replay_start(&files, *from, scan_base)?,
    };
    let policy = config.recovery;
    let (scanned, replayed) = match replay {
        None => (read_to_end(&files, scan_from, policy, |_| Ok(()))?, 0),
        Some((from, replay)) => replay_pipelined(&files, &keys, scan_from, from, policy, replay)?,
    };
    let ScanEnd {
        end,
        tail_page,
        salvaged,
    } = scanned;
    truncate_after(&files, end, proven)?;
    let fresh_page = resumes_on_fresh_page(config.mode, files.geo, end);
    // A fresh page in the next segment is a new segment, made with the current keys.
    let next_page = files.geo.page_start(end) + files.geo.page_size;
    let needs_switch = needs_new_segment(&files, &keys, end)
        && !(fresh_page && files.geo.segment_start(next_page) != files.geo.segment_start(end));
    let geo = files.geo;
    let resume = Resume {
        log_id: files.log_id,
        geo,
        end,
        // A pagelevel writer never rewrites the page holding the end (see
        // `resumes_on_fresh_page`); the other modes rewrite its valid prefix byte for byte.
        tail_page: tail_page.filter(|_| !fresh_page),
    };
    drop(files);
    let wal = Wal::start(dir, &config, keys, resume, lock)?;
    if fresh_page {
        wal.resume_on_fresh_page()?;
    }
    if needs_switch {
        wal.switch_segment()?;
    } else if salvaged.is_some() {
        wal.restamp_tail()?;
    }
    wal.recovered(RecoverySummary {
        created: false,
        scanned_from: Lsn(scan_from),
        end: Lsn(end),
        replayed,
        salvaged,
        duration: started.elapsed(),
    });
    Ok(wal)
}

/// True when a writer opening a log that ends at `end` must continue on the next page: in
/// pagelevel mode, when `end` lies inside a page body that already holds records.
fn resumes_on_fresh_page(mode: Mode, geo: Geometry, end: u64) -> bool {
    let page = geo.page_start(end);
    mode == Mode::PageLevel && end > page + format::PAGE_HEADER_LEN as u64
}

/// Where the valid log ends, and the valid prefix of the page holding the end.
struct ScanEnd {
    end: u64,
    tail_page: Option<(Vec<u8>, u32)>,
    /// Damage cut away by [`RecoveryMode::TruncateAtDamage`].
    salvaged: Option<Salvage>,
}

/// Reads every record from `start` to the end of the valid log, handing each to `deliver`.
/// Damage that later pages prove was durable is an error under [`RecoveryMode::RefuseDamage`]
/// and the end of the log under [`RecoveryMode::TruncateAtDamage`]; otherwise the first invalid
/// record is the end (a torn tail).
fn read_to_end<E: From<Error>>(
    files: &LogFiles,
    start: u64,
    policy: RecoveryMode,
    mut deliver: impl FnMut(Stored) -> std::result::Result<(), E>,
) -> std::result::Result<ScanEnd, E> {
    let mut cursor = Cursor::new(files, start);
    let mut salvaged = None;
    let end = loop {
        match cursor.next()? {
            Step::Record(stored) => deliver(stored)?,
            Step::End(invalid) => {
                if let Some(error) = files.classify(invalid.clone())? {
                    salvaged = Some(salvage(files, policy, invalid.lsn, error)?);
                }
                break invalid.lsn;
            }
        }
    };
    let tail_page = tail_prefix(&mut cursor, files.geo, end)?;
    Ok(ScanEnd {
        end,
        tail_page,
        salvaged,
    })
}

/// The recovery policy's decision about damage proven to lie inside the durable log: the
/// damage itself as the error, or (when the configuration asked for it) a cut at `end`, the
/// start of the first damaged record.
fn salvage(files: &LogFiles, policy: RecoveryMode, end: u64, damage: Error) -> Result<Salvage> {
    match (policy, damage) {
        (RecoveryMode::TruncateAtDamage, Error::Corrupt { at, kind }) => Ok(Salvage {
            at,
            kind,
            cut_at: Lsn(end),
            files_ended_at: Lsn(files.end_of_files()),
        }),
        (_, damage) => Err(damage),
    }
}

/// Records per batch handed from the reading thread to the replaying one.
const REPLAY_BATCH_RECORDS: usize = 256;
/// Payload bytes after which a batch is handed over early.
const REPLAY_BATCH_BYTES: usize = 1 << 20;
/// Batches in flight: bounds the memory of the pipeline to a few MiB.
const REPLAY_PIPELINE_DEPTH: usize = 4;

/// Replays in two stages on two threads: a reader thread reads pages and checks CRCs while the
/// calling thread runs `replay` on earlier batches, in LSN order. Decryption (perrecord) goes
/// to whichever stage has slack: the reader decrypts a batch when the caller still has batches
/// waiting (applying is the bottleneck), and leaves it to the caller when the caller is idle
/// (reading is). Either way it overlaps with the other stage instead of adding to it. A failing
/// callback stops the reader; its error is returned.
fn replay_pipelined(
    files: &LogFiles,
    keys: &Keys,
    start: u64,
    from: Lsn,
    policy: RecoveryMode,
    replay: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<(ScanEnd, u64)> {
    let (batches, received) = crossbeam::channel::bounded::<Vec<Stored>>(REPLAY_PIPELINE_DEPTH);
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let mut batch = Vec::with_capacity(REPLAY_BATCH_RECORDS);
            let mut batch_bytes = 0;
            let hand_over = |batch: &mut Vec<Stored>| -> std::result::Result<(), ReplayStop> {
                let mut full = std::mem::replace(batch, Vec::with_capacity(REPLAY_BATCH_RECORDS));
                if !batches.is_empty() {
                    for stored in &mut full {
                        stored.decrypt(Some(keys))?;
                    }
                }
                // A closed channel means the callback failed; its error is what the caller
                // sees, so this only stops the reading.
                batches.send(full).map_err(|_| ReplayStop::CallbackFailed)
            };
            let scanned = read_to_end(
                files,
                start,
                policy,
                |stored| -> std::result::Result<(), ReplayStop> {
                    if stored.lsn < from {
                        return Ok(());
                    }
                    batch_bytes += stored.stored.len();
                    batch.push(stored);
                    if batch.len() >= REPLAY_BATCH_RECORDS || batch_bytes >= REPLAY_BATCH_BYTES {
                        batch_bytes = 0;
                        hand_over(&mut batch)?;
                    }
                    Ok(())
                },
            )?;
            if !batch.is_empty() {
                hand_over(&mut batch)?;
            }
            Ok(scanned)
        });
        let mut applied = Ok(());
        let mut replayed = 0;
        'batches: for batch in received.iter() {
            for stored in batch {
                if let Err(e) = stored.into_record(Some(keys)).and_then(&mut *replay) {
                    applied = Err(e);
                    break 'batches;
                }
                replayed += 1;
            }
        }
        drop(received);
        let scanned = match reader.join() {
            Ok(scanned) => scanned,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        applied?;
        match scanned {
            Ok(scanned) => Ok((scanned, replayed)),
            Err(ReplayStop::Failed(e)) => Err(e),
            // Only after the callback failed, whose error was returned just above.
            Err(ReplayStop::CallbackFailed) => unreachable!("the replay callback failed"),
        }
    })
}

/// Creates the log directory (and missing parents) and makes every new directory entry
/// durable by fsyncing the directory that holds it: without that, a file system that does not
/// persist a new directory with its children may lose the whole log in a power cut although
/// flushes returned Ok.
fn create_log_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    for ancestor in dir.ancestors() {
        if ancestor.as_os_str().is_empty()
            || storage
                .exists(ancestor)
                .map_err(|e| Error::io("look up log directory", ancestor, e))?
        {
            break;
        }
        missing.push(ancestor);
    }
    storage
        .create_dir_all(dir)
        .map_err(|e| Error::io("create log directory", dir, e))?;
    for created in missing.iter().rev() {
        let parent = match created.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        storage
            .sync_dir(parent)
            .map_err(|e| Error::io("sync directory", parent, e))?;
    }
    Ok(())
}

/// Why the reading stage of a pipelined replay stopped early.
enum ReplayStop {
    /// Reading failed.
    Failed(Error),
    /// The applying stage stopped because the replay callback failed.
    CallbackFailed,
}

impl From<Error> for ReplayStop {
    fn from(error: Error) -> Self {
        ReplayStop::Failed(error)
    }
}

/// Removes segment files left half-made by a crash or a failed creation.
fn remove_unfinished_segments(config: &Config, dir: &Path) -> Result<()> {
    let names = config
        .storage
        .list(dir)
        .map_err(|e| Error::io("list log directory", dir, e))?;
    for name in names {
        if let Some(base) = name.strip_suffix(TMP_SUFFIX)
            && format::parse_segment_file_name(base).is_some()
        {
            let path = dir.join(&name);
            config
                .storage
                .remove(&path)
                .map_err(|e| Error::io("remove unfinished segment", &path, e))?;
        }
    }
    Ok(())
}

/// A record boundary from which reading surely passes every record that reaches into the last
/// segment and every hole a crash may have left. Walking back from the newest segment, a
/// candidate is the first record boundary of a segment, or, when a record runs into that
/// segment from the one before, the first record boundary of the one before (so the crossing
/// record is read and checked). A candidate is taken only when a page from there on was written
/// after the log was durable through it: otherwise an unsynced page of an earlier segment may
/// have been lost in a crash while later ones survived, and the scan must reach that hole.
/// Everything before the returned position is known to be durable.
fn proven_start(files: &LogFiles) -> Result<u64> {
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

/// Where a replay from `from` starts reading: the earlier of `from` (which must be where a
/// record starts, or `Lsn::default()` for the oldest record) and the proven start.
fn replay_start(files: &LogFiles, from: Lsn, proven: u64) -> Result<u64> {
    let oldest = u64::from(files.segments[0].header.start);
    let from = u64::from(from);
    if from == 0 || from == oldest {
        return Ok(files
            .first_record_in_segment(oldest)?
            .unwrap_or_else(|| files.geo.skip_headers(oldest)));
    }
    if from < oldest || from > files.end_of_files() {
        return Err(Error::LsnNotAvailable(Lsn(from)));
    }
    files.check_record_start(from)?;
    Ok(from.min(proven))
}

/// The valid bytes of the page holding `end` (decrypted) and its continuation length, so the
/// writer can rewrite that page with the old records intact.
fn tail_prefix(cursor: &mut Cursor<'_>, geo: Geometry, end: u64) -> Result<Option<(Vec<u8>, u32)>> {
    let page = geo.page_start(end);
    if end.is_multiple_of(geo.page_size) || end <= page + format::PAGE_HEADER_LEN as u64 {
        return Ok(None);
    }
    if !cursor.load(page)? {
        return Ok(None);
    }
    Ok(cursor
        .loaded_page(page)
        .map(|(header, image)| (image[..(end - page) as usize].to_vec(), header.rem_len)))
}

/// Zeroes the tail segment after `end`, removes every later segment, and fdatasyncs every
/// segment from the one holding `synced_before` (before which the log is proven durable) to the
/// end: whatever the previous writer left in the page cache becomes durable before new pages
/// claim, through their durable hint, that the log is durable up to `end`.
fn truncate_after(files: &LogFiles, end: u64, synced_before: u64) -> Result<()> {
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

/// True when the segment the log ends in does not list the active key with its check value:
/// new data must then go to a new segment whose header does.
fn needs_new_segment(files: &LogFiles, keys: &Keys, end: u64) -> bool {
    if !files.mode.is_encrypted() || end.is_multiple_of(files.geo.segment_size) {
        return false;
    }
    let Some(seg) = files.segment(files.geo.segment_start(end)) else {
        return false;
    };
    keys.active_check_values()
        .iter()
        .any(|kc| !seg.header.key_checks.contains(kc))
}
