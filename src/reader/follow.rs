//! Following a live log: records as a writer makes them durable, across pages and segments,
//! with a poll that says "nothing yet" and a wait with a timeout.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::cursor::{Cursor, Parked, Step, Stored};
use super::files::{LogFiles, list_segments};
use super::{RawRecord, Record, SegmentInfo, Settled, raw_record, settle};
use crate::config::Mode;
use crate::crypto::{KeyRing, Keys};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::Geometry;
use crate::keys::KeyStore;
use crate::storage::{FsStorage, Storage};
use crate::{Lsn, Wal};

/// Which records a [`Follower`] yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Visibility {
    /// Only records the writer has made durable (fdatasync'ed): a replica that applies them
    /// never has to take one back after a crash of the primary.
    ///
    /// The follower learns how far the log is durable from the durable hints in the page
    /// headers (each page written carries the position through which the writer had
    /// fdatasync'ed at that moment), or, for a follower made with [`Follower::attach`], from
    /// the `Wal` itself. After every fdatasync the writer writes the hint it made true into
    /// the header of the page the log ends in (that page's first sector), so a follower of
    /// the files sees a record once the `flush` ([`crate::SyncMode::Durable`]) or `sync`
    /// ([`crate::SyncMode::Buffered`], where a `flush` does not fdatasync) that made it
    /// durable has returned, also when the writer then goes idle or closes. A follower
    /// polling meanwhile may see it a poll later.
    #[default]
    Durable,
    /// Every complete, valid record the files hold: what the writer has handed to the
    /// operating system. Such a record can still be lost in a crash of the machine (and,
    /// after recovery, its position can hold a different record), so this is for inspection
    /// and for consumers that can take records back, not for replicas.
    Written,
}

/// How long a follower waits at most between two looks at the files while idle.
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How long a follower stopped at the same invalid record waits before it checks whether it
/// is damage by reading every later page header (and then again at this interval). Evidence in
/// the record's own page or the next one is checked at every look.
const DAMAGE_CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long a follower goes on trying, one attempt per poll, to read the segment headers again
/// (after a record named a key its segment's header did not list) before it reports why that
/// read keeps failing.
const REREAD_PATIENCE: Duration = Duration::from_secs(1);

