//! Checkpoints and retention holds, kept in the control file (`crate::control`).
//!
//! [`Wal::checkpoint`] is the engine's one call after it has made its state durable up to an
//! LSN: the log is made durable through that LSN, the checkpoint (LSN and the engine's small
//! metadata, sealed in encrypted modes) replaces the control file atomically, and only then
//! are the segments no one needs any more purged. [`Wal::open_from_checkpoint`] reads it back
//! and replays from it. A crash at any step leaves the previous checkpoint or the new one,
//! each with every segment it needs.
//!
//! Holds ([`Wal::hold`]) are named positions, like PostgreSQL's replication slots, that
//! [`Wal::purge_before`] does not purge past, unless a hold falls more than
//! [`crate::Config::max_hold_bytes`] behind the end: then it is given up (marked lost) so that a
//! dead replica cannot fill the disk.

use std::path::Path;

use zeroize::Zeroizing;

use parking_lot::{Mutex, MutexGuard};

use super::Wal;
use crate::config::{Config, SyncMode};
use crate::control::{self, Checkpoint, Control, Hold, MAX_CHECKPOINT_META, MAX_HOLDS};
use crate::error::{Error, Result};
use crate::keys::KeyRing;
use crate::reader::{LogFiles, Record};
use crate::{Lsn, Mode};

/// The control file's contents as this `Wal` last wrote or read them (last checkpoint,
/// retention holds), and how far a hold may fall behind. Its lock is private to this file:
/// taken with no lock of the log held (only the rotation's ring lock is taken under it), and
/// held across the control file's replacement, so the file's generations follow the order of
/// the changes.
pub(super) struct Retention {
    control: Mutex<Control>,
    /// Purges under way: how many, and the highest limit one of them took (`purge_limit`).
    /// A segment that ends at or before it may be removed at any moment while one runs, so
    /// no hold and no checkpoint is accepted in it meanwhile (`check_not_purging`). Taken
    /// under the control lock or with no lock held; nothing is taken under it.
    purging: Mutex<(u32, Lsn)>,
    /// How far a hold may fall behind the end before a purge gives it up.
    max_hold_bytes: u64,
}

impl Retention {
    pub(super) fn new(max_hold_bytes: u64) -> Retention {
        Retention {
            control: Mutex::new(Control::default()),
            purging: Mutex::new((0, Lsn(0))),
            max_hold_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Control> {
        self.control.lock()
    }
}

/// A purge under way, counted in [`Retention::purging`] until it is dropped (when the purge
/// returns, whether it removed everything, some or nothing).
pub(super) struct Purging<'a> {
    retention: &'a Retention,
}

impl Drop for Purging<'_> {
    fn drop(&mut self) {
        let mut purging = self.retention.purging.lock();
        purging.0 -= 1;
        if purging.0 == 0 {
            purging.1 = Lsn(0);
        }
    }
}

