//! Opening a log: the writer's side of `Wal::open` and `Wal::open_and_replay`. It claims the
//! directory (creates it, takes the single-writer lock, removes half-made segments), creates a
//! new log in an empty one, and otherwise checks the files, has recovery (`crate::recovery`)
//! find and cut the end of the log, and decides how to resume from there: rewriting the tail
//! page, continuing on a fresh page, or switching to a new segment for changed keys.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::recycle::{create_segment, is_unfinished_segment, parse_free_file_name};
use super::segments::new_segment_header;
use super::{Resume, Wal};
use crate::Lsn;
use crate::config::{Config, Mode};
use crate::crypto::{Keys, random_u64};
use crate::error::{Error, Result};
use crate::events::RecoverySummary;
use crate::format::{self, Geometry};
use crate::reader::{LogFiles, Record, list_segments};
use crate::recovery::{self, Recovered, Replay};
use crate::storage::Storage;

impl Wal {
    /// Creates the log in `dir` (an empty or missing directory), or opens the log there: finds
    /// the end of the valid log, truncates a torn tail and continues writing at the end.
    ///
    /// The single-writer lock is an exclusive `flock` on the directory's `LOCK` file. A child
    /// process forked while a `Wal` was open holds a copy of it until it execs or exits.
    ///
    /// Fails with [`Error::Locked`] if another `Wal` has the directory open, with
    /// [`Error::Mismatch`] if the log was created in another mode, with [`Error::WrongKey`] or
    /// [`Error::MissingSegmentKey`] for keys that do not fit (every key id a segment lists must
    /// be in the ring or store, in every mode), and with [`Error::Corrupt`] when valid
    /// records follow a damaged one (unless the configuration's [`RecoveryMode`] says to cut
    /// the log there). Page and segment sizes set in the configuration must match an existing
    /// log's ([`Error::Mismatch`]); left at their defaults, the log's own are used.
    ///
    /// [`RecoveryMode`]: crate::RecoveryMode
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Wal> {
        open(dir.as_ref(), config, None)
    }

    /// Opens the log like [`Wal::open`] and, in the same pass that finds the end of the log,
    /// hands every record from `from` on to `replay`, in LSN order. Use `Lsn::default()` to
    /// replay from the oldest record. An error from `replay` aborts the open.
    ///
    /// `replay` runs on the calling thread. Past the first MiB of log a second thread reads
    /// ahead (1.5 MiB of pages, plus perrecord keystream; a replay holds at most a few MiB),
    /// checks page headers and does the AES work of decryption, while the calling thread
    /// checks each record's checksum, decrypts it only then, and calls `replay`. The second
    /// thread ends before this returns, also when `replay` fails or panics.
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

    /// [`Wal::open_and_replay`] with a callback that returns the engine's own error type: an
    /// error from `apply` aborts the open (nothing is truncated) and comes back as it was;
    /// walcrypt's own errors come back converted with `From`.
    pub fn open_and_apply<F, E>(
        dir: impl AsRef<Path>,
        config: Config,
        from: Lsn,
        mut apply: F,
    ) -> std::result::Result<Wal, E>
    where
        F: FnMut(Record) -> std::result::Result<(), E>,
        E: From<Error>,
    {
        let mut failed: Option<E> = None;
        let opened = Wal::open_and_replay(dir, config, from, |record| {
            apply(record).map_err(|e| {
                failed = Some(e);
                // Stops the replay; the engine's error is what the caller gets.
                Error::Config("replay stopped by the engine's callback".into())
            })
        });
        engine_result(opened, failed)
    }
}

/// What an open whose callback returns the engine's own error type gives back: the engine's
/// error if a callback failed (it stopped the open), else the open's result, walcrypt's error
/// converted with `From`.
pub(super) fn engine_result<E: From<Error>>(
    opened: Result<Wal>,
    failed: Option<E>,
) -> std::result::Result<Wal, E> {
    match (opened, failed) {
        (_, Some(e)) => Err(e),
        (Ok(wal), None) => Ok(wal),
        (Err(e), None) => Err(E::from(e)),
    }
}