/// An owning reader that follows a log as it grows: it yields records in LSN order, and at
/// the end picks up new pages and new segments as the writer adds them.
///
/// The writer may be a [`Wal`] in this process or in another one. [`Follower::poll`] returns
/// `Ok(None)` when nothing new is there yet; [`Follower::next_timeout`] waits for the next
/// record. As an [`Iterator`], a follower yields what is there now and then `None`; it can be
/// iterated again later (it is not fused).
///
/// What it yields is set by [`Visibility`]: by default only records the writer has made
/// durable. A follower may start before the log exists (it waits for the first segment) or
/// at any record boundary of an existing log (a record's `end_lsn` included). A position
/// inside the valid records where no record starts is refused at open with
/// [`Error::NotRecordStart`]. A position past them is accepted, since a writer may have handed
/// it out for records it has not written yet: the follower waits for the log to reach it,
/// reading nothing there before, and then follows from it if a record starts there, or fails
/// with [`Error::NotRecordStart`] if it lies inside a record.
///
/// Damage is reported as [`Error::Corrupt`] once it is certain: a valid page header whose
/// durable hint lies past an unreadable record, still there after the record has been read
/// again (see [`Reader`](crate::Reader)). Evidence in the record's own page or the next one is
/// looked at every time; the rest of the log's page headers are read only after the follower
/// has been stopped at the same record for a second (and then once a second), so a busy
/// writer never makes it scan to the end of a segment at each new end.
///
/// The follower must stay ahead of [`Wal::purge_before`] (a retention hold, [`Wal::hold`],
/// keeps what it needs): a segment purged before the follower reached it gives
/// [`Error::Purged`], naming the position it needed and the oldest segment left. Segments
/// that a writer opening the log removes after its end (one prepared ahead, or one holding
/// only a torn tail) and creates again as it writes are not an error: the follower takes the
/// files as they are and waits.
///
/// ```
/// use std::time::Duration;
/// use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Wal};
///
/// # fn main() -> walcrypt::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let keys = KeyRing::generate()?;
/// // A replica may start following before the primary has created the log.
/// let mut follower = Follower::open(dir.path(), Some(keys.clone()), Lsn::default())?;
/// assert!(follower.poll()?.is_none());
///
/// let wal = Wal::open(dir.path(), Config::new(Mode::PerRecord).keys(keys))?;
/// let first = wal.append(1, b"one")?;
/// wal.flush(first)?;
/// let second = wal.append(1, b"two")?;
/// wal.flush(second)?; // its page header vouches that "one" is durable
///
/// let record = follower.next_timeout(Duration::from_secs(5))?.expect("durable by now");
/// assert_eq!((record.lsn, record.payload), (first, b"one".to_vec()));
/// # Ok(())
/// # }
/// ```
pub struct Follower {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    ring: Option<KeyRing>,
    shared_keys: Option<Arc<Keys>>,
    wal: Option<Weak<Wal>>,
    /// Where the keys came from, for a follower opened with a key store, or attached to a `Wal`
    /// of a log that has one: read again when a record names a key id the follower lacks (and,
    /// for an attached follower, its `Wal` lacks too or is gone).
    store: Option<Arc<KeyStore>>,
    from: Lsn,
    files: Option<LogFiles>,
    parked: Parked,
    /// Where the next record starts (meaningful once `files` is loaded).
    pos: Lsn,
    /// The position the follower started from, while the log has not reached it yet: whether
    /// a record starts there is checked when it does, before anything is read there.
    unreached: Option<Lsn>,
    /// Everything before this position is known to be durable.
    durable: Lsn,
    visibility: Visibility,
    poll_interval: Duration,
    /// The record last checked for damage (invalid, or not yet proven durable), and when.
    checked: Option<(Lsn, Instant)>,
    /// Where a re-read of the segment headers first failed, and when.
    reread_failed: Option<(Lsn, Instant)>,
    /// The mode the log must be of ([`Follower::require_mode`]).
    required: Option<Mode>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("dir", &self.dir)
            .field("position", &self.position())
            .field("durable", &self.durable)
            .field("visibility", &self.visibility)
            .finish()
    }
}

impl Follower {
    /// Follows the log in `dir` from `from`: a record boundary, or `Lsn::default()` for the
    /// first record of the oldest segment. The directory need not hold a log yet. Keys as
    /// for [`Reader::open`](crate::Reader::open). A position the files' records do not reach
    /// yet is checked when they do (see the type's docs); one farther than a segment past the
    /// last segment file is [`Error::LsnNotAvailable`].
    pub fn open(dir: impl AsRef<Path>, keys: Option<KeyRing>, from: Lsn) -> Result<Follower> {
        Self::open_with_storage(dir, keys, Arc::new(FsStorage), from)
    }

    /// Like [`Follower::open`] over another storage back end.
    pub fn open_with_storage(
        dir: impl AsRef<Path>,
        keys: Option<KeyRing>,
        storage: Arc<dyn Storage>,
        from: Lsn,
    ) -> Result<Follower> {
        let mut follower = Follower::new(dir.as_ref(), keys, storage, from);
        follower.load()?;
        Ok(follower)
    }