impl Wal {
    /// Records the engine's checkpoint: every record the engine needs to restore its state
    /// from what `meta` describes (for example the name of its snapshot file) starts at `lsn`
    /// or later. The log is made durable through `lsn` first (an fdatasync in `Buffered`
    /// mode), then the checkpoint replaces the control file atomically (`meta` sealed with
    /// AES-256-GCM under the active data key in the encrypted modes), then the segments that
    /// lie wholly before `lsn` and before every retention hold are purged. Returns how many
    /// segments were purged.
    ///
    /// `lsn` is a record boundary up to [`Wal::end_lsn`]: a position the log handed out (an
    /// append's LSN, a record's end, `end_lsn()`, `flushed_lsn()`), also on a page or segment
    /// boundary. A restart replays from the record that starts there. A position inside a
    /// record is refused here ([`Error::InvalidArgument`], after the flush and before the
    /// control file is written): no replay could start there. (A control file that names one
    /// anyway, written by an earlier build, is refused by `open_from_checkpoint` before
    /// `restore`: [`Error::Control`], naming the control file.) It must lie in a
    /// segment not purged yet, nor being purged by a purge running meanwhile
    /// ([`Error::Purged`] otherwise), and must not be older than the last checkpoint; `meta`
    /// is at most [`crate::MAX_CHECKPOINT_META`] bytes. Make the state `meta` names durable
    /// before calling this: a crash afterwards restarts from it.
    pub fn checkpoint(&self, lsn: Lsn, meta: &[u8]) -> Result<usize> {
        self.check_poison()?;
        self.check_process()?;
        if meta.len() > MAX_CHECKPOINT_META {
            return Err(Error::InvalidArgument {
                op: "checkpoint",
                reason: format!(
                    "metadata of {} bytes: at most {MAX_CHECKPOINT_META}",
                    meta.len()
                ),
            });
        }
        let end = self.reservations.end();
        if lsn > end {
            return Err(Error::LsnNotAvailable { lsn, end });
        }
        match self.sync {
            SyncMode::Durable => self.flush(lsn)?,
            SyncMode::Buffered => self.sync()?,
        }
        self.refuse_inside_a_record(lsn)?;
        {
            let mut control = self.retention.lock();
            if let Some(last) = &control.checkpoint
                && last.lsn > lsn
            {
                return Err(Error::InvalidArgument {
                    op: "checkpoint",
                    reason: format!(
                        "lsn {lsn} is older than the last checkpoint, at lsn {}",
                        last.lsn
                    ),
                });
            }
            // A restart could not replay from a position a purge already removed, or one a
            // purge under way may be removing.
            let oldest = self.oldest_segment()?;
            if lsn < oldest {
                return Err(Error::Purged {
                    needed: lsn,
                    oldest,
                });
            }
            self.check_not_purging(lsn)?;
            let checkpoint = Checkpoint {
                lsn,
                meta: Zeroizing::new(meta.to_vec()),
            };
            let before = control.checkpoint.replace(checkpoint);
            // Sealed with the metadata: a segment relabelled with an older format version
            // (whose rules accept records the current one refuses) is caught on the way back.
            let version = self.segment_version(lsn)?;
            let version_before = control.checkpoint_version.replace(version);
            match self.save_control(&mut control) {
                Ok(()) => control.purge_floor = Some(lsn),
                Err(e) => {
                    // The new file may have been renamed into place before the failure and
                    // become durable with a later directory sync: until a write succeeds,
                    // purges keep what either checkpoint needs.
                    control.checkpoint = before;
                    control.checkpoint_version = version_before;
                    control.purge_floor = Some(control.purge_floor.map_or(lsn, |f| f.min(lsn)));
                    return Err(e);
                }
            }
        }
        self.purge_before(lsn)
    }

    /// Refuses a checkpoint at a position inside a record, which no replay could start from:
    /// `open_from_checkpoint` would refuse it at the next restart, after this call had made it
    /// durable and purged before it. Checked in the files the flush before it wrote, as the
    /// restart checks it: by walking the records of the position's page up to it (records
    /// before it are complete on file, so a write under way after it does not change the
    /// answer). Only a position found inside a record is refused; anything else the walk meets
    /// is left to the restart, which reads the log whole.
    fn refuse_inside_a_record(&self, lsn: Lsn) -> Result<()> {
        if lsn == Lsn(0) || lsn == self.reservations.end() {
            return Ok(());
        }
        let ring = self.rotation.ring();
        let keys = self.mode.is_encrypted().then_some(&ring);
        let Ok(files) = LogFiles::open(&self.dir, self.storage.clone(), keys) else {
            return Ok(());
        };
        match crate::reader::record_start(&files, lsn) {
            Err(Error::NotRecordStart(_)) => Err(Error::InvalidArgument {
                op: "checkpoint",
                reason: format!(
                    "lsn {lsn} lies inside a record, so no replay could start there: take a \
                     checkpoint at a position the log handed out (a record's lsn or end_lsn, \
                     end_lsn(), flushed_lsn())"
                ),
            }),
            _ => Ok(()),
        }
    }

    /// The last checkpoint recorded (by this open or an earlier one), if any.
    pub fn last_checkpoint(&self) -> Option<Checkpoint> {
        self.retention.lock().checkpoint.clone()
    }

