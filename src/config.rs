//! Configuration: the encryption mode, keys, sizes and durability.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::events::EventListener;
pub use crate::format::Mode;
use crate::format::{self, Geometry};
use crate::keys::{KeyRing, KeyStore, RotationPolicy};
use crate::storage::{FsStorage, Storage};

/// What `Wal::flush` guarantees when it returns Ok.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SyncMode {
    /// Flushed records survive a crash of the process but not of the machine: `flush` hands
    /// the bytes to the operating system and never calls fsync. For benchmarks and for data a
    /// replica can rebuild.
    Buffered,
    /// Flushed records survive a crash of the machine: `flush` calls fdatasync (one call serves
    /// every thread waiting at that moment).
    #[default]
    Durable,
}

impl SyncMode {
    /// `none` or `data`, as walbench spells them.
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Buffered => "none",
            SyncMode::Durable => "data",
        }
    }
}

/// What [`crate::Wal::open`] does when it finds damage that is not a torn tail: valid records
/// after a damaged one, so records that were acknowledged as durable would be lost by cutting
/// the log there.
///
/// A torn tail (the last records of a crash, never acknowledged) is always cut; this setting
/// only decides about damage inside the durable part of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// Refuse to open: [`crate::Error::Corrupt`] names the segment, offset and LSN of the
    /// damage and nothing on disk changes. The default: an operator decides what to do.
    #[default]
    RefuseDamage,
    /// Cut the log at the first damaged record: every record before it is kept, the damaged one
    /// and everything after it are removed, and writing resumes there. The cut is reported to
    /// the [`crate::EventListener`] ([`crate::RecoverySummary::salvaged`]) and by
    /// [`crate::Wal::recovery_summary`]. Use it only after an operator asked for it, and keep a
    /// copy of the files first (`wal-dump --repair --backup DIR` does both).
    ///
    /// To find the first damage anywhere, this mode reads the whole log from its oldest record
    /// (the default reads only the tail, from the newest position a durable hint proves: damage
    /// before that position does not stop a default open, though the reader reports it).
    TruncateAtDamage,
}

/// Compression of record payloads before they are encrypted and checksummed.
///
/// Off by default: in the encrypted modes the stored length of a compressed record reveals
/// how well its plaintext compressed, which leaks secrets when attacker-influenced data and
/// secrets share a record (the CRIME attack; docs/SECURITY.md). Readers and replay decompress
/// whatever the log holds, whatever this setting says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Payloads are stored as given.
    #[default]
    Off,
    /// Payloads of at least `min_len` bytes are compressed with LZ4 and stored compressed when
    /// that makes them shorter. Costs CPU in the appending thread (before the insert lock) and
    /// in readers; saves WAL bytes on compressible records such as full-page images.
    Lz4 {
        /// Smallest payload worth trying, in bytes.
        min_len: usize,
    },
}

/// Settings for [`crate::Wal::open`]. Build with [`Config::new`] and the builder methods; check
/// with [`Config::validate`] (which `Wal::open` also calls).
///
/// Page and segment size belong to the log: they are used when a log is created. Opening an
/// existing log with sizes set explicitly (by [`Config::page_size`] or
/// [`Config::segment_size`]) that differ from the log's fails with [`crate::Error::Mismatch`];
/// sizes left at their defaults adopt the log's own.
#[derive(Clone)]
pub struct Config {
    pub(crate) mode: Mode,
    pub(crate) keys: KeyRing,
    pub(crate) segment_size: u64,
    pub(crate) page_size: u64,
    /// Whether `segment_size` / `page_size` were set by the caller (checked against an
    /// existing log) or are defaults (an existing log's own are used).
    pub(crate) segment_size_set: bool,
    pub(crate) page_size_set: bool,
    pub(crate) sync: SyncMode,
    pub(crate) buffer_size: usize,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) recovery: RecoveryMode,
    pub(crate) listener: Option<Arc<dyn EventListener>>,
    pub(crate) compression: Compression,
    pub(crate) prepare_segments: bool,
    pub(crate) recycle_segments: usize,
    /// A key store to take the keys from (its ring replaces `keys` when the log opens) and to
    /// record rotations and retirements in. Default: none (the raw ring in `keys`).
    pub(crate) key_store: Option<Arc<KeyStore>>,
    /// Automatic data-key rotation of a live log (needs `key_store`). Default: off.
    pub(crate) rotation: RotationPolicy,
    /// How far a retention hold may fall behind the end of the log before it is given up.
    pub(crate) max_hold_bytes: u64,
    /// Directories of sealed files whose headers key retirement also reads. Default: none.
    pub(crate) sealed_dirs: Vec<PathBuf>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("mode", &self.mode)
            .field("keys", &self.keys)
            .field("segment_size", &self.segment_size)
            .field("page_size", &self.page_size)
            .field("sync", &self.sync)
            .field("buffer_size", &self.buffer_size)
            .field("recovery", &self.recovery)
            .field("listener", &self.listener.is_some())
            .field("compression", &self.compression)
            .field("prepare_segments", &self.prepare_segments)
            .field("recycle_segments", &self.recycle_segments)
            .finish_non_exhaustive()
    }
}

