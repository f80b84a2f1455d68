//! walcrypt: a write-ahead log with transparent AES-256-CTR encryption.
//!
//! A storage engine embeds a [`Wal`] as its write-ahead log. Every record can be encrypted in
//! one of two designs, chosen when the log is created and recorded on disk:
//!
//! * [`Mode::PerRecord`]: each payload is encrypted by the appending thread, before it takes
//!   the insert lock, under a fresh IV kept in the record's plaintext header.
//! * [`Mode::PageLevel`]: whole pages are encrypted when they are written, inside the write
//!   lock: the simple design, kept for comparison.
//! * [`Mode::Plaintext`]: no encryption, the baseline.
//! * [`Mode::PerRecordGcm`]: an option: perrecord with AES-256-GCM, whose tag binds each record
//!   to its log and position, so tampering with the files is detected
//!   ([`Error::AuthenticationFailed`]).
//!
//! Payloads can also be compressed before they are sealed ([`Compression`], off by default:
//! compressed lengths leak information about the plaintext; see docs/SECURITY.md).
//!
//! ```
//! use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};
//!
//! # fn main() -> walcrypt::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let keys = KeyRing::generate()?;
//! let config = Config::new(Mode::PerRecord).keys(keys.clone()).sync(SyncMode::Durable);
//! config.validate()?; // `Wal::open` checks too; this reports a bad setting where it is made
//!
//! // Open (or create), append from any thread, flush to make durable.
//! let wal = Wal::open(dir.path(), config.clone())?;
//! let lsn = wal.append(1, b"INSERT INTO t VALUES (42)")?;
//! wal.flush(lsn)?;
//!
//! // A transaction's records, placed together; flushing the last LSN covers them all.
//! let lsns = wal.append_batch([(1, &b"UPDATE t SET v = 43"[..]), (2, b"COMMIT")])?;
//! wal.flush(lsns[1])?;
//! wal.flush(wal.end_lsn())?; // any LSN up to the end: here, everything appended so far
//! wal.sync()?; // fdatasync everything, in every `SyncMode`
//! drop(wal); // or a crash: flushed records survive either way
//!
//! // After a restart: replay from the start, then keep writing at the end.
//! let mut replayed = Vec::new();
//! let wal = Wal::open_and_replay(dir.path(), config, Lsn::default(), |record| {
//!     replayed.push(record.payload);
//!     Ok(())
//! })?;
//! assert_eq!(replayed.len(), 3);
//! assert_eq!(replayed[0], b"INSERT INTO t VALUES (42)");
//! assert_eq!(wal.recovery_summary().map(|s| s.replayed), Some(3));
//! wal.close()?;
//!
//! // Read the log with the key ring.
//! let reader = Reader::open(dir.path(), Some(keys))?;
//! for record in reader.records_from(Lsn::default()) {
//!     let record = record?;
//!     println!("{} kind {} {} bytes", record.lsn, record.kind, record.payload.len());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Embedders need the items at the crate root: [`Wal`], [`Config`] (validated by
//! [`Config::validate`]), [`Reader`], [`Error`], and for metrics and logs [`Wal::stats`] and an
//! [`EventListener`]. Damage handling is chosen with [`RecoveryMode`]. Byte layouts, raw
//! records, page headers and the bare keystream are for tools and live in [`inspect`].
//!
//! A [`Follower`] reads a log while it grows (a replica, log shipping, `wal-dump --follow`):
//! it yields only records the writer has made durable, waits at the end and crosses into new
//! segments, in the writer's process or another one.
//!
//! ```
//! # use std::time::Duration;
//! # use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Wal};
//! # fn main() -> walcrypt::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let keys = KeyRing::generate()?;
//! let wal = std::sync::Arc::new(Wal::open(dir.path(), Config::new(Mode::PerRecord).keys(keys))?);
//! let mut follower = Follower::attach(&wal, Lsn::default())?; // or Follower::open(dir, keys, lsn)
//! let lsn = wal.append(1, b"replicate me")?;
//! assert!(follower.poll()?.is_none()); // appended, not yet durable
//! wal.flush(lsn)?;
//! let record = follower.next_timeout(Duration::from_secs(5))?.expect("flushed");
//! assert_eq!(record.payload, b"replicate me");
//! # Ok(())
//! # }
//! ```
//!
//! Keys can also live in a [`KeyStore`]: random data keys stored only wrapped under a
//! key-encryption key that a [`KeyProvider`] supplies (a KMS, a command, a file), rotated on a
//! live log, and retired once no segment uses them:
//!
//! ```
//! use std::sync::Arc;
//! use walcrypt::{Config, Kek, KeyStore, Mode, Wal};
//!
//! # fn main() -> walcrypt::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! // In production the KEK comes from a KMS: KekCommand, or your own KeyProvider.
//! let kek = Arc::new(Kek::generate("example KEK")?);
//! let store = Arc::new(KeyStore::create(dir.path().join("keys.store"), kek)?);
//! let wal = Wal::open(dir.path().join("log"), Config::new(Mode::PerRecord).key_store(store))?;
//! wal.append(1, b"under data key 1")?;
//! assert_eq!(wal.rotate_data_key()?, 2); // no reopen: new records use key 2
//! wal.append(1, b"under data key 2")?;
//! wal.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! The engine's other files (snapshots, checkpoints, manifests) are sealed under the same keys
//! with [`SealedFiles`], [`seal_file`] and [`open_file`]: AES-256-GCM in chunks, authenticated
//! against truncation, reordering and splicing, written atomically; [`Config::sealed_dirs`]
//! keeps their keys from being retired.
//!
//! The documents behind the API are in [`docs`]: the on-disk format
//! ([`docs::on_disk_format`]), the IV and key argument ([`docs::security`]), the design of the
//! write path and of recovery ([`docs::design`]), and the guarantees with their tests
//! ([`docs::reliability`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod aead;
mod compress;
mod config;
mod control;
mod crypto;
// Text only; left out when doctests are collected, since the documents hold no Rust examples.
#[cfg(not(doctest))]
pub mod docs;
mod error;
mod events;
mod format;
pub mod inspect;
mod keys;
// The shared-line ledger: public, with its counts, only under the feature `line-ledger`.
#[cfg(feature = "line-ledger")]
pub mod line_ledger;
#[cfg(not(feature = "line-ledger"))]
mod line_ledger;
mod lock_order;
mod reader;
mod recovery;
mod seal;
mod sealed;
pub mod storage;
mod tail;
mod writer;

