//! The in-memory state of the log store and the rules that build it from records.
//!
//! The same rules run live (after each write) and at open (for each record replayed in LSN
//! order), so a reopened store holds exactly what the durable records say:
//!
//! * an entry at index `i` replaces any entry at `i` or later (a conflicting suffix is
//!   overwritten, as after a truncation);
//! * a truncate record removes every entry at or after its index;
//! * a purge record removes every entry up to its index and becomes the last purged log id;
//! * the latest vote and committed records win.

use std::collections::BTreeMap;

use openraft::{LogId, RaftLogId, RaftTypeConfig, Vote};
use walcrypt::Lsn;

use crate::error::Error;
use crate::record::LogRecord;

/// A log entry and where its record starts.
pub(crate) struct Slot<C: RaftTypeConfig> {
    pub(crate) lsn: Lsn,
    pub(crate) entry: C::Entry,
}

/// Entries (raft index → LSN and entry), vote, committed and purge point.
pub(crate) struct State<C: RaftTypeConfig> {
    pub(crate) log: BTreeMap<u64, Slot<C>>,
    pub(crate) last_purged: Option<LogId<C::NodeId>>,
    pub(crate) vote: Option<Vote<C::NodeId>>,
    pub(crate) committed: Option<LogId<C::NodeId>>,
    /// The start of the last record written or replayed: a flush to it covers everything.
    pub(crate) last_lsn: Option<Lsn>,
}

impl<C: RaftTypeConfig> Default for State<C> {
    fn default() -> Self {
        State {
            log: BTreeMap::new(),
            last_purged: None,
            vote: None,
            committed: None,
            last_lsn: None,
        }
    }
}

impl<C: RaftTypeConfig> State<C> {
    /// Checks that an entry at `index` leaves no hole after the last entry; returns the index
    /// it may have at most otherwise. An empty log takes any index: raft starts a log (or
    /// restarts it after a snapshot) wherever it needs to.
    pub(crate) fn check_entry(&self, index: u64) -> Result<(), u64> {
        match self.log.last_key_value() {
            Some((last, _)) if index > last + 1 => Err(last + 1),
            _ => Ok(()),
        }
    }

    pub(crate) fn put_entry(&mut self, lsn: Lsn, index: u64, entry: C::Entry) {
        self.log.split_off(&index);
        self.log.insert(index, Slot { lsn, entry });
        self.last_lsn = Some(lsn);
    }

    pub(crate) fn truncate(&mut self, since: u64) {
        self.log.split_off(&since);
    }

    pub(crate) fn purge(&mut self, upto: LogId<C::NodeId>) {
        self.log = self.log.split_off(&(upto.index + 1));
        if self.last_purged.as_ref().is_none_or(|p| *p < upto) {
            self.last_purged = Some(upto);
        }
    }

    /// Applies one replayed record, by the same rules as the live store.
    pub(crate) fn replay(
        &mut self,
        lsn: Lsn,
        record: LogRecord<C::Entry, C::NodeId>,
    ) -> Result<(), Error> {
        match record {
            LogRecord::Entry(entry) => {
                let index = entry.get_log_id().index;
                self.check_entry(index).map_err(|expected| Error::Hole {
                    lsn,
                    index,
                    expected,
                })?;
                self.put_entry(lsn, index, entry);
                return Ok(());
            }
            LogRecord::Vote(vote) => self.vote = Some(vote),
            LogRecord::Committed(committed) => self.committed = committed,
            LogRecord::Truncate(since) => self.truncate(since.index),
            LogRecord::Purge(upto) => self.purge(upto),
        }
        self.last_lsn = Some(lsn);
        Ok(())
    }
}