/// Default segment size: 16 MiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 16 << 20;
/// Default page size: 8 KiB.
pub const DEFAULT_PAGE_SIZE: u64 = 8 << 10;
/// Default WAL buffer size: 4 MiB.
pub const DEFAULT_BUFFER_SIZE: usize = 4 << 20;
/// Largest segment size a new log may have: 1 GiB (see [`Config::segment_size`]). A log made
/// with larger segments (up to the format's 1 TiB) by an earlier version still opens.
pub const MAX_SEGMENT_SIZE: u64 = 1 << 30;
/// Largest WAL buffer size [`Config::validate`] accepts: 1 GiB (see [`Config::buffer_size`]).
pub const MAX_BUFFER_SIZE: usize = 1 << 30;
/// Default limit on how far a retention hold may fall behind the end of the log: 4 GiB (see
/// [`Config::max_hold_bytes`]).
pub const DEFAULT_MAX_HOLD_BYTES: u64 = 4 << 30;
/// Default number of purged segment files kept for reuse: 4 (see [`Config::recycle_segments`]).
pub const DEFAULT_RECYCLE_SEGMENTS: usize = 4;

impl Config {
    /// A configuration for `mode` with every other setting at its default.
    pub fn new(mode: Mode) -> Config {
        Config {
            mode,
            keys: KeyRing::empty(),
            segment_size: DEFAULT_SEGMENT_SIZE,
            page_size: DEFAULT_PAGE_SIZE,
            segment_size_set: false,
            page_size_set: false,
            sync: SyncMode::default(),
            buffer_size: DEFAULT_BUFFER_SIZE,
            storage: Arc::new(FsStorage),
            recovery: RecoveryMode::default(),
            listener: None,
            compression: Compression::Off,
            prepare_segments: true,
            recycle_segments: DEFAULT_RECYCLE_SEGMENTS,
            key_store: None,
            rotation: RotationPolicy::default(),
            max_hold_bytes: DEFAULT_MAX_HOLD_BYTES,
            sealed_dirs: Vec::new(),
        }
    }

    /// Sets how far a retention hold ([`crate::Wal::hold`]) may fall behind the end of the log
    /// before a purge gives it up (marks it lost) and purges past it, so that a dead replica
    /// cannot fill the disk. Default [`DEFAULT_MAX_HOLD_BYTES`] (4 GiB); `u64::MAX` never gives
    /// a hold up.
    pub fn max_hold_bytes(mut self, bytes: u64) -> Config {
        self.max_hold_bytes = bytes;
        self
    }

    /// Sets payload compression (off by default; read docs/SECURITY.md first).
    pub fn compression(mut self, compression: Compression) -> Config {
        self.compression = compression;
        self
    }

    /// Sets the key ring; the active (last) key encrypts new data. Default: empty, which only
    /// [`Mode::Plaintext`] accepts.
    pub fn keys(mut self, keys: KeyRing) -> Config {
        self.keys = keys;
        self
    }

    /// Sets the size of each segment file in bytes. Default 16 MiB
    /// ([`DEFAULT_SEGMENT_SIZE`]); a multiple of the page size, at least two pages, at most
    /// 1 GiB ([`MAX_SEGMENT_SIZE`], PostgreSQL's largest WAL segment). Used when the log is
    /// created; an existing log with another size refuses to open.
    ///
    /// Every open of an existing log reads the rest of the segment the log ends in (to make it
    /// zeros after the end, and for the page headers that tell a torn tail from damage), so
    /// restart time grows with the segment size: about 2.6 s for a 1 GiB segment, 25 s for
    /// 4 GiB. A log made with segments above 1 GiB by an earlier version (the format allows
    /// up to 1 TiB) still opens, this setting left unset or set to its size.
    pub fn segment_size(mut self, bytes: u64) -> Config {
        self.segment_size = bytes;
        self.segment_size_set = true;
        self
    }

    /// Sets the page size in bytes. Default 8 KiB ([`DEFAULT_PAGE_SIZE`]); a power of two from
    /// 512 B to 1 MiB. Used when the log is created; an existing log with another size refuses
    /// to open.
    pub fn page_size(mut self, bytes: u64) -> Config {
        self.page_size = bytes;
        self.page_size_set = true;
        self
    }