    /// Creates the retention hold `name` at `lsn`, or moves it there: [`Wal::purge_before`]
    /// (and so [`Wal::checkpoint`]) keeps every segment from the one holding `lsn` on, until
    /// the hold moves on or is released, or falls more than [`crate::Config::max_hold_bytes`]
    /// behind the end of the log (it is then given up; see [`Hold::lost`]). A replica moves
    /// its hold as it applies records.
    ///
    /// A new hold (or one given up and set again), and a move back behind the position saved
    /// for it, are made durable before this returns; a move forward is saved with the next
    /// write of the control file (a checkpoint, another hold's creation or release, a move
    /// back, or a purge, which saves moved holds before it removes anything): after a crash
    /// a hold may be back where it was saved, which keeps more log, never less.
    /// `lsn` must lie between the oldest segment left and [`Wal::end_lsn`] ([`Error::Purged`]
    /// before it, and also in a segment that a purge running meanwhile may remove). At most
    /// [`crate::MAX_HOLDS`] holds.
    pub fn hold(&self, name: &str, lsn: Lsn) -> Result<()> {
        self.check_poison()?;
        control::check_hold_name(name)?;
        let end = self.reservations.end();
        if lsn > end {
            return Err(Error::LsnNotAvailable { lsn, end });
        }
        let mut control = self.retention.lock();
        let oldest = self.oldest_segment()?;
        if lsn < oldest {
            return Err(Error::Purged {
                needed: lsn,
                oldest,
            });
        }
        self.check_not_purging(lsn)?;
        let count = control.holds.len();
        // The furthest place a restart may find this hold: a move behind it is saved now, as
        // a new hold is (a restart would otherwise bring back a position that keeps less
        // than this one).
        let saved = control
            .saved_holds
            .iter()
            .filter(|h| h.name == name && !h.lost)
            .map(|h| h.lsn)
            .max();
        match control.holds.iter_mut().find(|h| h.name == name) {
            Some(hold) if !hold.lost && saved.is_some_and(|saved| lsn >= saved) => {
                hold.lsn = lsn;
                return Ok(());
            }
            Some(hold) if !hold.lost => {
                let before = std::mem::replace(&mut hold.lsn, lsn);
                let result = self.save_control(&mut control);
                if result.is_err()
                    && let Some(hold) = control.holds.iter_mut().find(|h| h.name == name)
                {
                    // Maybe not durable: the hold stays where it was, and purges keep what
                    // the position the failed write may have put on disk needs too
                    // (`save_control`).
                    hold.lsn = before;
                }
                return result;
            }
            Some(hold) => {
                hold.lsn = lsn;
                hold.lost = false;
            }
            None if count >= MAX_HOLDS => {
                return Err(Error::InvalidArgument {
                    op: "hold",
                    reason: format!("at most {MAX_HOLDS} holds; release one first"),
                });
            }
            None => control.holds.push(Hold {
                name: name.to_string(),
                lsn,
                lost: false,
            }),
        }
        let saved = self.save_control(&mut control);
        if saved.is_err() {
            // Not durable: not in force either, so no purge relies on it being saved.
            control.holds.retain(|h| h.name != name);
        }
        saved
    }

    /// Releases the hold `name`, durably. Returns whether there was one.
    pub fn release_hold(&self, name: &str) -> Result<bool> {
        self.check_poison()?;
        let mut control = self.retention.lock();
        let Some(at) = control.holds.iter().position(|h| h.name == name) else {
            return Ok(false);
        };
        let hold = control.holds.remove(at);
        if let Err(e) = self.save_control(&mut control) {
            control.holds.insert(at, hold);
            return Err(e);
        }
        Ok(true)
    }

    /// The retention holds, in the order they were made.
    pub fn holds(&self) -> Vec<Hold> {
        self.retention.lock().holds.clone()
    }

    /// The oldest position a purge may reach for `lsn`: before the last checkpoint and every
    /// hold still in force. Holds that fell more than `max_hold_bytes` behind the end are given
    /// up first (saved).
    ///
    /// The purge counts as under way from here until the returned [`Purging`] is dropped,
    /// registered in the same hold of the control lock that read the holds: a hold or
    /// checkpoint made after that hold is refused where the purge may remove segments
    /// ([`Wal::check_not_purging`]), one made before it is in the limit.
    pub(super) fn purge_limit(&self, lsn: Lsn) -> Result<(Lsn, Purging<'_>)> {
        let end = self.reservations.end();
        let mut control = self.retention.lock();
        let mut gave_up = false;
        for hold in control.holds.iter_mut().filter(|h| !h.lost) {
            if end.checked_distance(hold.lsn).unwrap_or(0) > self.retention.max_hold_bytes {
                hold.lost = true;
                gave_up = true;
            }
        }
        // A hold moved since the file was written is saved first, so the purge may rely on
        // where it is now: a restart brings a hold back where it was saved, and a position
        // purged there gives the hold up (the replica lost). If that write fails, the purge
        // goes on, keeping what the lower of the saved and the current position needs (the
        // file holds one of them), rather than refusing every purge while, say, the disk is
        // full.
        if gave_up || control.holds_unsaved() {
            let saved = self.save_control(&mut control);
            if gave_up {
                saved?;
            }
        }
        // A restart replays from the last checkpoint on disk: what it needs stays too.
        let checkpoint = control.purge_floor.unwrap_or(Lsn(u64::MAX));
        let limit = control
            .holds
            .iter()
            .filter(|h| !h.lost)
            .map(|h| {
                // Every position a file on disk may give it after a restart.
                control
                    .saved_holds
                    .iter()
                    .filter(|s| s.name == h.name && !s.lost)
                    .map(|s| s.lsn)
                    .fold(h.lsn, Lsn::min)
            })
            .fold(lsn.min(checkpoint), Lsn::min);
        {
            // What the purge may remove at most: segments that end by its limit, and never the
            // segment holding the end of the log or any after it (`purge_before`).
            let reach = limit.min(self.segment_holding_end(end));
            let mut purging = self.retention.purging.lock();
            purging.0 += 1;
            purging.1 = purging.1.max(reach);
        }
        drop(control);
        Ok((
            limit,
            Purging {
                retention: &self.retention,
            },
        ))
    }