/// The single-writer lock on a log directory (`Storage::lock_dir`); dropping it releases it.
pub(super) type DirLock = Box<dyn Send + Sync>;

/// Takes the single-writer lock of `dir` if the directory exists (`None` if it does not: the
/// open creates it and takes the lock then), for an open that must know it holds the log
/// before it calls the engine back (`open_from_checkpoint`'s `restore`). [`Error::Locked`] if
/// another `Wal` has it open.
pub(super) fn lock_existing(config: &Config, dir: &Path) -> Result<Option<DirLock>> {
    let exists = config
        .storage
        .exists(dir)
        .map_err(|e| Error::io("look for log directory", dir, e))?;
    if !exists {
        return Ok(None);
    }
    config
        .storage
        .lock_dir(dir)
        .map_err(|e| Error::io("lock log directory", dir, e))?
        .map(Some)
        .ok_or_else(|| Error::Locked(dir.to_path_buf()))
}

/// `Wal::open_and_replay` holding the directory's lock already (`lock_existing`), when it
/// could be taken before.
pub(super) fn open_and_replay_holding(
    dir: &Path,
    config: Config,
    from: Lsn,
    replay: &mut dyn FnMut(Record) -> Result<()>,
    held: Option<DirLock>,
) -> Result<Wal> {
    open_holding(dir, config, Some((from, replay)), held)
}

/// Claims `dir`, then creates a new log there or has recovery find the end of the existing
/// one, and starts the writer where the log ends.
fn open(dir: &Path, config: Config, replay: Replay<'_>) -> Result<Wal> {
    open_holding(dir, config, replay, None)
}

