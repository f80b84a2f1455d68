//! [`WalLogStore`]: openraft's `RaftLogStorage` on a walcrypt [`Wal`].

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, LogId, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError,
    StorageIOError, Vote,
};
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use walcrypt::{Config, Lsn, SyncMode, Wal, WalStats};

use crate::error::Error;
use crate::flusher::{Flusher, Waiter};
use crate::record::{
    self, KIND_COMMITTED, KIND_ENTRY, KIND_PURGE, KIND_TRUNCATE, KIND_VOTE, LogRecord,
};
use crate::state::State;

/// An openraft log store on a walcrypt log. Cloning is cheap: clones share one log (the
/// store hands clones out as its log reader).
///
/// Entries are kept in memory from the purge point to the end of the log (as openraft's
/// in-memory stores keep them) together with the LSN of each entry's record, so reads never
/// touch the log being written; the log on disk is what rebuilds them at open. Memory grows
/// with the unpurged log: let openraft snapshot and purge (its default policy does).
pub struct WalLogStore<C: RaftTypeConfig> {
    inner: Arc<Inner<C>>,
}

impl<C: RaftTypeConfig> Clone for WalLogStore<C> {
    fn clone(&self) -> Self {
        WalLogStore {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<C: RaftTypeConfig> {
    state: Mutex<State<C>>,
    // Declared before `wal`: dropping the store first ends the flush thread (which holds the
    // other reference to the log), so the log is closed when the last clone is dropped.
    flusher: Flusher<C>,
    wal: Arc<Wal>,
}

type StoreResult<T, C> = Result<T, StorageError<<C as RaftTypeConfig>::NodeId>>;

fn write_error<C: RaftTypeConfig>(
    e: &(impl std::error::Error + 'static),
) -> StorageError<C::NodeId> {
    StorageIOError::write_logs(AnyError::new(e)).into()
}

fn vote_error<C: RaftTypeConfig>(
    e: &(impl std::error::Error + 'static),
) -> StorageError<C::NodeId> {
    StorageIOError::write_vote(AnyError::new(e)).into()
}

impl<C> WalLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone + Serialize + DeserializeOwned,
{
    /// Opens (or creates) the log store in `dir`: replays the log once, from its oldest
    /// segment, building the index from raft log index to LSN, the vote, the committed log id
    /// and the purge point. A torn tail is cut off by walcrypt first, so the store reopens to
    /// exactly the records that were durable.
    ///
    /// `config.sync` must be [`SyncMode::Durable`]: openraft reports an entry as persisted
    /// when its flush callback fires, and the store fires it only after fdatasync.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<WalLogStore<C>, Error> {
        if config.sync_mode() != SyncMode::Durable {
            return Err(Error::Config(format!(
                "sync mode {} does not make entries durable before openraft is told they are; use durable",
                config.sync_mode().name()
            )));
        }
        let mut state = State::<C>::default();
        let mut failed = None;
        let opened = Wal::open_and_replay(dir, config, Lsn::default(), |rec| {
            let applied = match LogRecord::decode(rec.kind, &rec.payload) {
                Ok(decoded) => state.replay(rec.lsn, decoded),
                Err(source) => Err(Error::Decode {
                    lsn: rec.lsn,
                    source,
                }),
            };
            applied.map_err(|e| {
                failed = Some(e);
                walcrypt::Error::Config("raft log replay stopped".into())
            })
        });
        let wal = match (opened, failed) {
            (_, Some(e)) => return Err(e),
            (result, None) => Arc::new(result?),
        };
        let flusher = Flusher::start(wal.clone()).map_err(Error::Thread)?;
        Ok(WalLogStore {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                flusher,
                wal,
            }),
        })
    }

    /// The LSN of the record holding the entry at raft log `index`, if the store has it.
    pub fn lsn_of(&self, index: u64) -> Option<Lsn> {
        self.inner.state.lock().log.get(&index).map(|s| s.lsn)
    }

    /// The walcrypt log's counters (appends, fsyncs, bytes...).
    pub fn wal_stats(&self) -> WalStats {
        self.inner.wal.stats()
    }

    /// Appends entries like openraft's `append`, with a callback of the caller's own:
    /// `on_durable` runs on the flush thread once an fdatasync covers the last entry (or with
    /// the error that stopped it). For embedders that drive the store without openraft's
    /// callback type, and for benchmarks.
    #[expect(
        clippy::result_large_err,
        reason = "openraft's StorageError, as the trait returns it"
    )]
    pub fn append_entries<I>(
        &self,
        entries: I,
        on_durable: impl FnOnce(std::io::Result<()>) + Send + 'static,
    ) -> StoreResult<(), C>
    where
        I: IntoIterator<Item = C::Entry>,
    {
        self.append_inner(entries, Waiter::Call(Box::new(on_durable)))
    }