    /// Refuses a hold or checkpoint at `lsn` whose segment a purge under way may remove (it
    /// ends at or before that purge's limit): [`Error::Purged`], naming the oldest segment
    /// the purges leave. Called under the control lock, after the check against the oldest
    /// segment on disk.
    fn check_not_purging(&self, lsn: Lsn) -> Result<()> {
        let (purges, limit) = *self.retention.purging.lock();
        let segment = self.geo.segment_start(lsn);
        if purges > 0
            && segment
                .checked_add(self.geo.segment_size)
                .is_some_and(|end| end <= limit)
        {
            return Err(Error::Purged {
                needed: lsn,
                oldest: self.geo.segment_start(limit),
            });
        }
        Ok(())
    }

    /// The key id the control file's checkpoint is sealed under, if any: a key it still
    /// needs is not retired.
    pub(super) fn control_key(&self) -> Option<u32> {
        let control = self.retention.lock();
        (control.checkpoint.is_some() && control.checkpoint_key != 0)
            .then_some(control.checkpoint_key)
    }

    /// Reads the control file at open (before the `Wal` is shared).
    pub(super) fn load_control(&self) -> Result<()> {
        let ring = self.data_keys();
        let mut loaded = control::read(
            self.storage.as_ref(),
            &self.dir,
            self.log_id,
            ring.as_ref(),
            self.mode != Mode::Plaintext,
        )?
        .unwrap_or_default();
        loaded.purge_floor = loaded.checkpoint.as_ref().map(|c| c.lsn);
        // A hold whose position was purged (its creation failed after the file reached the
        // disk, or the log was cut by hand) keeps nothing: it is lost.
        let oldest = self.oldest_segment()?;
        for hold in loaded.holds.iter_mut().filter(|h| h.lsn < oldest) {
            hold.lost = true;
        }
        loaded.saved_holds = loaded.holds.clone();
        *self.retention.lock() = loaded;
        Ok(())
    }

    /// Writes `control` as the next generation of the control file.
    fn save_control(&self, control: &mut Control) -> Result<()> {
        control.generation += 1;
        let ring = self.data_keys();
        let bytes = control.encode(self.log_id, ring.as_ref())?;
        if let Err(e) = control::write(self.storage.as_ref(), &self.dir, &bytes) {
            // The new file may have been renamed into place before the failure and become
            // durable with a later directory sync: until a write succeeds, a restart may find
            // the holds where this write put them, or where an earlier one did.
            let attempted = control.holds.clone();
            control.saved_holds.extend(attempted);
            keep_bounds(&mut control.saved_holds);
            return Err(e);
        }
        // Every hold is on disk where it is now.
        control.saved_holds = control.holds.clone();
        Ok(())
    }

    /// The data keys, in the encrypted modes.
    fn data_keys(&self) -> Option<KeyRing> {
        (self.mode != Mode::Plaintext).then(|| self.rotation_ring())
    }