use std::fmt;

pub use config::{
    Compression, Config, DEFAULT_BUFFER_SIZE, DEFAULT_MAX_HOLD_BYTES, DEFAULT_PAGE_SIZE,
    DEFAULT_RECYCLE_SEGMENTS, DEFAULT_SEGMENT_SIZE, MAX_BUFFER_SIZE, MAX_SEGMENT_SIZE, Mode,
    RecoveryMode, SyncMode,
};
pub use control::{CONTROL_FILE, Checkpoint, Hold, MAX_CHECKPOINT_META, MAX_HOLD_NAME, MAX_HOLDS};
pub use crypto::{IV_LEN, KCV_LEN, KEY_LEN};
pub use error::{CorruptionKind, Error, PoisonCause, Position, Result, SealedFileProblem};
pub use events::{
    EventListener, FlushRound, RecoveryProgress, RecoverySummary, Salvage, SegmentSwitch,
};
pub use format::Geometry;
pub use keys::{
    DEFAULT_COMMAND_TIMEOUT, Kek, KekCommand, KekFile, KekFormat, Key, KeyInfo, KeyProvider,
    KeyRing, KeyState, KeyStore, LOCAL_WRAP_LEN, PASSPHRASE_COST, PassphraseKek, ProviderSpec,
    RotationPolicy, STORE_MAGIC, STORE_VERSION,
};
pub use reader::{Follower, Reader, Record, Records, Visibility};
pub use sealed::{
    CHUNK_TAG_LEN, DEFAULT_CHUNK_SIZE, FileKeys, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, SEALED_HEADER_LEN,
    SEALED_MAGIC, SEALED_VERSION, SealedFiles, SealedReader, SealedWriter, open_file, seal_file,
    sealed_key_id, sealed_key_ids,
};
pub use writer::{Wal, WalStats};

/// A log sequence number: a byte position in the log, counting every segment and page header.
///
/// Displayed like PostgreSQL's, as the high and low 32 bits in hex: `0/16B3D40`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl From<Lsn> for u64 {
    fn from(lsn: Lsn) -> u64 {
        lsn.0
    }
}

impl From<u64> for Lsn {
    fn from(v: u64) -> Lsn {
        Lsn(v)
    }
}

