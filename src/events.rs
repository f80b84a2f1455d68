//! Events a `Wal` reports to an embedder's listener: segment switches, flush rounds, poisoning
//! and what recovery found, so an engine can export metrics and logs.
//!
//! Every call happens on the thread that did the work, after it released the log's locks: a
//! slow listener delays that thread only, never the insert lock. Without a listener an event
//! costs one branch.

use std::time::Duration;

use crate::Lsn;
use crate::error::{CorruptionKind, PoisonCause, Position};

/// Receives events from a [`crate::Wal`]. Set with [`crate::Config::listener`]. Every method
/// has an empty default, so a listener implements only what it needs.
///
/// Methods are called with no lock of the log held, from whichever thread did the work; they
/// may call back into the same `Wal`. A `flush` from `on_flush_round` works in every sync
/// mode: the round being reported has ended, so the flush returns at once if that round
/// covered its LSN, and otherwise leads (or joins) a later round, whose listener call then
/// nests inside this one.
pub trait EventListener: Send + Sync {
    /// The log started writing into a new segment file. Reported by the next append or flush
    /// that finds the writer in the new segment (segments are created under the write lock,
    /// where no listener runs).
    fn on_segment_switch(&self, _event: &SegmentSwitch) {}

    /// A flush round this thread led has finished: a group-commit round (`Durable`, and
    /// pagelevel), or a `Buffered` flush's own write-out (or its wait for the write-out that
    /// covered its record), which joins no group.
    fn on_flush_round(&self, _event: &FlushRound) {}

    /// A write or fdatasync failed and the log now refuses further work until reopened.
    /// Reported once.
    fn on_poisoned(&self, _cause: &PoisonCause) {}

    /// `Wal::open` finished recovery (or created a new log).
    fn on_recovery(&self, _summary: &RecoverySummary) {}

    /// Recovery's scan of an existing log (in `Wal::open` and `Wal::open_and_replay`) has come
    /// this far. Called on the opening thread at most once per 64 MiB of log scanned or per
    /// 250 ms, whichever comes first (time is looked at once per MiB scanned), and once when
    /// the scan ends (`done`), before [`EventListener::on_recovery`]; never for a log the open
    /// creates. Within one open the counts never decrease.
    fn on_recovery_progress(&self, _progress: &RecoveryProgress) {}
}

/// How far recovery's scan has come. Positions count bytes of log (headers included) from
/// where the scan started ([`RecoverySummary::scanned_from`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryProgress {
    /// Bytes scanned so far.
    pub bytes_read: u64,
    /// Bytes from where the scan started to the end of the last segment file. The scan stops
    /// at the end of the valid log, at or before this; the last call (`done`) reports
    /// `bytes_read == bytes_total`.
    pub bytes_total: u64,
    /// Records read so far, whether or not they were handed to a replay callback.
    pub records_read: u64,
    /// The scan has ended: this is the last call of this open.
    pub done: bool,
}

/// The writer moved from one segment to a later one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentSwitch {
    /// Start LSN (file name) of the segment reported before.
    pub from: Lsn,
    /// Start LSN (file name) of the segment now written.
    pub to: Lsn,
}

/// One flush round: a group-commit round (`Durable`, and pagelevel), or a `Buffered` flush's
/// own write-out (or its wait for the write-out that covered its record).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlushRound {
    /// Every record before this position is flushed now.
    pub flushed_to: Lsn,
    /// Whether the round called fdatasync ([`crate::SyncMode::Durable`]).
    pub synced: bool,
    /// Time from taking the lead (a `Buffered` flush outside group commit: from the start of
    /// its write-out) to the end of the round, the wait for the write lock included.
    pub duration: Duration,
}

/// What `Wal::open` found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoverySummary {
    /// True when the directory held no log and a new one was created.
    pub created: bool,
    /// Where reading started (a record boundary before which the log is known durable).
    pub scanned_from: Lsn,
    /// The end of the valid log: where writing resumes.
    pub end: Lsn,
    /// Records handed to the replay callback (`Wal::open_and_replay`), 0 otherwise.
    pub replayed: u64,
    /// Damage cut away under [`crate::RecoveryMode::TruncateAtDamage`]; `None` when the log
    /// was intact (a torn tail is not damage).
    pub salvaged: Option<Salvage>,
    /// Time the open took.
    pub duration: Duration,
}

/// Damage that recovery cut away because the configuration asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Salvage {
    /// Where the damage was found.
    pub at: Position,
    /// What was wrong.
    pub kind: CorruptionKind,
    /// The log now ends here: the first damaged record's start. Every record before it is kept.
    pub cut_at: Lsn,
    /// The end of the segment files before the cut: everything from `cut_at` to here was
    /// zeroed or removed.
    pub files_ended_at: Lsn,
}