    /// Sets what `flush` guarantees. Default [`SyncMode::Durable`].
    pub fn sync(mut self, sync: SyncMode) -> Config {
        self.sync = sync;
        self
    }

    /// Sets the in-memory WAL buffer size in bytes. Default 4 MiB ([`DEFAULT_BUFFER_SIZE`]),
    /// rounded up to at least 4 pages (so 0 gives a buffer of 4 pages). Appenders wait for the
    /// writer when it is full, so memory stays bounded.
    ///
    /// At most 1 GiB ([`MAX_BUFFER_SIZE`]); [`Config::validate`] refuses more. The whole buffer
    /// is allocated when the log opens, so a size beyond the machine's memory would abort the
    /// process there rather than fail with an error. 1 GiB is far above what helps: the buffer
    /// only has to hold what appenders copy in while the writer writes out (PostgreSQL's
    /// automatic `wal_buffers` is at most one 16 MiB segment), and 1 GiB is still an amount a
    /// server can spare.
    pub fn buffer_size(mut self, bytes: usize) -> Config {
        self.buffer_size = bytes;
        self
    }

    /// Takes the keys from `store` (data keys wrapped under a KEK; see [`KeyStore`]). The log
    /// rotates data keys into it and retires keys from it when `purge_before` removed the last
    /// segment that lists them.
    pub fn key_store(mut self, store: Arc<KeyStore>) -> Config {
        self.keys = store.ring();
        self.key_store = Some(store);
        self
    }

    /// The data keys the log is read with: its key store's as the store holds them now (a
    /// rotation may have added one since this configuration was made), else the ring given.
    pub(crate) fn current_ring(&self) -> KeyRing {
        match &self.key_store {
            Some(store) => store.ring(),
            None => self.keys.clone(),
        }
    }

    /// Directories of sealed files ([`crate::SealedFiles`]) under this log's key store. When
    /// `purge_before` retires the data keys that no remaining segment lists, it also reads the
    /// headers of the files directly in these directories and keeps every key one of them is
    /// sealed under. A directory that cannot be listed, or a file that starts like a sealed
    /// file but whose header does not read, fails the retirement (nothing is retired; the
    /// purge's removals stand). The temporary file of a replace that a crash interrupted
    /// (`.<name>.<16 hex>.tmp`) counts as a sealed file until it is removed. Default: none.
    pub fn sealed_dirs<P: Into<PathBuf>>(mut self, dirs: impl IntoIterator<Item = P>) -> Config {
        self.sealed_dirs = dirs.into_iter().map(Into::into).collect();
        self
    }

    /// Rotates the data key of a live log by itself, after `policy`'s bytes or time (needs
    /// [`Config::key_store`]).
    pub fn rotation(mut self, policy: RotationPolicy) -> Config {
        self.rotation = policy;
        self
    }

    /// Turns preparing segments ahead on or off. Default on: the next segment is created,
    /// zero-filled, fdatasync'ed and renamed into place by a thread of the `Wal`'s own while
    /// the writer fills the current one. Off, the writer creates each segment when it first
    /// needs it, inside a commit (a segment's worth of zeros and three syncs), unless the
    /// embedder calls `Wal::prepare_next_segment` itself; tests that count I/O operations turn
    /// it off to stay deterministic.
    pub fn prepare_segments(mut self, on: bool) -> Config {
        self.prepare_segments = on;
        self
    }

    /// Sets how many purged segment files [`crate::Wal::purge_before`] keeps, renamed to
    /// `<segment name>.free`, for new segments to reuse instead of creating new files. Default 4
    /// ([`DEFAULT_RECYCLE_SEGMENTS`]): a purge after each checkpoint usually frees one to a few
    /// segments, and four of them cover the segments the log fills before the next purge at
    /// one checkpoint per segment or two, for 64 MiB of disk at the default segment size. 0
    /// turns recycling off: every segment is a new file, and the open removes free files left
    /// by an earlier one.
    ///
    /// A reused file gets its new header page, fdatasync'ed, before it takes the segment's
    /// name; in a plaintext log its other pages are then written with zeros (an embedder's
    /// payload of the file's earlier life might otherwise hold a record valid at a later
    /// position, which a torn write could leave behind the end); in the other modes they are
    /// not wiped, and keep the old segment's pages until the writer
    /// covers them (the writer writes each page of a reused file whole the first time, so the
    /// log is followed by zeros inside the pages it wrote). What reuse saves is the new file's
    /// block allocation and zeros and the purge's unlink (which also trims the blocks on a file
    /// system mounted with `discard`). A file is reused only by the same log, only when its
    /// header is format version 3 or later and lists exactly the active data key (a
    /// rotated-out key's ciphertext is unlinked with its segment, never kept), and only under a
    /// later name in the same 4 GiB window of LSNs as the one it had: readers reject its old
    /// pages by their page addresses and its old records by their LSN-bound checksums.
    /// docs/FORMAT.md and docs/SECURITY.md say more.
    pub fn recycle_segments(mut self, files: usize) -> Config {
        self.recycle_segments = files;
        self
    }