    /// The format version of the segment holding `lsn`, as its header on file names it (a log
    /// continued from an older build keeps its older segments), or this build's when the
    /// segment has no file yet (a checkpoint at the end of a log ending on a segment boundary).
    fn segment_version(&self, lsn: Lsn) -> Result<u32> {
        let start = self.geo.segment_start(lsn);
        let path = self.dir.join(crate::format::segment_file_name(start));
        match crate::reader::read_segment_header(self.storage.as_ref(), &path, start) {
            Ok(header) => Ok(header.version),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(crate::format::FORMAT_VERSION)
            }
            Err(e) => Err(e),
        }
    }

    /// Where the oldest segment file starts.
    fn oldest_segment(&self) -> Result<Lsn> {
        Ok(
            crate::reader::list_segments(self.storage.as_ref(), &self.dir)?
                .first()
                .copied()
                .unwrap_or(Lsn(0)),
        )
    }

    /// Opens the log like [`Wal::open_and_replay`], replaying from its last recorded
    /// checkpoint (from the start of the log when there is none). `restore` is called first,
    /// with the checkpoint, so the engine loads the state its metadata names before the
    /// records after it arrive in `replay`.
    ///
    /// A log that has lost its start to a purge but holds no checkpoint (the control file
    /// `walcrypt.control` deleted, or rewritten to say there is none: its "none" is not sealed)
    /// fails with [`Error::Purged`] naming LSN 0 and the oldest segment left, before `restore`
    /// is called: replaying it from its oldest record into a fresh state would silently lose
    /// what the purge removed. So does a checkpoint whose position lies before the oldest
    /// segment left (an older control file put back), naming that position. An engine that
    /// purges by positions of its own, without [`Wal::checkpoint`], replays with
    /// [`Wal::open_and_replay`] from its position. Also refused before `restore`: a
    /// configuration [`Config::validate`] refuses ([`Error::Config`]; its page and segment
    /// sizes only when there is no log to take them from), a log
    /// another `Wal` has open ([`Error::Locked`]: the directory's lock is taken first and kept
    /// for the open), and keys whose check values the segments contradict ([`Error::WrongKey`],
    /// as `Wal::open` says it, not as a checkpoint that fails authentication).
    pub fn open_from_checkpoint<R, F>(
        dir: impl AsRef<Path>,
        config: Config,
        restore: R,
        replay: F,
    ) -> Result<Wal>
    where
        R: FnOnce(Option<&Checkpoint>) -> Result<()>,
        F: FnMut(Record) -> Result<()>,
    {
        let dir = dir.as_ref();
        // A setting that would fail the open fails it before `restore` too.
        super::open::check_before_open(&config, dir)?;
        // Held from here, so a log another `Wal` has open is refused (`Locked`) before
        // `restore`, not after the engine loaded its snapshot.
        let held = super::open::lock_existing(&config, dir)?;
        let checkpoint = Checkpoint::read(dir, &config)?;
        // Refused before `restore`, so the engine loads nothing it cannot replay onto: a
        // purged log without a checkpoint, and a checkpoint whose segment was purged (an older
        // control file put back: its position is gone, and the state it names is older than
        // what the purge removed).
        if let Ok(starts) = crate::reader::list_segments(config.storage.as_ref(), dir)
            && let Some(&oldest) = starts.first()
        {
            // `oldest` starts a segment: a position below it lies in a segment before it.
            let needed = checkpoint.as_ref().map_or(Lsn(0), |c| c.lsn);
            if needed < oldest {
                return Err(Error::Purged { needed, oldest });
            }
        }
        // A checkpoint taken inside a record: the replay could not start there. Said before
        // `restore`, naming the control file and the way out.
        if let Some(checkpoint) = &checkpoint
            && checkpoint.lsn > Lsn(0)
        {
            let ring = config.current_ring();
            let files = LogFiles::open(dir, config.storage.clone(), Some(&ring))?;
            match crate::reader::record_start(&files, checkpoint.lsn) {
                Err(Error::NotRecordStart(lsn)) => {
                    return Err(Error::Control {
                        path: dir.join(crate::control::CONTROL_FILE),
                        reason: format!(
                            "the checkpoint's lsn {lsn} is not where a record starts (it was \
                             taken inside a record), so no replay can start there; open the \
                             log with Wal::open and take a checkpoint at a position the log \
                             handed out"
                        ),
                    });
                }
                // Damage where the replay would start (a first page's continuation length
                // that disagrees with the log, say): the replay would fail there too.
                Err(e @ Error::Corrupt { .. }) => return Err(e),
                _ => {}
            }
        }
        restore(checkpoint.as_ref())?;
        let from = checkpoint.map_or(Lsn::default(), |c| c.lsn);
        let mut replay = replay;
        super::open::open_and_replay_holding(dir, config, from, &mut replay, held)
    }

    /// [`Wal::open_from_checkpoint`] with callbacks that return the engine's own error type,
    /// as [`Wal::open_and_apply`] is to [`Wal::open_and_replay`]: an error from `restore` or
    /// `apply` aborts the open (nothing is truncated) and comes back as it was; walcrypt's
    /// own errors, the refusals before `restore` included, come back converted with `From`.
    pub fn open_from_checkpoint_and_apply<R, F, E>(
        dir: impl AsRef<Path>,
        config: Config,
        restore: R,
        mut apply: F,
    ) -> std::result::Result<Wal, E>
    where
        R: FnOnce(Option<&Checkpoint>) -> std::result::Result<(), E>,
        F: FnMut(Record) -> std::result::Result<(), E>,
        E: From<Error>,
    {
        // Only one of the two callbacks can fail the open, and the open stops at its error.
        let failed: std::cell::Cell<Option<E>> = std::cell::Cell::new(None);
        let stop = |e: E, which: &str| {
            failed.set(Some(e));
            Error::Config(format!(
                "the open was stopped by the engine's {which} callback"
            ))
        };
        let opened = Wal::open_from_checkpoint(
            dir,
            config,
            |checkpoint| restore(checkpoint).map_err(|e| stop(e, "restore")),
            |record| apply(record).map_err(|e| stop(e, "apply")),
        );
        super::open::engine_result(opened, failed.take())
    }
}