/// Position arithmetic. An LSN plus a length is an LSN; an LSN minus an LSN is a length (the
/// bytes between them, headers included). LSNs are not added to each other. The operators
/// panic on overflow in debug builds like `u64`'s; the `checked_*` helpers return `None`
/// instead, for positions that come from input, and `saturating_add` stops at `u64::MAX`.
impl Lsn {
    /// `self + n`, or `None` past `u64::MAX`.
    pub fn checked_add(self, n: u64) -> Option<Lsn> {
        self.0.checked_add(n).map(Lsn)
    }

    /// `self + n`, or `Lsn(u64::MAX)` past it.
    pub fn saturating_add(self, n: u64) -> Lsn {
        Lsn(self.0.saturating_add(n))
    }

    /// `self - n`, or `None` below 0.
    pub fn checked_sub(self, n: u64) -> Option<Lsn> {
        self.0.checked_sub(n).map(Lsn)
    }

    /// The bytes from `earlier` to `self`, or `None` when `earlier` is past `self`.
    pub fn checked_distance(self, earlier: Lsn) -> Option<u64> {
        self.0.checked_sub(earlier.0)
    }
}

impl std::ops::Add<u64> for Lsn {
    type Output = Lsn;
    fn add(self, n: u64) -> Lsn {
        Lsn(self.0 + n)
    }
}

impl std::ops::AddAssign<u64> for Lsn {
    fn add_assign(&mut self, n: u64) {
        self.0 += n;
    }
}

impl std::ops::Sub<u64> for Lsn {
    type Output = Lsn;
    fn sub(self, n: u64) -> Lsn {
        Lsn(self.0 - n)
    }
}

/// The distance between two positions, in bytes.
impl std::ops::Sub<Lsn> for Lsn {
    type Output = u64;
    fn sub(self, earlier: Lsn) -> u64 {
        self.0 - earlier.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl std::str::FromStr for Lsn {
    type Err = String;

    /// Parses `HI/LO` (hex, as displayed), `0x...` (hex) or a decimal number.
    fn from_str(s: &str) -> std::result::Result<Lsn, String> {
        let bad = || format!("`{s}` is not an LSN (expected HI/LO hex, 0x hex or decimal)");
        if let Some((hi, lo)) = s.split_once('/') {
            let hi = u32::from_str_radix(hi, 16).map_err(|_| bad())?;
            let lo = u32::from_str_radix(lo, 16).map_err(|_| bad())?;
            return Ok(Lsn(((hi as u64) << 32) | lo as u64));
        }
        if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            return u64::from_str_radix(hex, 16).map(Lsn).map_err(|_| bad());
        }
        s.parse().map(Lsn).map_err(|_| bad())
    }
}

#[cfg(test)]
mod tests {
    use super::Lsn;

    #[test]
    fn wal_and_reader_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<super::Wal>();
        shared::<super::Reader>();
        shared::<super::KeyRing>();
        fn movable<T: Send>() {}
        movable::<super::Follower>();
        movable::<super::SealedWriter>();
        movable::<super::SealedReader>();
        shared::<super::SealedFiles>();
    }

    #[test]
    fn lsn_displays_and_parses_like_postgres() {
        let lsn = Lsn(0x1_0001_A2C0);
        assert_eq!(lsn.to_string(), "1/1A2C0");
        assert_eq!("1/1A2C0".parse::<Lsn>(), Ok(lsn));
        assert_eq!("0x10001a2c0".parse::<Lsn>(), Ok(lsn));
        assert_eq!("4295074496".parse::<Lsn>(), Ok(lsn));
        assert!("zz".parse::<Lsn>().is_err());
    }

    #[test]
    fn lsn_arithmetic_adds_lengths_and_subtracts_positions() {
        let mut lsn = Lsn(8192) + 48;
        assert_eq!(lsn, Lsn(8240));
        lsn += 16;
        assert_eq!(lsn - Lsn(8192), 64);
        assert_eq!(lsn - 64, Lsn(8192));
        assert_eq!(Lsn(u64::MAX).checked_add(1), None);
        assert_eq!(Lsn(u64::MAX - 1).saturating_add(2), Lsn(u64::MAX));
        assert_eq!(Lsn(0).checked_sub(1), None);
        assert_eq!(Lsn(10).checked_distance(Lsn(11)), None);
        assert_eq!(Lsn(11).checked_distance(Lsn(10)), Some(1));
    }
}