    fn new(dir: &Path, ring: Option<KeyRing>, storage: Arc<dyn Storage>, from: Lsn) -> Follower {
        Follower {
            dir: dir.to_path_buf(),
            storage,
            ring,
            shared_keys: None,
            wal: None,
            store: None,
            from,
            files: None,
            parked: Parked::default(),
            pos: Lsn(0),
            unreached: None,
            durable: Lsn(0),
            visibility: Visibility::default(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            checked: None,
            reread_failed: None,
            required: None,
        }
    }

    /// Follows the log in `dir` from `from` with the keys of `store`, as [`Follower::open`]. When
    /// a record names a key id the follower lacks (the writer rotated its data key, through
    /// another handle of the store or in another process), the follower takes the store's keys
    /// again, reading the store file once more ([`KeyStore::reload`]) if the store in memory
    /// lacks the key too, and reads the record again; only if the key is still missing is it
    /// [`Error::MissingKey`].
    pub fn open_with_key_store(
        dir: impl AsRef<Path>,
        store: Arc<KeyStore>,
        from: Lsn,
    ) -> Result<Follower> {
        let mut follower =
            Follower::new(dir.as_ref(), Some(store.ring()), Arc::new(FsStorage), from);
        follower.store = Some(store);
        follower.load()?;
        Ok(follower)
    }

    /// Follows the log that `wal` writes, in this process, with its keys and storage. The
    /// follower asks the `Wal` how far the log is durable, so durable records show up as soon
    /// as their `flush` has fdatasync'ed them. It holds only a weak reference: once the `Wal`
    /// is closed or dropped, the page headers' durable hints take over, and the follower reads
    /// on through whatever writer opens the directory next.
    ///
    /// When a record names a key the follower lacks (the log's data key was rotated), it takes
    /// the `Wal`'s current keys and reads the record again. A log opened with a key store
    /// ([`Config::key_store`](crate::Config::key_store)) leaves the follower that store too:
    /// when the `Wal` is gone (a later `Wal` of the directory rotated the key) or lacks the key,
    /// the follower takes the store's keys, reading the store file again
    /// ([`KeyStore::reload`]) if the store in memory lacks the key as well, as
    /// [`Follower::open_with_key_store`] does. A follower of a log with a raw key ring
    /// ([`Config::keys`](crate::Config::keys)) has no such source: once its `Wal` is gone, a key
    /// it lacks is [`Error::MissingKey`] with `attached_wal_gone` set, until
    /// [`Follower::set_keys`] gives it the key.
    pub fn attach(wal: &Arc<Wal>, from: Lsn) -> Result<Follower> {
        let (storage, keys) = wal.follow_parts();
        let mut follower = Follower::new(wal.dir(), None, storage, from);
        follower.shared_keys = Some(keys);
        follower.wal = Some(Arc::downgrade(wal));
        follower.store = wal.key_store();
        follower.load()?;
        Ok(follower)
    }

    /// Requires the log to be of `mode`, as [`Reader::require_mode`](crate::Reader::require_mode)
    /// does, now if the log exists and whenever the follower reads the directory again. A log
    /// of another mode is [`Error::Mismatch`]. Whether or not a mode is required, a follower
    /// refuses a log whose mode, geometry or id changes under it
    /// ([`CorruptionKind::ModeChanged`](crate::CorruptionKind::ModeChanged),
    /// [`CorruptionKind::ForeignSegment`](crate::CorruptionKind::ForeignSegment)).
    pub fn require_mode(mut self, mode: Mode) -> Result<Follower> {
        self.required = Some(mode);
        if let Some(files) = self.files.as_mut() {
            files.require_mode(mode)?;
        }
        Ok(self)
    }

    /// Sets which records are yielded. Default [`Visibility::Durable`].
    pub fn visibility(mut self, visibility: Visibility) -> Follower {
        self.visibility = visibility;
        self
    }

    /// Sets the longest pause between two looks at the files in [`Follower::next_timeout`]
    /// (it starts at 1 ms after a record and doubles while nothing comes). Default 10 ms.
    pub fn poll_interval(mut self, interval: Duration) -> Follower {
        self.poll_interval = interval.max(Duration::from_micros(100));
        self
    }

    /// Replaces the key ring, for example after the writer rotated to a key this follower did
    /// not have and has no source to take it from ([`Error::MissingKey`]; for a follower
    /// attached to a log with a raw key ring whose `Wal` is gone, with `attached_wal_gone` set):
    /// the follower goes on from where it is, and the new ring is checked against every
    /// segment's key check values.
    pub fn set_keys(&mut self, keys: Option<KeyRing>) -> Result<()> {
        if let Some(old) = &self.files {
            // The same log, mode and geometry as read so far (`LogFiles::reopened`).
            let mut files = old.reopened(keys.as_ref())?;
            if keys.is_none() {
                files.keys = None;
            }
            self.files = Some(files);
            self.parked = Parked::default();
        }
        self.ring = keys;
        self.shared_keys = None;
        Ok(())
    }

    /// Where the next record starts (before the log exists: the position asked for).
    pub fn position(&self) -> Lsn {
        if self.files.is_some() {
            self.pos
        } else {
            self.from
        }
    }

    /// How far the follower knows the log to be durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.durable
    }