/// Keeps, of the positions a file on disk may give each hold (`Control::saved_holds`), the
/// lowest and the highest (given up or not, apart): purges need the lowest, a move back
/// compares with the highest. Writes that keep failing then do not grow the list.
fn keep_bounds(saved: &mut Vec<Hold>) {
    let mut kept: Vec<Hold> = Vec::new();
    for hold in saved.iter() {
        let same = |h: &Hold| h.name == hold.name && h.lost == hold.lost;
        if kept.iter().any(same) {
            continue;
        }
        let positions = saved.iter().filter(|h| same(h)).map(|h| h.lsn);
        let (low, high) = positions.fold((hold.lsn, hold.lsn), |(lo, hi), at| {
            (lo.min(at), hi.max(at))
        });
        kept.push(Hold {
            lsn: low,
            ..hold.clone()
        });
        if high != low {
            kept.push(Hold {
                lsn: high,
                ..hold.clone()
            });
        }
    }
    *saved = kept;
}

impl Checkpoint {
    /// The last checkpoint recorded in the log in `dir`, read with `config`'s storage and
    /// keys (its key store's, when it has one); `None` when there is no log or no checkpoint.
    pub fn read(dir: impl AsRef<Path>, config: &Config) -> Result<Option<Checkpoint>> {
        let dir = dir.as_ref();
        let ring = config.current_ring();
        // With the keys, so a key that is not the one the segments' check values name is
        // reported as `WrongKey` here, not as a checkpoint that fails authentication.
        let check = (!ring.ids().is_empty()).then_some(&ring);
        let files = match LogFiles::open(dir, config.storage.clone(), check) {
            Ok(files) => files,
            Err(Error::NoLog(_)) => return Ok(None),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let keys = (files.mode != Mode::Plaintext).then_some(&ring);
        let Some(control) = control::read(
            config.storage.as_ref(),
            dir,
            files.log_id,
            keys,
            keys.is_some(),
        )?
        else {
            return Ok(None);
        };
        let Some(checkpoint) = control.checkpoint else {
            return Ok(None);
        };
        // The segment that held the checkpoint's position was of the sealed format version
        // or newer (a log is upgraded forwards only). One older now was relabelled: in a
        // perrecord-gcm log, to have its records read by an older version's rules, under
        // which a forged, unsealed segment switch would skip them.
        if let Some(sealed) = control.checkpoint_version {
            let start = files.geo.segment_start(checkpoint.lsn);
            if let Some(segment) = files.segment(start)
                && segment.header.version < sealed
            {
                return Err(Error::corrupt(
                    start,
                    0,
                    start,
                    crate::CorruptionKind::SegmentHeaderField(
                        "format version older than the one sealed with the checkpoint taken \
                         in this segment (relabelled)",
                    ),
                ));
            }
        }
        Ok(Some(checkpoint))
    }
}
