//! The in-memory state of the log store and the rules that build it from records.
//!
//! The same rules run live (after each write) and at open (for each record replayed in LSN
//! order), so a reopened store holds exactly what the durable records say:
//!
//! * an entry at index `i` replaces any entry at `i` or later (a conflicting suffix is
//!   overwritten, as after a truncation); it goes at most one past the last log index, and
//!   one at or below the purge point is purged as it arrives ([`place_entry`], checked live
//!   before each write, for each entry replayed and for the log the replay leaves);
//! * a truncate record removes every entry at or after its index;
//! * a purge record removes every entry up to its index and becomes the last purged log id,
//!   unless it is at or below the purge point (a stale purge changes nothing);
//! * the latest vote and committed records win.
//!
//! Every entry's LSN is kept (8 bytes an entry, from the purge point to the end); the entries
//! themselves only for a tail of the log, the cache. Older entries are read back from the log.

use std::collections::VecDeque;
use std::fmt;

use openraft::{LogId, RaftLogId, RaftTypeConfig, Vote};
use walcrypt::Lsn;

use crate::error::Error;
use crate::record::LogRecord;

/// Where an entry goes, by the rule [`place_entry`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Into the log, replacing any entry at its index or later.
    Append,
    /// Nowhere: its index is at or below the purge point, so the entry is purged as it
    /// arrives (openraft's own storage suite appends such an entry after its state machine
    /// got ahead of the log, and reads nothing back at or below the purge point).
    Purged,
}

/// The rule every entry follows, live (before the store writes it) and at open (for each
/// entry replayed and for the log the replay leaves, see [`State::check_start`]). `last` is
/// the last log index: of the last entry, or of the purge point `purged` when no entry is left
/// (the last log id the store reports).
///
/// * An entry at or below the purge point is [`Placement::Purged`]: those entries are gone,
///   and one arriving there is gone as well (nothing is written for it).
/// * Otherwise it goes at most one past `last`: one further on would leave a hole, so after a
///   purge that left no entry the next entry goes right after the purge point.
/// * With neither entries nor a purge point (a fresh log, or one truncated to nothing before
///   any purge) it may go at any index: raft starts a log wherever it needs to.
pub(crate) fn place_entry(
    index: u64,
    last: Option<u64>,
    purged: Option<u64>,
) -> Result<Placement, Hole> {
    if purged.is_some_and(|p| index <= p) {
        return Ok(Placement::Purged);
    }
    match last {
        Some(last) if index > last.saturating_add(1) => Err(Hole {
            index,
            next: last.saturating_add(1),
        }),
        _ => Ok(Placement::Append),
    }
}

/// An entry index [`place_entry`] refuses: it would leave a hole after the last log index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hole {
    /// The entry's index.
    pub(crate) index: u64,
    /// The highest index the entry could have had: the one after the last log index.
    pub(crate) next: u64,
}

impl fmt::Display for Hole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "index {} would leave a hole (the next index is at most {})",
            self.index, self.next
        )
    }
}

/// Entries (raft index → LSN, and the newest entries themselves), vote, committed and purge
/// point.
pub(crate) struct State<C: RaftTypeConfig> {
    /// The raft index of `lsns[0]` (when the log is empty: the index after the purge point).
    first: u64,
    /// Where each entry's record starts, from index `first` on, without gaps.
    lsns: VecDeque<Lsn>,
    /// The newest entries: always a suffix of the log (the last `cache.len()` indexes).
    cache: VecDeque<C::Entry>,
    /// How many entries the cache keeps once they are durable (at least 1).
    capacity: usize,
    pub(crate) last_purged: Option<LogId<C::NodeId>>,
    pub(crate) vote: Option<Vote<C::NodeId>>,
    pub(crate) committed: Option<LogId<C::NodeId>>,
}

impl<C: RaftTypeConfig> State<C> {
    pub(crate) fn new(capacity: usize) -> Self {
        State {
            first: 0,
            lsns: VecDeque::new(),
            cache: VecDeque::new(),
            capacity: capacity.max(1),
            last_purged: None,
            vote: None,
            committed: None,
        }
    }

