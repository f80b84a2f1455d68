//! Configuration: the encryption mode, keys, sizes and durability.

use std::fmt;
use std::sync::Arc;

use crate::keys::{KeyRing, KeyStore, RotationPolicy};
use crate::storage::{FsStorage, Storage};

/// How the log is encrypted. Chosen when a log is created and recorded in every segment header,
/// so readers and tools never need to be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// No encryption: the baseline.
    #[default]
    Plaintext,
    /// Each record's payload is encrypted with AES-256-CTR under a fresh IV kept in the record's
    /// plaintext header. The appending thread encrypts before it takes the insert lock.
    PerRecord,
    /// Each page body is encrypted with AES-256-CTR under a fresh IV kept in the page header,
    /// every time the page is written, inside the write lock.
    PageLevel,
}

impl Mode {
    /// All modes, baseline first.
    pub const ALL: [Mode; 3] = [Mode::Plaintext, Mode::PerRecord, Mode::PageLevel];

    /// The lower-case name used by tools: `plaintext`, `perrecord`, `pagelevel`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plaintext => "plaintext",
            Mode::PerRecord => "perrecord",
            Mode::PageLevel => "pagelevel",
        }
    }

    /// True for the modes that need keys.
    pub fn is_encrypted(self) -> bool {
        self != Mode::Plaintext
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Mode::Plaintext => 0,
            Mode::PerRecord => 1,
            Mode::PageLevel => 2,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.code() == code)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!("unknown mode `{s}` (expected plaintext, perrecord or pagelevel)")
            })
    }
}

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

/// Settings for [`crate::Wal::open`]. Build with [`Config::new`] and the builder methods.
#[derive(Clone)]
pub struct Config {
    /// Encryption mode. No default: every log states it. A log on disk must match.
    pub mode: Mode,
    /// Keys; the active (last) key encrypts new data. Default: empty, which only
    /// [`Mode::Plaintext`] accepts.
    pub keys: KeyRing,
    /// Size of each segment file. Default 16 MiB. A multiple of the page size, at least two
    /// pages. Used when the log is created; an existing log keeps its own.
    pub segment_size: u64,
    /// Size of a page. Default 8 KiB; a power of two from 512 B to 1 MiB. Used when the log is
    /// created; an existing log keeps its own.
    pub page_size: u64,
    /// Durability of `flush`. Default [`SyncMode::Durable`].
    pub sync: SyncMode,
    /// Size of the in-memory WAL buffer. Default 4 MiB, rounded up to at least 4 pages.
    /// Appenders wait for the writer when it is full, so memory stays bounded.
    pub buffer_size: usize,
    /// Where the files live. Default: the real file system.
    pub storage: Arc<dyn Storage>,
    /// A key store to take the keys from (its ring replaces `keys` when the log opens) and to
    /// record rotations and retirements in. Default: none (the raw ring in `keys`).
    pub key_store: Option<Arc<KeyStore>>,
    /// Automatic data-key rotation of a live log (needs `key_store`). Default: off.
    pub rotation: RotationPolicy,
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
            .finish_non_exhaustive()
    }
}

/// Default segment size: 16 MiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 16 << 20;
/// Default page size: 8 KiB.
pub const DEFAULT_PAGE_SIZE: u64 = 8 << 10;
/// Default WAL buffer size: 4 MiB.
pub const DEFAULT_BUFFER_SIZE: usize = 4 << 20;

impl Config {
    /// A configuration for `mode` with every other setting at its default.
    pub fn new(mode: Mode) -> Config {
        Config {
            mode,
            keys: KeyRing::empty(),
            segment_size: DEFAULT_SEGMENT_SIZE,
            page_size: DEFAULT_PAGE_SIZE,
            sync: SyncMode::default(),
            buffer_size: DEFAULT_BUFFER_SIZE,
            storage: Arc::new(FsStorage),
            key_store: None,
            rotation: RotationPolicy::default(),
        }
    }

    /// Sets the key ring.
    pub fn keys(mut self, keys: KeyRing) -> Config {
        self.keys = keys;
        self
    }

    /// Sets the segment size in bytes.
    pub fn segment_size(mut self, bytes: u64) -> Config {
        self.segment_size = bytes;
        self
    }

    /// Sets the page size in bytes.
    pub fn page_size(mut self, bytes: u64) -> Config {
        self.page_size = bytes;
        self
    }

    /// Sets what `flush` guarantees.
    pub fn sync(mut self, sync: SyncMode) -> Config {
        self.sync = sync;
        self
    }

    /// Sets the WAL buffer size in bytes.
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

    /// Rotates the data key of a live log by itself, after `policy`'s bytes or time (needs
    /// [`Config::key_store`]).
    pub fn rotation(mut self, policy: RotationPolicy) -> Config {
        self.rotation = policy;
        self
    }

    /// Replaces the storage back end (fault injection in tests, custom I/O).
    pub fn storage(mut self, storage: Arc<dyn Storage>) -> Config {
        self.storage = storage;
        self
    }
}
