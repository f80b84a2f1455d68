//! Errors of opening a log store or the demo state machine. Everything after open reports
//! openraft's `StorageError`.

use std::fmt;
use std::path::PathBuf;

use walcrypt::Lsn;

use crate::record::DecodeError;

/// Why a log store, or the key-value state machine's snapshot directory, could not be opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The walcrypt log could not be opened (damage, wrong key, locked, I/O...).
    Wal(walcrypt::Error),
    /// The configuration does not give openraft the durability it needs.
    Config(String),
    /// A record of the log could not be decoded as a raft log store record.
    Decode {
        /// Where the record starts.
        lsn: Lsn,
        /// What is wrong with it.
        source: DecodeError,
    },
    /// An entry in the log does not follow the entries before it, or (at open) the first entry
    /// left does not directly follow the purge point: replaying it would leave a hole in the
    /// raft log.
    Hole {
        /// Where the entry's record starts.
        lsn: Lsn,
        /// The entry's index.
        index: u64,
        /// The index the entry should have had.
        expected: u64,
    },
    /// The flush thread could not be started.
    Thread(std::io::Error),
    /// The newest entries could not be read back from the log into the cache (after
    /// truncations replayed at open left it short).
    ReadBack(String),
    /// The key-value state machine's snapshot directory or its snapshot file could not be
    /// created, opened, authenticated or decoded.
    Snapshot {
        /// The directory or file.
        path: PathBuf,
        /// What went wrong.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Wal(e) => write!(f, "walcrypt log: {e}"),
            Error::Config(why) => write!(f, "configuration: {why}"),
            Error::Decode { lsn, source } => write!(f, "record at LSN {lsn}: {source}"),
            Error::Hole {
                lsn,
                index,
                expected,
            } => write!(
                f,
                "record at LSN {lsn}: entry index {index} leaves a hole (expected at most {expected})"
            ),
            Error::Thread(e) => write!(f, "starting the flush thread: {e}"),
            Error::ReadBack(why) => write!(f, "reading the newest entries back: {why}"),
            Error::Snapshot { path, source } => write!(f, "snapshot {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Wal(e) => Some(e),
            Error::Decode { source, .. } => Some(source),
            Error::Thread(e) => Some(e),
            Error::Snapshot { source, .. } => Some(source.as_ref()),
            Error::Config(_) | Error::Hole { .. } | Error::ReadBack(_) => None,
        }
    }
}

impl From<walcrypt::Error> for Error {
    fn from(e: walcrypt::Error) -> Error {
        Error::Wal(e)
    }
}
