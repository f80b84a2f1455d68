//! The records the log store writes into the walcrypt log, one walcrypt record each.
//!
//! The raft log is append-only on disk: a truncation or a purge is a record of its own kind,
//! and the state (entries, vote, committed log id, purge point) is what replaying the records
//! in LSN order produces. Payloads are postcard-encoded openraft types.

use openraft::{LogId, NodeId, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A raft log entry (`C::Entry`).
pub const KIND_ENTRY: u8 = 0x52;
/// The vote (`Vote`): the latest one in the log is the current vote.
pub const KIND_VOTE: u8 = 0x56;
/// The committed log id (`Option<LogId>`): the latest one wins.
pub const KIND_COMMITTED: u8 = 0x43;
/// Truncation: every entry at or after the index (`LogId`) is gone.
pub const KIND_TRUNCATE: u8 = 0x54;
/// Purge: every entry up to and including the log id (`LogId`) is gone, and it becomes the
/// last purged log id.
pub const KIND_PURGE: u8 = 0x50;

/// One decoded record of the log store.
pub enum LogRecord<E, NID: NodeId> {
    /// An entry.
    Entry(E),
    /// A vote.
    Vote(Vote<NID>),
    /// A committed log id.
    Committed(Option<LogId<NID>>),
    /// Entries from this log id's index on are truncated.
    Truncate(LogId<NID>),
    /// Entries up to this log id are purged.
    Purge(LogId<NID>),
}

/// Why a record of the log could not be decoded.
#[derive(Debug)]
pub struct DecodeError {
    /// The record's kind.
    pub kind: u8,
    /// What went wrong.
    pub reason: String,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "record kind {:#04x}: {}", self.kind, self.reason)
    }
}

impl std::error::Error for DecodeError {}

/// Encodes a value as a record payload.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_stdvec(value)
}

fn decode<T: DeserializeOwned>(kind: u8, payload: &[u8]) -> Result<T, DecodeError> {
    postcard::from_bytes(payload).map_err(|e| DecodeError {
        kind,
        reason: e.to_string(),
    })
}

impl<E: DeserializeOwned, NID: NodeId> LogRecord<E, NID> {
    /// Decodes a record read back from the log.
    pub fn decode(kind: u8, payload: &[u8]) -> Result<Self, DecodeError> {
        Ok(match kind {
            KIND_ENTRY => LogRecord::Entry(decode(kind, payload)?),
            KIND_VOTE => LogRecord::Vote(decode(kind, payload)?),
            KIND_COMMITTED => LogRecord::Committed(decode(kind, payload)?),
            KIND_TRUNCATE => LogRecord::Truncate(decode(kind, payload)?),
            KIND_PURGE => LogRecord::Purge(decode(kind, payload)?),
            _ => {
                return Err(DecodeError {
                    kind,
                    reason: "not a record kind of the raft log store".into(),
                });
            }
        })
    }
}

/// A short name for a record kind, for listings.
pub fn kind_name(kind: u8) -> &'static str {
    match kind {
        KIND_ENTRY => "entry",
        KIND_VOTE => "vote",
        KIND_COMMITTED => "committed",
        KIND_TRUNCATE => "truncate",
        KIND_PURGE => "purge",
        _ => "foreign",
    }
}