    /// Replaces the storage back end (fault injection in tests, custom I/O). Default: the real
    /// file system.
    pub fn storage(mut self, storage: Arc<dyn Storage>) -> Config {
        self.storage = storage;
        self
    }

    /// Sets what opening does with damage inside the durable log. Default
    /// [`RecoveryMode::RefuseDamage`].
    pub fn recovery(mut self, mode: RecoveryMode) -> Config {
        self.recovery = mode;
        self
    }

    /// Sets the listener that hears of segment switches, flush rounds, poisoning and recovery.
    /// Default: none, which costs one branch per event site.
    pub fn listener(mut self, listener: Arc<dyn EventListener>) -> Config {
        self.listener = Some(listener);
        self
    }

    /// The encryption mode this configuration asks for.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// What `flush` guarantees under this configuration.
    pub fn sync_mode(&self) -> SyncMode {
        self.sync
    }

    /// The key ring this configuration opens logs with.
    pub fn key_ring(&self) -> &KeyRing {
        &self.keys
    }

    /// Page and segment size a new log gets.
    pub(crate) fn geometry(&self) -> Geometry {
        Geometry {
            page_size: self.page_size,
            segment_size: self.segment_size,
        }
    }

    /// Checks the settings on their own, without looking at a log: page and segment sizes (as
    /// a new log would get them), the buffer size, and a key ring for the encrypted modes.
    /// [`crate::Wal::open`] checks the same, but for an existing log checks the sizes against the log's own instead (sizes
    /// left unset adopt them, so only a new log needs the defaults to fit together); call it
    /// earlier to report a bad setting where it is made.
    ///
    /// Fails with [`Error::Config`] naming the setting and the rule it breaks.
    pub fn validate(&self) -> Result<()> {
        self.validate_sizes()?;
        self.validate_settings()
    }

    /// The page and segment sizes as a new log would get them.
    pub(crate) fn validate_sizes(&self) -> Result<()> {
        format::validate_geometry(self.geometry()).map_err(|why| Error::Config(why.into()))?;
        if self.segment_size > MAX_SEGMENT_SIZE {
            return Err(Error::Config(format!(
                "segment_size {} is above the maximum of {MAX_SEGMENT_SIZE} bytes (1 GiB) for \
                 a new log: every open reads the rest of the segment the log ends in, so larger \
                 segments make restarts slow",
                self.segment_size
            )));
        }
        Ok(())
    }

    /// Every setting but the page and segment sizes, which an existing log may supply.
    pub(crate) fn validate_settings(&self) -> Result<()> {
        if self.buffer_size > MAX_BUFFER_SIZE {
            return Err(Error::Config(format!(
                "buffer_size {} is above the maximum of {MAX_BUFFER_SIZE} bytes (1 GiB): the \
                 whole buffer is allocated when the log opens",
                self.buffer_size
            )));
        }
        if self.mode.is_encrypted() && self.keys.is_empty() {
            return Err(Error::Config(format!(
                "mode {} needs a key ring with at least one key",
                self.mode
            )));
        }
        // No limit on the ring's size: a segment header lists only the active key.
        Ok(())
    }

    /// Checks the settings against an existing log's mode and geometry (see the rule in the
    /// type's docs), then takes the log's sizes for the ones left unset.
    pub(crate) fn adopt_existing(&mut self, mode: Mode, geo: Geometry) -> Result<()> {
        self.check_existing(mode, geo)?;
        self.page_size = geo.page_size;
        self.segment_size = geo.segment_size;
        Ok(())
    }

    /// Checks the settings against an existing log's mode and geometry: the mode must match,
    /// and so must the sizes set explicitly.
    fn check_existing(&self, mode: Mode, geo: Geometry) -> Result<()> {
        if mode != self.mode {
            return Err(Error::Mismatch {
                what: "mode",
                on_disk: mode.to_string(),
                configured: self.mode.to_string(),
            });
        }
        if self.page_size_set && geo.page_size != self.page_size {
            return Err(Error::Mismatch {
                what: "page size",
                on_disk: geo.page_size.to_string(),
                configured: self.page_size.to_string(),
            });
        }
        if self.segment_size_set && geo.segment_size != self.segment_size {
            return Err(Error::Mismatch {
                what: "segment size",
                on_disk: geo.segment_size.to_string(),
                configured: self.segment_size.to_string(),
            });
        }
        Ok(())
    }
}