    #[expect(
        clippy::result_large_err,
        reason = "openraft's StorageError, as the trait returns it"
    )]
    fn append_inner<I>(&self, entries: I, waiter: Waiter<C>) -> StoreResult<(), C>
    where
        I: IntoIterator<Item = C::Entry>,
    {
        // Encoding happens before the state lock.
        let mut encoded = Vec::new();
        for entry in entries {
            let payload = record::encode(&entry).map_err(|e| write_error::<C>(&e))?;
            encoded.push((payload, entry));
        }
        let last = {
            let mut state = self.inner.state.lock();
            for (payload, entry) in encoded {
                let log_id = entry.get_log_id().clone();
                if let Err(expected) = state.check_entry(log_id.index) {
                    let why =
                        format!("entry {log_id} would leave a hole: the next index is {expected}");
                    return Err(StorageIOError::write_log_entry(
                        log_id.clone(),
                        AnyError::error(why),
                    )
                    .into());
                }
                let lsn = self.inner.wal.append(KIND_ENTRY, &payload).map_err(|e| {
                    StorageIOError::write_log_entry(log_id.clone(), AnyError::new(&e))
                })?;
                state.put_entry(lsn, log_id.index, entry);
            }
            state.last_lsn
        };
        self.inner.flusher.submit(last, waiter);
        Ok(())
    }

    /// Appends one record under the state lock and returns its LSN.
    fn append_record(
        &self,
        state: &mut State<C>,
        kind: u8,
        payload: &[u8],
    ) -> walcrypt::Result<Lsn> {
        let lsn = self.inner.wal.append(kind, payload)?;
        state.last_lsn = Some(lsn);
        Ok(lsn)
    }

    /// Waits until every record appended so far is durable.
    async fn flush_all(&self) -> Result<(), String> {
        let last = self.inner.state.lock().last_lsn;
        let (tx, rx) = oneshot::channel();
        self.inner.flusher.submit(last, Waiter::Reply(tx));
        rx.await
            .map_err(|_| "the log store's flush thread has stopped".to_string())?
    }
}

impl<C> RaftLogReader<C> for WalLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone + Serialize + DeserializeOwned,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<C::Entry>, C> {
        let state = self.inner.state.lock();
        Ok(state
            .log
            .range(range)
            .map(|(_, slot)| slot.entry.clone())
            .collect())
    }
}

impl<C> RaftLogStorage<C> for WalLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone + Serialize + DeserializeOwned,
{
    type LogReader = WalLogStore<C>;

    async fn get_log_state(&mut self) -> StoreResult<LogState<C>, C> {
        let state = self.inner.state.lock();
        let last = state
            .log
            .last_key_value()
            .map(|(_, s)| s.entry.get_log_id().clone());
        Ok(LogState {
            last_log_id: last.or_else(|| state.last_purged.clone()),
            last_purged_log_id: state.last_purged.clone(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Appends the vote and returns once it (and everything written before it) is durable.
    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> StoreResult<(), C> {
        let payload = record::encode(vote).map_err(|e| vote_error::<C>(&e))?;
        {
            let mut state = self.inner.state.lock();
            self.append_record(&mut state, KIND_VOTE, &payload)
                .map_err(|e| vote_error::<C>(&e))?;
            state.vote = Some(vote.clone());
        }
        self.flush_all()
            .await
            .map_err(|e| StorageIOError::write_vote(AnyError::error(e)).into())
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote<C::NodeId>>, C> {
        Ok(self.inner.state.lock().vote.clone())
    }

    /// Appends the committed log id; it becomes durable with the next flush (an append's
    /// callback, a vote), which openraft allows: a committed log id read back may lag.
    async fn save_committed(&mut self, committed: Option<LogId<C::NodeId>>) -> StoreResult<(), C> {
        let payload = record::encode(&committed).map_err(|e| write_error::<C>(&e))?;
        let mut state = self.inner.state.lock();
        self.append_record(&mut state, KIND_COMMITTED, &payload)
            .map_err(|e| write_error::<C>(&e))?;
        state.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> StoreResult<Option<LogId<C::NodeId>>, C> {
        Ok(self.inner.state.lock().committed.clone())
    }

    /// Appends the entries (readable at once) and queues `callback` for the group commit,
    /// which calls it after the fdatasync that covers the last entry.
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> StoreResult<(), C>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.append_inner(entries, Waiter::Log(callback))
    }

    /// Appends a truncate record and drops the entries from `log_id.index` on. It becomes
    /// durable with the next flush; until then a crash brings back the old suffix, the state
    /// before the truncation, which raft tolerates (nothing newer was acknowledged).
    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> StoreResult<(), C> {
        let payload = record::encode(&log_id).map_err(|e| write_error::<C>(&e))?;
        let mut state = self.inner.state.lock();
        self.append_record(&mut state, KIND_TRUNCATE, &payload)
            .map_err(|e| write_error::<C>(&e))?;
        state.truncate(log_id.index);
        Ok(())
    }

    /// Appends a purge record followed by the current vote and committed log id, flushes,
    /// and removes the segment files that lie entirely before the oldest record still needed
    /// (the first entry after `log_id`, or the purge record when no entry is left).
    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> StoreResult<(), C> {
        let payload = record::encode(&log_id).map_err(|e| write_error::<C>(&e))?;
        let keep_from = {
            let mut state = self.inner.state.lock();
            let marker = self
                .append_record(&mut state, KIND_PURGE, &payload)
                .map_err(|e| write_error::<C>(&e))?;
            state.purge(log_id);
            if let Some(vote) = state.vote.clone() {
                let payload = record::encode(&vote).map_err(|e| write_error::<C>(&e))?;
                self.append_record(&mut state, KIND_VOTE, &payload)
                    .map_err(|e| write_error::<C>(&e))?;
            }
            if state.committed.is_some() {
                let payload =
                    record::encode(&state.committed.clone()).map_err(|e| write_error::<C>(&e))?;
                self.append_record(&mut state, KIND_COMMITTED, &payload)
                    .map_err(|e| write_error::<C>(&e))?;
            }
            state.log.first_key_value().map_or(marker, |(_, s)| s.lsn)
        };
        self.flush_all()
            .await
            .map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?;
        self.inner
            .wal
            .purge_before(keep_from)
            .map_err(|e| write_error::<C>(&e))?;
        Ok(())
    }
}