/// [`open`], with the directory's lock taken already when `held` is given.
fn open_holding(
    dir: &Path,
    config: Config,
    replay: Replay<'_>,
    held: Option<DirLock>,
) -> Result<Wal> {
    let started = Instant::now();
    let mut config = config;
    if let Some(store) = &config.key_store {
        // The store's current keys, even if it was rotated since the configuration was made,
        // and only once its newest generation is durable: records under its active key must
        // never outlive the key in a power cut.
        config.keys = store.ring_for_writing()?;
    }
    check_before_open(&config, dir)?;
    let storage = config.storage.clone();
    if let Some((from, _)) = &replay {
        refuse_checkpoint_without_log(&config, dir, *from)?;
    }
    create_log_dir(storage.as_ref(), dir)?;
    let lock = match held {
        Some(lock) => lock,
        None => storage
            .lock_dir(dir)
            .map_err(|e| Error::io("lock log directory", dir, e))?
            .ok_or_else(|| Error::Locked(dir.to_path_buf()))?,
    };
    remove_unfinished_segments(&config, dir)?;

    if list_segments(storage.as_ref(), dir)?.is_empty() {
        config.validate_sizes()?;
        let geo = config.geometry();
        let log_id = random_u64("a log id")?;
        let keys = Arc::new(Keys::new(&config.keys, log_id)?);
        let header = new_segment_header(config.mode, geo, log_id, Lsn(0), &keys);
        create_segment(storage.as_ref(), dir, &header)?;
        let end = geo.skip_headers(Lsn(0));
        let resume = Resume {
            log_id: header.log_id,
            geo,
            end,
            tail_page: None,
            tail_format: (Lsn(0), format::FORMAT_VERSION),
        };
        let wal = Wal::start(dir, &config, keys, resume, lock)?;
        wal.load_control()?;
        wal.recovered(RecoverySummary {
            created: true,
            scanned_from: end,
            end,
            replayed: 0,
            salvaged: None,
            duration: started.elapsed(),
        });
        return Ok(wal);
    }

    let files = LogFiles::open(dir, storage.clone(), Some(&config.keys))?;
    config.adopt_existing(files.mode, files.geo)?;
    refuse_rolled_back_store(&files, &config)?;
    check_every_listed_key(&files, &config)?;
    let keys = Arc::new(Keys::new(&config.keys, files.log_id)?);
    let Recovered {
        scanned_from,
        end,
        tail_page,
        salvaged,
        replayed,
    } = recovery::recover(
        &files,
        &keys,
        config.recovery,
        replay,
        config.listener.as_deref(),
    )?;
    let fresh_page = resumes_on_fresh_page(config.mode, files.geo, end);
    // A fresh page in the next segment is a new segment, made with the current keys.
    let next_page = files.geo.page_start(end) + files.geo.page_size;
    let needs_switch = needs_new_segment(&files, &keys, end)
        && !(fresh_page && files.geo.segment_start(next_page) != files.geo.segment_start(end));
    let geo = files.geo;
    // The hint the tail page carries. Below the end, the open recovered records a previous
    // writer wrote but never synced (the scan found them, `truncate_after` synced them): a
    // follower, which goes by hints, would not see them until the next write-out (`restamp`).
    let tail_hint = match fresh_page || tail_page.is_none() {
        true => None,
        false => files
            .read_page_header(geo.page_start(end))?
            .map(|h| h.durable_hint),
    };
    // The writer will not rewrite the page its last records lie in: the log ends where a
    // page's body begins (they lie in the page before), or a pagelevel writer resumes on a
    // fresh page. That page's header gets the hint in place.
    if !needs_switch && (fresh_page || tail_page.is_none()) {
        stamp_last_page_hint(&files, end)?;
    }
    let resume = Resume {
        log_id: files.log_id,
        geo,
        end,
        // A pagelevel writer never rewrites the page holding the end (see
        // `resumes_on_fresh_page`); the other modes rewrite its valid prefix byte for byte.
        tail_page: tail_page.filter(|_| !fresh_page),
        tail_format: tail_format(&files, end),
    };
    drop(files);
    let wal = Wal::start(dir, &config, keys, resume, lock)?;
    wal.load_control()?;
    if fresh_page {
        wal.resume_on_fresh_page()?;
    }
    if needs_switch {
        wal.switch_segment()?;
    } else if salvaged.is_some() || tail_hint.is_some_and(|hint| hint < end) {
        wal.restamp_tail()?;
    }
    wal.recovered(RecoverySummary {
        created: false,
        scanned_from,
        end,
        replayed,
        salvaged,
        duration: started.elapsed(),
    });
    Ok(wal)
}

/// Checks the configuration before an open touches anything: every setting, and the page and
/// segment sizes when there is no log to adopt them from (a new log gets them; an existing
/// log's own fill in the unset ones, and set ones must match them: `Config::adopt_existing`).
/// The log is looked for only when the sizes would not do for a new log.
pub(super) fn check_before_open(config: &Config, dir: &Path) -> Result<()> {
    config.validate_settings()?;
    match config.validate_sizes() {
        Err(e) if !log_exists(config.storage.as_ref(), dir)? => Err(e),
        _ => Ok(()),
    }
}