    /// The log's mode, once the log exists.
    pub fn mode(&self) -> Option<Mode> {
        self.files.as_ref().map(|f| f.mode)
    }

    /// Page and segment sizes, once the log exists.
    pub fn geometry(&self) -> Option<Geometry> {
        self.files.as_ref().map(|f| f.geo)
    }

    /// The log's random id, once the log exists.
    pub fn log_id(&self) -> Option<u64> {
        self.files.as_ref().map(|f| f.log_id)
    }

    /// The segment files seen so far, oldest first.
    pub fn segments(&self) -> &[SegmentInfo] {
        self.files.as_ref().map_or(&[], |f| &f.segments)
    }

    /// The next record, decrypted, or `Ok(None)` when there is none yet.
    pub fn poll(&mut self) -> Result<Option<Record>> {
        self.poll_with(|stored, keys| stored.into_record(keys))
    }

    /// Like [`Follower::poll`], but the record as stored, with its header (see
    /// [`Reader::raw_records_from`](crate::Reader::raw_records_from)).
    /// A perrecord record under a key this follower lacks is read again once the key is taken
    /// from its source (the key store, read again, or the attached `Wal`), as `poll` does; with
    /// no source, or one that lacks the key too, its payload is left out.
    pub fn poll_raw(&mut self) -> Result<Option<RawRecord>> {
        if self.store.is_none() && self.wal.is_none() {
            return self.poll_with(raw_record);
        }
        // The missing key is an error here, so that `poll_with` takes it from the source.
        let with_key = |stored: Stored, keys: Option<&Keys>| {
            let raw = raw_record(stored, keys)?;
            match (&raw.payload, raw.header.encryption) {
                (None, Some((key_id, _))) => Err(Error::missing_key(key_id)),
                _ => Ok(raw),
            }
        };
        match self.poll_with(with_key) {
            Err(Error::MissingKey { .. }) => self.poll_with(raw_record),
            other => other,
        }
    }

