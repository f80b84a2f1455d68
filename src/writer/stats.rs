//! The statistics a `Wal` keeps ([`WalStats`]): counters sharded per thread, each shard on
//! cache lines of its own, added to with relaxed atomic adds and summed on read, so an
//! appender writes no statistics line another appender writes and reading them takes no lock.

use std::sync::atomic::Ordering;

use crossbeam::utils::CachePadded;

use super::{Wal, lane_hint};
use crate::line_ledger::LineU64;

/// Counters a `Wal` keeps about its own work; see [`Wal::stats`].
///
/// Lock hold times are measured with a monotonic clock from the moment the lock is acquired
/// to the moment it is released. For an acquisition that does not wait, the clock is read
/// just before it (outside the lock), so the hold includes the acquiring compare-and-swap; a
/// thread that waits reads the clock once it holds the lock, so waiting never counts as held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records appended.
    pub appends: u64,
    /// Payload bytes appended.
    pub payload_bytes: u64,
    /// Record bytes (headers and payloads) placed in the log.
    pub record_bytes: u64,
    /// Total time the insert lock was held, in nanoseconds: estimated from one hold in 16
    /// per thread (timed as the write lock is, see above), counted 16 times. The hold is a few lines of arithmetic, shorter than the two clock
    /// reads that would time it; timing every hold cost more than the hold.
    pub insert_lock_ns: u64,
    /// Times the write lock was taken.
    pub write_lock_acquisitions: u64,
    /// Write-outs: ranges of the buffer reserved for writing (one pwrite per segment they
    /// reach; counted when reserved, so one whose write then fails counts too) by a flush (a
    /// `Durable` round makes one or two), an appender facing a full buffer, a segment switch,
    /// `sync`, `close`, a drop, the open's rewrite of the tail page. A `Buffered` flush whose
    /// record a write-out already under way covers adds none, but takes the write lock to
    /// learn so.
    pub write_outs: u64,
    /// Total time the write lock was held, in nanoseconds (including fdatasync).
    pub write_lock_ns: u64,
    /// Of that, time spent encrypting pages (pagelevel only), in nanoseconds.
    pub write_lock_encrypt_ns: u64,
    /// Of that, time spent in fdatasync, in nanoseconds.
    pub fsync_ns: u64,
    /// fdatasync calls.
    pub fsyncs: u64,
    /// Page images written (a partly filled page may be written several times).
    pub pages_written: u64,
    /// Times an appender found the buffer full and had to write pages out itself.
    pub buffer_full_waits: u64,
}

/// One counter of [`WalStats`]: updated with relaxed atomic adds, so reading the statistics
/// never takes a lock (and never waits out an fdatasync).
pub(super) struct Counter(LineU64);

impl Default for Counter {
    fn default() -> Self {
        Counter(LineU64::named("stats", 0))
    }
}

impl Counter {
    pub(super) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One shard of the counters behind [`Wal::stats`], one counter per field.
#[derive(Default)]
pub(super) struct Shard {
    pub(super) appends: Counter,
    pub(super) payload_bytes: Counter,
    pub(super) record_bytes: Counter,
    pub(super) insert_lock_ns: Counter,
    pub(super) buffer_full_waits: Counter,
    pub(super) write_lock_acquisitions: Counter,
    pub(super) write_outs: Counter,
    pub(super) write_lock_ns: Counter,
    pub(super) write_lock_encrypt_ns: Counter,
    pub(super) fsync_ns: Counter,
    pub(super) fsyncs: Counter,
    pub(super) pages_written: Counter,
}

/// Shards of the counters, each on cache lines of its own: a thread adds to the shard of its
/// lane hint, so appenders on different threads write no statistics line in common, and
/// [`Wal::stats`] sums the shards.
pub(super) struct Counters(Box<[CachePadded<Shard>]>);

/// Shards of [`Counters`]: enough that up to this many appending threads never share one.
const COUNTER_SHARDS: usize = 16;

impl Default for Counters {
    fn default() -> Self {
        Counters((0..COUNTER_SHARDS).map(|_| Default::default()).collect())
    }
}

impl Counters {
    /// This thread's shard.
    pub(super) fn here(&self) -> &Shard {
        &self.0[lane_hint() % self.0.len()]
    }

    /// The sum of one counter over the shards.
    fn sum(&self, counter: impl Fn(&Shard) -> &Counter) -> u64 {
        self.0.iter().map(|shard| counter(shard).get()).sum()
    }
}

impl Wal {
    /// What this `Wal` has done since it was opened. Reads atomic counters and takes no lock,
    /// so it never waits for a write or an fdatasync. The counters are read one by one while
    /// other threads work: each is exact, the set is not one instant's snapshot.
    pub fn stats(&self) -> WalStats {
        let c = &self.counters;
        WalStats {
            appends: c.sum(|s| &s.appends),
            payload_bytes: c.sum(|s| &s.payload_bytes),
            record_bytes: c.sum(|s| &s.record_bytes),
            insert_lock_ns: c.sum(|s| &s.insert_lock_ns),
            write_lock_acquisitions: c.sum(|s| &s.write_lock_acquisitions),
            write_outs: c.sum(|s| &s.write_outs),
            write_lock_ns: c.sum(|s| &s.write_lock_ns),
            write_lock_encrypt_ns: c.sum(|s| &s.write_lock_encrypt_ns),
            fsync_ns: c.sum(|s| &s.fsync_ns),
            fsyncs: c.sum(|s| &s.fsyncs),
            pages_written: c.sum(|s| &s.pages_written),
            buffer_full_waits: c.sum(|s| &s.buffer_full_waits),
        }
    }
}