/// True when `dir` holds a segment file.
fn log_exists(storage: &dyn Storage, dir: &Path) -> Result<bool> {
    match list_segments(storage, dir) {
        Ok(segments) => Ok(!segments.is_empty()),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// A replay from a checkpoint past the start of a log that does not exist is refused before
/// anything is created: a new log would hand out positions below the checkpoint, and the
/// engine would take them for older than its own state.
fn refuse_checkpoint_without_log(config: &Config, dir: &Path, from: Lsn) -> Result<()> {
    // Sizes that would not do for a new log belong to an existing one (`check_before_open`).
    if config.validate_sizes().is_err() {
        return Ok(());
    }
    // The end of a new, empty log: a checkpoint there lost nothing.
    let geo = config.geometry();
    if geo.skip_headers(from).0 <= geo.skip_headers(Lsn(0)).0 {
        return Ok(());
    }
    if log_exists(config.storage.as_ref(), dir)? {
        return Ok(());
    }
    Err(Error::CheckpointBeyondEnd {
        dir: dir.to_path_buf(),
        checkpoint: from,
        end: None,
    })
}

/// Refuses a key store whose active key is older than the newest key id a segment lists: the
/// store was replaced by an older generation (a backup) or a forged one, and writing on would
/// put new records under a key the log had rotated away from. Key ids only grow, and a key
/// goes into the store, active, before any segment lists it.
fn refuse_rolled_back_store(files: &LogFiles, config: &Config) -> Result<()> {
    let Some(store) = &config.key_store else {
        return Ok(());
    };
    let newest = files
        .segments
        .iter()
        .flat_map(|seg| seg.header.key_checks.iter().map(|(id, _)| *id))
        .max();
    match (config.keys.active_id(), newest) {
        (Some(active), Some(newest)) if active < newest => Err(Error::KeyStore {
            path: store.path().to_path_buf(),
            reason: format!(
                "its active key id {active} is older than key id {newest}, which the log's \
                 segments list: the store was replaced by an older or altered copy (restore its \
                 newest generation), or never held that key (a key activated on the log without \
                 being written to the store)"
            ),
        }),
        _ => Ok(()),
    }
}

/// Refuses keys that lack an id some segment lists, in every encrypted mode: a writer must be
/// able to read (and recovery to check) all of its log, and a log handed a partial ring would
/// otherwise open and fail only when a reader or a replay reaches the old records.
fn check_every_listed_key(files: &LogFiles, config: &Config) -> Result<()> {
    if !files.mode.is_encrypted() {
        return Ok(());
    }
    for seg in &files.segments {
        for (key_id, _) in &seg.header.key_checks {
            if config.keys.get(*key_id).is_none() {
                return Err(Error::MissingSegmentKey {
                    key_id: *key_id,
                    segment: seg.header.start,
                });
            }
        }
    }
    Ok(())
}

/// Rewrites the durable hint in the header of the last page holding records before `end`
/// (the page holding `end`, or the one before when `end` is a page's first body position),
/// when recovery found records past it: the open synced them (`tail::truncate_after`), and a
/// follower of the files, which goes by hints, would otherwise stop before them until the
/// writer writes again. One sector, as the writer's own hint refresh writes, then an
/// fdatasync. The header is plaintext in every mode (a pagelevel page's body keeps its
/// ciphertext: its IV and key are in the header, which stays as it was but for the hint).
fn stamp_last_page_hint(files: &LogFiles, end: Lsn) -> Result<()> {
    let geo = files.geo;
    let mut page = geo.page_start(end);
    while end <= page + format::PAGE_HEADER_LEN as u64 || geo.is_header_page(page) {
        let Some(before) = page.0.checked_sub(geo.page_size) else {
            return Ok(());
        };
        page = Lsn(before);
    }
    let Some(header) = files.read_page_header(page)? else {
        return Ok(());
    };
    if header.durable_hint >= end {
        return Ok(());
    }
    let Some(segment) = files.segment(geo.segment_start(page)) else {
        return Ok(());
    };
    let file = files
        .storage
        .open(&segment.path, true)
        .map_err(|e| Error::io("open segment", &segment.path, e))?;
    let offset = page - segment.header.start;
    let mut sector = [0u8; format::MIN_PAGE_SIZE as usize];
    crate::storage::read_full(file.as_ref(), &mut sector, offset)
        .map_err(|e| Error::io("read page", &segment.path, e))?;
    let stamped = format::PageHeader {
        durable_hint: end,
        ..header
    };
    stamped.encode(files.log_id, &mut sector[..format::PAGE_HEADER_LEN]);
    file.write_all_at(&sector, offset)
        .map_err(|e| Error::io("write page", &segment.path, e))?;
    file.sync_data()
        .map_err(|e| Error::io("fdatasync segment", &segment.path, e))
}

/// True when a writer opening a log that ends at `end` must continue on the next page: in
/// pagelevel mode, when `end` lies inside a page body that already holds records.
fn resumes_on_fresh_page(mode: Mode, geo: Geometry, end: Lsn) -> bool {
    let page = geo.page_start(end);
    mode == Mode::PageLevel && end > page + format::PAGE_HEADER_LEN as u64
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

/// Removes segment files left half-made by a crash or a failed creation (a reuse of a free
/// file among them), and the free files of an earlier open when recycling is off. Free files
/// are otherwise kept: each is checked when it is reused.
fn remove_unfinished_segments(config: &Config, dir: &Path) -> Result<()> {
    let names = config
        .storage
        .list(dir)
        .map_err(|e| Error::io("list log directory", dir, e))?;
    for name in names {
        let unused_free = config.recycle_segments == 0 && parse_free_file_name(&name).is_some();
        if is_unfinished_segment(&name) || unused_free {
            let path = dir.join(&name);
            config
                .storage
                .remove(&path)
                .map_err(|e| Error::io("remove unfinished segment", &path, e))?;
        }
    }
    Ok(())
}

/// True when the segment the log ends in is of an older format version, or does not list the
/// active key with its check value: new data must then go to a new segment, of the current
/// version and listing the active key. (A log ending exactly at a segment boundary goes on in
/// a new segment anyway.)
fn needs_new_segment(files: &LogFiles, keys: &Keys, end: Lsn) -> bool {
    let segment = files.geo.segment_start(end);
    if end == segment {
        return false;
    }
    let Some(seg) = files.segment(segment) else {
        return false;
    };
    if seg.header.version != format::FORMAT_VERSION {
        return true;
    }
    files.mode.is_encrypted()
        && keys
            .active_check_values()
            .iter()
            .any(|kc| !seg.header.key_checks.contains(kc))
}

/// The end of the segment the writer resumes in and that segment's format version: records
/// starting there before its end follow its checksum rule. A log ending at a segment boundary
/// continues in a new segment of the current version.
fn tail_format(files: &LogFiles, end: Lsn) -> (Lsn, u32) {
    let segment = files.geo.segment_start(end);
    match files.segment(segment) {
        Some(seg) if end != segment => (segment + files.geo.segment_size, seg.header.version),
        _ => (Lsn(0), format::FORMAT_VERSION),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_SEGMENT_SIZE;

    /// A log made with segments above the new-log maximum by an earlier version passes the
    /// open's checks, with the segment size left unset or set to the log's own; only a new
    /// log is refused such segments. (An open for real would read a GiB of tail segment.)
    #[test]
    fn an_existing_log_with_segments_above_the_maximum_passes_the_checks() {
        let dir = tempfile::tempdir().unwrap();
        let made = Config::new(Mode::Plaintext)
            .page_size(512)
            .segment_size(1024);
        Wal::open(dir.path(), made).unwrap().close().unwrap();
        let geo = Geometry {
            page_size: 512,
            segment_size: MAX_SEGMENT_SIZE + 512,
        };
        // The format still reads it (`LogFiles::open` checks the headers with this).
        format::validate_geometry(geo).unwrap();
        let unset = Config::new(Mode::Plaintext).page_size(512);
        let set = unset.clone().segment_size(geo.segment_size);
        for config in [unset, set.clone()] {
            check_before_open(&config, dir.path()).unwrap();
            let mut config = config;
            config.adopt_existing(Mode::Plaintext, geo).unwrap();
            assert_eq!(config.geometry(), geo);
        }
        let err = check_before_open(&set, &dir.path().join("new")).unwrap_err();
        assert!(matches!(&err, Error::Config(why) if why.contains("segment_size")));
    }
}