    /// Waits up to `timeout` for the next record; `Ok(None)` when none came in time.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Record>> {
        self.wait(timeout, Follower::poll)
    }

    /// Like [`Follower::next_timeout`], but the record as stored.
    pub fn next_raw_timeout(&mut self, timeout: Duration) -> Result<Option<RawRecord>> {
        self.wait(timeout, Follower::poll_raw)
    }

    fn wait<T>(
        &mut self,
        timeout: Duration,
        mut poll: impl FnMut(&mut Follower) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(1).min(self.poll_interval);
        loop {
            if let Some(item) = poll(self)? {
                return Ok(Some(item));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(self.poll_interval);
        }
    }

    /// Opens the log's files if that has not happened yet; `false` while there is no log.
    fn load(&mut self) -> Result<bool> {
        if self.files.is_some() {
            return Ok(true);
        }
        let mut files = match LogFiles::open(&self.dir, self.storage.clone(), self.ring.as_ref()) {
            Ok(files) => files,
            Err(Error::NoLog(_)) => return Ok(false),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        if let Some(mode) = self.required {
            files.require_mode(mode)?;
        }
        if self.shared_keys.is_some() {
            files.share_keys(self.shared_keys.clone())?;
        }
        // A purge may remove the oldest segment between the listing and these reads: from
        // the start of the log, the follower looks again at the next poll; from a position
        // the purge removed, that is `Purged`.
        let started = super::record_start_reached(&files, self.from).and_then(|(pos, reached)| {
            // `durable_lsn` is true from the start, not only once a record needed it.
            Ok((
                pos,
                reached,
                durable_frontier(&files, self.wal.as_ref(), pos)?,
            ))
        });
        let (pos, reached, frontier) = match started {
            Ok(started) => started,
            Err(e) if is_not_found(&e) => {
                let oldest = files.segments.first().map(|s| s.header.start);
                if self.from == Lsn(0) || Some(self.from) == oldest {
                    return Ok(false);
                }
                return match files.purged_instead(self.from, e) {
                    e if is_not_found(&e) => Ok(false),
                    e => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        self.pos = pos;
        self.unreached = (!reached).then_some(pos);
        self.durable = self.durable.max(frontier);
        self.files = Some(files);
        Ok(true)
    }

    /// Whether the log has reached the position the follower started from (always, once it
    /// has been checked). Until it does, a start past the valid records is a position the
    /// writer may have handed out already, and nothing is read there: a record written across
    /// it would read as damage, or in pagelevel as no record at all. Once the log reaches it,
    /// a position inside a record is [`Error::NotRecordStart`], as a [`Reader`](crate::Reader)
    /// says at once for a position inside the log. New segment files are looked for while the
    /// position lies past the follower's.
    fn start_reached(&mut self) -> Result<bool> {
        let (Some(start), Some(files)) = (self.unreached, self.files.as_ref()) else {
            return Ok(true);
        };
        if start >= files.end_of_files() {
            match refresh(files, self.ring.as_ref())? {
                Some(newer) => {
                    self.files = Some(newer);
                    self.parked = Parked::default();
                }
                None => return Ok(false),
            }
        }
        let Some(files) = self.files.as_ref() else {
            return Ok(false);
        };
        if start >= files.end_of_files() || !super::reached_record_start(files, start)? {
            return Ok(false);
        }
        self.unreached = None;
        Ok(true)
    }

    /// Reads the next record and, if it may be yielded, turns it into `T` and moves past it.
    fn poll_with<T>(
        &mut self,
        convert: impl Fn(Stored, Option<&Keys>) -> Result<T>,
    ) -> Result<Option<T>> {
        // A key picked up, the record is read again. That read may pass segments made by
        // later rotations (each holds only switch records, sealed under its own key in
        // perrecord-gcm) and meet a key newer still: it is picked up too, as long as each is
        // another key. The same key missing again after it was taken is the error.
        let mut polled = self.poll_files(&convert);
        let mut picked = None;
        for _ in 0..MAX_KEY_PICKUPS {
            match polled {
                Err(Error::MissingKey { key_id, .. })
                    if picked != Some(key_id) && self.pick_up_key(key_id)? =>
                {
                    picked = Some(key_id);
                    polled = self.poll_files(&convert);
                }
                _ => break,
            }
        }
        match polled {
            Err(e) if is_not_found(&e) => self.after_vanished(e),
            Err(e) if is_unlisted_key(&e) => self.after_replaced(e),
            Err(Error::MissingKey {
                key_id,
                at,
                attached_wal_gone: false,
            }) if self.lost_its_only_key_source() => Err(Error::MissingKey {
                key_id,
                at,
                attached_wal_gone: true,
            }),
            other => other,
        }
    }

    /// Whether this follower was attached to a `Wal` that is now gone and has no key store to
    /// read keys from: nothing but [`Follower::set_keys`] can give it a key it lacks.
    fn lost_its_only_key_source(&self) -> bool {
        self.store.is_none()
            && self.ring.is_none()
            && self.wal.as_ref().is_some_and(|wal| wal.strong_count() == 0)
    }

    /// Takes keys holding `key_id` from where this follower's keys came from: the attached
    /// `Wal`'s current keys, or the key store (the follower's own, or that of the log it was
    /// attached to; read from disk again when the store in memory lacks the key too). False
    /// when there is no such source or it lacks the key as well.
    fn pick_up_key(&mut self, key_id: u32) -> Result<bool> {
        if let Some(wal) = self.wal.as_ref().and_then(Weak::upgrade) {
            let (_, keys) = wal.follow_parts();
            if keys.check_value(key_id).is_some() {
                if let Some(files) = self.files.as_mut() {
                    files.share_keys(Some(keys.clone()))?;
                }
                self.shared_keys = Some(keys);
                // Files read again from now on take these keys, not a ring taken earlier.
                self.ring = None;
                self.parked = Parked::default();
                return Ok(true);
            }
        }
        let Some(store) = &self.store else {
            return Ok(false);
        };
        if !store.has_key(key_id) {
            store.reload()?;
            if !store.has_key(key_id) {
                return Ok(false);
            }
        }
        let ring = store.ring();
        if let Some(files) = self.files.as_mut() {
            files.share_keys(Some(Arc::new(Keys::new(&ring, files.log_id)?)))?;
        }
        self.ring = Some(ring);
        self.parked = Parked::default();
        Ok(true)
    }

    /// A record or page naming a key its segment's header, as the follower read it, does not
    /// list. The writer may have replaced that segment since: a segment prepared ahead lists
    /// the key active when it was made, and a key rotation puts a segment listing the new key
    /// in its place (or removes it and creates it again) before writing there. A follower that
    /// read the header of the old file reads the headers again; if the segment's header now
    /// differs, it goes on with the files as they are now. Otherwise the damage is real.
    ///
    /// The re-read may fail for a passing reason: a segment listed and gone before its header
    /// was read, a listing taken while a writer's open removes the segments after its end. It
    /// proves nothing about the key, so the poll says "nothing yet" and the next one reads the
    /// headers again (one attempt per poll). A re-read still failing at the same record after
    /// [`REREAD_PATIENCE`] is reported with its own error.
    fn after_replaced<T>(&mut self, error: Error) -> Result<Option<T>> {
        let (Some(files), Error::Corrupt { at, .. }) = (self.files.as_ref(), &error) else {
            return Err(error);
        };
        let start = at.segment;
        let header_of = |f: &LogFiles| {
            f.segments
                .iter()
                .find(|s| s.header.start == start)
                .map(|s| s.header.key_checks.clone())
        };
        let now = match files.reopened(self.ring.as_ref()) {
            Ok(now) => now,
            Err(e) => return self.retry_reread(e),
        };
        self.reread_failed = None;
        if header_of(&now) == header_of(files) {
            return Err(error);
        }
        self.files = Some(now);
        self.parked = Parked::default();
        Ok(None)
    }

    /// A failed re-read of the segment headers (see [`Follower::after_replaced`]): "nothing yet"
    /// until it has failed at the same position for [`REREAD_PATIENCE`], then `error`.
    fn retry_reread<T>(&mut self, error: Error) -> Result<Option<T>> {
        match self.reread_failed {
            Some((at, since)) if at == self.pos => {
                if since.elapsed() >= REREAD_PATIENCE {
                    self.reread_failed = None;
                    return Err(error);
                }
            }
            _ => self.reread_failed = Some((self.pos, Instant::now())),
        }
        Ok(None)
    }

    /// A segment file the follower knew was gone when it went to read it. A writer opening the
    /// log removes the segments after its end (a segment prepared ahead that the log never
    /// reached, or one holding only a torn tail) and may create them again as it writes: the
    /// follower takes the files as they are now and looks again later. A segment gone from
    /// before the oldest one left was purged before the follower got there: that is `error`.
    fn after_vanished<T>(&mut self, error: Error) -> Result<Option<T>> {
        let Some(files) = self.files.as_ref() else {
            return Err(error);
        };
        let starts = list_segments(self.storage.as_ref(), &self.dir)?;
        match starts.first() {
            None => return Err(error),
            Some(&oldest) if files.geo.segment_start(self.pos) < oldest => {
                return Err(Error::Purged {
                    needed: self.pos,
                    oldest,
                });
            }
            Some(_) => {}
        }
        match files.reopened(self.ring.as_ref()) {
            Ok(now) => {
                self.files = Some(now);
                self.parked = Parked::default();
                Ok(None)
            }
            // Still changing under the writer's hands.
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`Error::Purged`] when the segment at `missing`, which the follower reads in and `files`
    /// do not hold, lies before the oldest segment the directory lists now: a purge removed it
    /// before the follower got there. Purges remove segments oldest first, so a segment gone
    /// from below the oldest one left is purged, never missing from the middle; the follower's
    /// files may have been listed just after such a purge (the follower lists the directory to
    /// find the segment a record runs on into, and the purge took that segment and its own).
    /// The directory is listed again, so the error names the oldest segment left now. `None`
    /// when segments at or below `missing` are listed: a gap among them is for the torn-tail
    /// rule to judge (damage once later page headers vouch for the log past it).
    fn purged_under(&self, files: &LogFiles, missing: Lsn) -> Result<Option<Error>> {
        let listed = list_segments(self.storage.as_ref(), &self.dir)?;
        let oldest = listed
            .first()
            .or_else(|| files.segments.first().map(|s| &s.header.start))
            .copied();
        Ok(match oldest {
            Some(oldest) if missing < oldest => Some(Error::Purged {
                needed: self.pos,
                oldest,
            }),
            _ => None,
        })
    }

    fn poll_files<T>(
        &mut self,
        convert: impl FnOnce(Stored, Option<&Keys>) -> Result<T>,
    ) -> Result<Option<T>> {
        if !self.load()? || !self.start_reached()? {
            return Ok(None);
        }
        // A few rounds: after new segments are found, or the durable position moved, or a
        // second look found the record complete, the record is read again from fresh pages.
        for _ in 0..4 {
            let Some(files) = self.files.as_ref() else {
                return Ok(None);
            };
            let mut cursor = Cursor::resume(files, self.pos, std::mem::take(&mut self.parked));
            let step = cursor.next();
            let step = match step {
                Ok(step) => step,
                Err(e) => {
                    self.parked = cursor.park(false);
                    return Err(e);
                }
            };
            match step {
                Step::Record(stored) => {
                    let end = stored.end_lsn;
                    if self.visibility == Visibility::Written || end <= self.durable {
                        let keep = cursor.park(true);
                        let item = convert(stored, files.keys.as_deref());
                        self.parked = keep;
                        self.checked = None;
                        let item = item?;
                        self.pos = end;
                        return Ok(Some(item));
                    }
                    // Not known to be durable yet. Pages read before the durable position is
                    // learned are not trusted after it: a crash of the writer's machine could
                    // have replaced them since.
                    self.parked = cursor.park(false);
                    let frontier = durable_frontier(files, self.wal.as_ref(), stored.lsn)?;
                    if frontier > self.durable {
                        self.durable = frontier;
                        continue;
                    }
                    // The quick look for hints stops at the first page without a valid header
                    // in the last segment: damage there hides the pages after it, which may be
                    // all that vouch for this record. Stopped here a while, the follower reads
                    // every later page header (what the torn-tail rule reads), so it reaches the
                    // damage and reports it instead of waiting for good.
                    // Not while the `Wal` it is attached to lives (its count is exact); once
                    // that `Wal` is gone, it learns from the headers like any other follower.
                    let from_headers = self.wal.as_ref().is_none_or(|w| w.strong_count() == 0);
                    if from_headers && stalled(&mut self.checked, stored.lsn) {
                        let full = files.max_hint_from(files.geo.page_start(stored.lsn))?;
                        if full > self.durable {
                            self.durable = full;
                            continue;
                        }
                    }
                    // The page vouching for it may lie in a segment not seen yet.
                    match refresh(files, self.ring.as_ref())? {
                        Some(newer) => {
                            self.files = Some(newer);
                            self.parked = Parked::default();
                        }
                        None => return Ok(None),
                    }
                }
                Step::End(invalid) => {
                    self.parked = cursor.park(false);
                    // A segment the follower reads in that its files do not hold: purged, or
                    // damage for the torn-tail rule below to judge.
                    if matches!(invalid.kind, CorruptionKind::MissingSegment)
                        && let Some(purged) =
                            self.purged_under(files, files.geo.segment_start(invalid.at))?
                    {
                        return Err(purged);
                    }
                    if files.geo.segment_start(invalid.at) >= files.end_of_files()
                        || resumes_in_an_unlisted_segment(files, invalid.at)
                    {
                        match refresh(files, self.ring.as_ref())? {
                            Some(newer) => {
                                self.files = Some(newer);
                                self.parked = Parked::default();
                                continue;
                            }
                            None => return Ok(None),
                        }
                    }
                    // Evidence nearby (the record's own page or the next one vouching for
                    // it) is checked at once; a full check of every later page header only
                    // when the follower has been stopped here for a while, so a busy writer
                    // never makes it scan the rest of a segment at every new end.
                    let near = files.hint_near(invalid.lsn)? > invalid.lsn;
                    if !stalled(&mut self.checked, invalid.lsn) && !near {
                        return Ok(None);
                    }
                    if let Some(now) = remade(files, self.ring.as_ref(), invalid.lsn)? {
                        self.files = Some(now);
                        self.parked = Parked::default();
                        continue;
                    }
                    match settle(files, invalid)? {
                        Settled::End(_) => return Ok(None),
                        Settled::Resume(..) => {}
                    }
                }
            }
        }
        Ok(None)
    }
}

fn is_unlisted_key(error: &Error) -> bool {
    matches!(
        error,
        Error::Corrupt {
            kind: CorruptionKind::UnlistedKey { .. },
            ..
        }
    )
}

/// How many keys one poll takes from the attached `Wal` or the key store before a key still
/// missing is reported: bounds the work of a poll racing a writer that rotates without pause.
const MAX_KEY_PICKUPS: usize = 64;

fn is_not_found(error: &Error) -> bool {
    matches!(error, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// The files with the segments that have appeared since, if any. A segment removed while
/// the directory is read (the writer purging old ones) means: look again later.
/// Whether a pagelevel log ending at `at` would go on in a segment the follower has not
/// listed: a writer that reopens a log whose last page is partly filled leaves the rest of it
/// unwritten and resumes at the next page's body, which for the last page of a segment is the
/// first body page of the next segment, with no switch record to point there
/// ([`crate::format::RECORD_FLAG_RESUME`]). The cursor looks for that resume record
/// (`Cursor::resumed_after`) only in the segments it was given.
fn resumes_in_an_unlisted_segment(files: &LogFiles, at: Lsn) -> bool {
    let geo = files.geo;
    files.mode == Mode::PageLevel
        && geo.segment_start(geo.skip_headers(geo.page_start(at) + geo.page_size))
            >= files.end_of_files()
}

fn refresh(files: &LogFiles, ring: Option<&KeyRing>) -> Result<Option<LogFiles>> {
    match files.refreshed(ring) {
        Err(e) if is_not_found(&e) => Ok(None),
        other => other,
    }
}

/// The files as they are now when the segment holding the record at `lsn` is no longer the
/// one the follower read the header of ([`LogFiles::segment_remade`]); `None` when it is, when
/// its header cannot be read (what follows judges the record as before), or when the files are
/// still changing under a writer's hands (the next poll looks again).
fn remade(files: &LogFiles, ring: Option<&KeyRing>, lsn: Lsn) -> Result<Option<LogFiles>> {
    if !files.segment_remade(lsn).unwrap_or(false) {
        return Ok(None);
    }
    match files.reopened(ring) {
        Ok(now) => Ok(Some(now)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// How far the log is known to be durable, looking from the record at `from`: the writer's
/// own count when it is in this process, else the page headers' durable hints.
fn durable_frontier(files: &LogFiles, wal: Option<&Weak<Wal>>, from: Lsn) -> Result<Lsn> {
    if let Some(wal) = wal.and_then(Weak::upgrade) {
        return Ok(wal.synced_lsn());
    }
    files.latest_hint(files.geo.page_start(from))
}

/// Whether the follower has been stopped at the record at `lsn` (invalid, or not yet proven
/// durable) for [`DAMAGE_CHECK_EVERY`] since it arrived there or last checked.
fn stalled(checked: &mut Option<(Lsn, Instant)>, lsn: Lsn) -> bool {
    match checked {
        Some((at, when)) if *at == lsn => {
            if when.elapsed() < DAMAGE_CHECK_EVERY {
                return false;
            }
            *when = Instant::now();
            true
        }
        _ => {
            *checked = Some((lsn, Instant::now()));
            false
        }
    }
}

impl Iterator for Follower {
    type Item = Result<Record>;

    /// The next record if there is one now; `None` means "nothing yet", not the end.
    fn next(&mut self) -> Option<Result<Record>> {
        self.poll().transpose()
    }
}