    /// The index after the last entry (`first` when the log is empty).
    pub(crate) fn end(&self) -> u64 {
        self.first + self.lsns.len() as u64
    }

    /// The index of the first entry (of the index after the purge point when the log is
    /// empty).
    pub(crate) fn first_index(&self) -> u64 {
        self.first
    }

    /// The index of the first entry held in memory.
    pub(crate) fn cache_first(&self) -> u64 {
        self.end() - self.cache.len() as u64
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lsns.is_empty()
    }

    pub(crate) fn cache_len(&self) -> usize {
        self.cache.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The LSN of the entry at `index`, if the log has it.
    pub(crate) fn lsn_of(&self, index: u64) -> Option<Lsn> {
        let offset = index.checked_sub(self.first)?;
        self.lsns.get(usize::try_from(offset).ok()?).copied()
    }

    /// The LSN of the first entry, if any.
    pub(crate) fn first_lsn(&self) -> Option<Lsn> {
        self.lsns.front().copied()
    }

    /// The log id of the last entry. The cache always holds the last entry of a non-empty
    /// log once the store is open (see [`State::fill_front`]).
    pub(crate) fn last_log_id(&self) -> Option<LogId<C::NodeId>> {
        self.cache.back().map(|e| e.get_log_id().clone())
    }

    /// The entries of `lo..hi` held in memory (clamped to the log).
    pub(crate) fn cached(&self, lo: u64, hi: u64) -> impl Iterator<Item = &C::Entry> {
        let from = lo.max(self.cache_first());
        let to = hi.min(self.end());
        let skip = (from - self.cache_first()) as usize;
        let take = to.saturating_sub(from) as usize;
        self.cache.iter().skip(skip).take(take)
    }

    /// The LSNs of the entries `lo..hi` (clamped to the log).
    pub(crate) fn lsns(&self, lo: u64, hi: u64) -> Vec<(u64, Lsn)> {
        let from = lo.max(self.first);
        let to = hi.min(self.end());
        (from..to)
            .zip(self.lsns.iter().skip((from - self.first) as usize))
            .map(|(i, l)| (i, *l))
            .collect()
    }

    /// The index of the purge point, if any.
    pub(crate) fn purged_index(&self) -> Option<u64> {
        self.last_purged.as_ref().map(|p| p.index)
    }

    /// The last log index: of the last entry, or of the purge point when no entry is left
    /// (the last log id the store reports).
    pub(crate) fn last_index(&self) -> Option<u64> {
        if self.is_empty() {
            self.purged_index()
        } else {
            Some(self.end() - 1)
        }
    }

    /// Adds the entry whose record starts at `lsn`, replacing any entry at its index or later,
    /// then drops the oldest cached entries beyond the capacity whose records start before
    /// `durable` (so the log can give them back).
    pub(crate) fn put_entry(&mut self, lsn: Lsn, index: u64, entry: C::Entry, durable: Lsn) {
        if self.is_empty() || index <= self.first {
            self.lsns.clear();
            self.cache.clear();
            self.first = index;
        } else {
            self.truncate(index);
        }
        self.lsns.push_back(lsn);
        self.cache.push_back(entry);
        self.evict(durable);
    }

    /// Drops cached entries beyond the capacity, oldest first, while their records start
    /// before `durable`.
    pub(crate) fn evict(&mut self, durable: Lsn) {
        while self.cache.len() > self.capacity {
            let oldest = self.cache_first();
            match self.lsn_of(oldest) {
                Some(lsn) if lsn < durable => {
                    self.cache.pop_front();
                }
                _ => break,
            }
        }
    }

    /// Puts entries read back from the log in front of the cache: `entries` must be the
    /// entries just before [`State::cache_first`], in index order.
    pub(crate) fn fill_front(&mut self, entries: Vec<C::Entry>) {
        for entry in entries.into_iter().rev() {
            self.cache.push_front(entry);
        }
    }

    pub(crate) fn truncate(&mut self, since: u64) {
        if since <= self.first {
            self.lsns.clear();
            self.cache.clear();
            return;
        }
        let cache_first = self.cache_first();
        if since >= self.end() {
            return;
        }
        self.lsns.truncate((since - self.first) as usize);
        if since <= cache_first {
            self.cache.clear();
        } else {
            self.cache.truncate((since - cache_first) as usize);
        }
    }

    /// Whether a purge up to `upto` is stale: at or below the purge point. A stale purge
    /// changes nothing: the live store writes nothing and removes nothing for it (openraft
    /// ignores one too), and [`State::purge`] ignores its record, as the replay of a log
    /// written before that rule meets it.
    pub(crate) fn is_stale_purge(&self, upto: u64) -> bool {
        self.purged_index().is_some_and(|p| upto <= p)
    }

    /// Checks a purge up to `upto` the live store is about to write: the first entry left must
    /// be the one [`place_entry`] puts right after the new purge point, as
    /// [`State::check_start`] asks at open. Only a log that started further on than the index
    /// after `upto` before any purge fails it. `Err` with the first entry's index.
    pub(crate) fn check_purge(&self, upto: u64) -> Result<(), Hole> {
        if self.is_empty() || self.first <= upto.saturating_add(1) {
            return Ok(());
        }
        place_entry(self.first, Some(upto), Some(upto)).map(drop)
    }

    /// Drops every entry up to `upto` and makes it the purge point, unless the purge is stale.
    pub(crate) fn purge(&mut self, upto: LogId<C::NodeId>) {
        if self.is_stale_purge(upto.index) {
            return;
        }
        let keep_from = upto.index + 1;
        if keep_from >= self.end() {
            self.lsns.clear();
            self.cache.clear();
            self.first = keep_from;
        } else if keep_from > self.first {
            let cache_first = self.cache_first();
            self.lsns.drain(..(keep_from - self.first) as usize);
            if keep_from > cache_first {
                self.cache.drain(..(keep_from - cache_first) as usize);
            }
            self.first = keep_from;
        }
        self.last_purged = Some(upto);
    }

    /// After the replay: once entries were purged, the first entry left must be one
    /// [`place_entry`] puts into the log after the purge point when no entry is left, that is
    /// the one right after it. One further on means the log lost records after that point (a
    /// segment file removed by hand looks like a purge to walcrypt): refused as a hole, never
    /// served as a log with a gap. (Before any purge a log may start at any index, so a lost
    /// oldest segment cannot be told there.) The live store keeps to the same rule, so it never
    /// reaches a state this refuses.
    pub(crate) fn check_start(&self) -> Result<(), Hole> {
        if self.is_empty() {
            return Ok(());
        }
        place_entry(self.first, self.purged_index(), self.purged_index()).map(drop)
    }

    /// Applies one replayed record, by the same rules as the live store. Every replayed
    /// record is durable.
    pub(crate) fn replay(
        &mut self,
        lsn: Lsn,
        record: LogRecord<C::Entry, C::NodeId>,
    ) -> Result<(), Error> {
        match record {
            LogRecord::Entry(entry) => {
                let index = entry.get_log_id().index;
                // The replay may meet a purge record after entries that a later purge removed
                // from the log (their segment is gone), so until its end it may hold fewer
                // entries than the live store held at that point: an empty log here takes any
                // index, and the first entry is checked against the purge point once, at the
                // end (`check_start`). Entries replayed are checked for a hole after the last
                // of them, and those at or below the purge point are purged as live.
                let last = (!self.is_empty()).then(|| self.end() - 1);
                match place_entry(index, last, self.purged_index()) {
                    Ok(Placement::Append) => self.put_entry(lsn, index, entry, Lsn(u64::MAX)),
                    Ok(Placement::Purged) => {}
                    Err(hole) => {
                        return Err(Error::Hole {
                            lsn,
                            index,
                            expected: hole.next,
                        });
                    }
                }
            }
            LogRecord::Vote(vote) => self.vote = Some(vote),
            LogRecord::Committed(committed) => self.committed = committed,
            LogRecord::Truncate(since) => self.truncate(since.index),
            LogRecord::Purge(upto) => self.purge(upto),
        }
        Ok(())
    }
}
