//! Configuration: the encryption mode, keys, sizes and durability.

use std::fmt;
use std::sync::Arc;

use crate::crypto::KeyRing;
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
    /// Like [`Mode::PerRecord`], but authenticated: AES-256-GCM, whose tag also covers the
    /// log id, the record's LSN, kind, flags, length and key id. A record that was altered,
    /// moved, replayed or spliced in from another log fails with
    /// [`Error::AuthenticationFailed`](crate::Error::AuthenticationFailed). Off unless chosen;
    /// its cost against CTR is in docs/BENCHMARKS.md.
    PerRecordGcm,
}

impl Mode {
    /// All modes, baseline first.
    pub const ALL: [Mode; 4] = [
        Mode::Plaintext,
        Mode::PerRecord,
        Mode::PageLevel,
        Mode::PerRecordGcm,
    ];

    /// The lower-case name used by tools: `plaintext`, `perrecord`, `pagelevel`,
    /// `perrecord-gcm`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plaintext => "plaintext",
            Mode::PerRecord => "perrecord",
            Mode::PageLevel => "pagelevel",
            Mode::PerRecordGcm => "perrecord-gcm",
        }
    }

    /// True for the modes that need keys.
    pub fn is_encrypted(self) -> bool {
        self != Mode::Plaintext
    }

    /// True for the modes that encrypt each record in the appending thread.
    pub fn is_per_record(self) -> bool {
        matches!(self, Mode::PerRecord | Mode::PerRecordGcm)
    }

    /// True for the mode whose records carry an authentication tag.
    pub fn is_authenticated(self) -> bool {
        self == Mode::PerRecordGcm
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Mode::Plaintext => 0,
            Mode::PerRecord => 1,
            Mode::PageLevel => 2,
            Mode::PerRecordGcm => 3,
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
                format!(
                    "unknown mode `{s}` (expected plaintext, perrecord, pagelevel or perrecord-gcm)"
                )
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
    /// Payload compression for records this `Wal` appends. Default [`Compression::Off`].
    pub compression: Compression,
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
            .field("compression", &self.compression)
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
            compression: Compression::Off,
        }
    }

    /// Sets payload compression (off by default; read docs/SECURITY.md first).
    pub fn compression(mut self, compression: Compression) -> Config {
        self.compression = compression;
        self
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

    /// Replaces the storage back end (fault injection in tests, custom I/O).
    pub fn storage(mut self, storage: Arc<dyn Storage>) -> Config {
        self.storage = storage;
        self
    }
}
