//! [`WalLogStore`]: openraft's `RaftLogStorage` on a walcrypt [`Wal`].
//!
//! Two locks, always taken in this order (see [`crate::lock_order`], which checks it in debug
//! builds): first the reader's lock (`Inner::reader`: the follower for reads below the cache,
//! held for a whole read from the log and while a purge removes segment files), then the state
//! lock (`Inner::state`: the index, cache, vote, committed log id). The state lock may be taken
//! while the reader's lock is held, never the reverse: a truncation that may read from the log
//! takes the reader's lock first.
//!
//! Reads from the log and the removal of segment files block (a follower waits up to
//! [`READ_TIMEOUT`] for a record), and so may the wait for the reader's lock: the async
//! methods run them on tokio's blocking threads (`spawn_blocking`, with the store's shared
//! state cloned in), never on a runtime worker.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, LogId, OptionalSend, RaftLogId, RaftLogReader, RaftTypeConfig, StorageError,
    StorageIOError, Vote,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use walcrypt::{Config, Follower, Lsn, SyncMode, Wal, WalStats};

use crate::error::Error;
use crate::flusher::{Flusher, Waiter};
use crate::lock_order::{OrderedMutex, READER, STATE};
use crate::record::{
    self, KIND_COMMITTED, KIND_ENTRY, KIND_PURGE, KIND_TRUNCATE, KIND_VOTE, LogRecord,
};
use crate::state::{Placement, State, place_entry};

/// An openraft log store on a walcrypt log. Cloning is cheap: clones share one log (the
/// store hands clones out as its log reader).
///
/// The store keeps the LSN of every entry's record (from the purge point to the end) and the
/// newest entries themselves, up to [`StoreOptions::cache_entries`] once they are durable.
/// Reads of older entries (a lagging follower being caught up, a restarted node) go to the
/// log through a walcrypt [`Follower`] attached to it; the log on disk is also what rebuilds
/// the state at open.
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

/// How a [`WalLogStore`] is run, beside the walcrypt [`Config`] of its log.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    cache_entries: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_entries: StoreOptions::DEFAULT_CACHE_ENTRIES,
        }
    }
}

impl StoreOptions {
    /// The default of [`StoreOptions::cache_entries`]: a few of openraft's default
    /// replication batches (`max_payload_entries` = 300), 16 MiB of 4 KiB entries.
    pub const DEFAULT_CACHE_ENTRIES: usize = 4096;

    /// How many of the newest entries are kept in memory once they are durable (at least
    /// 1: the last entry is always kept). Entries not yet durable stay in memory until they
    /// are, however many there are. Older entries are read back from the log.
    pub fn cache_entries(mut self, entries: usize) -> StoreOptions {
        self.cache_entries = entries.max(1);
        self
    }

    /// The cache size set by [`StoreOptions::cache_entries`], in entries.
    pub fn cache_size(&self) -> usize {
        self.cache_entries
    }
}

/// The store's shared state. Lock order: `reader`, then `state` (module header).
struct Inner<C: RaftTypeConfig> {
    /// A follower positioned after the last entry read from the log, reused when the next
    /// read starts at or shortly after it. Held for a whole read from the log (so neither a
    /// purge nor a truncation runs during one), and by `purge` while segment files are
    /// removed, so a read never meets a segment vanishing under it.
    reader: OrderedMutex<Option<Follower>, READER>,
    state: OrderedMutex<State<C>, STATE>,
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

fn read_error<C: RaftTypeConfig>(why: String) -> StorageError<C::NodeId> {
    StorageIOError::read_logs(AnyError::error(why)).into()
}

/// A follower further behind the next wanted record than this is replaced by a new one
/// attached at the record (reading the gap would cost more than finding the segment).
const REUSE_WITHIN: u64 = 1 << 20;

/// How long a read waits for a record that must be in the log (it is durable) before it gives
/// up with an error.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

impl<C> WalLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone + Serialize + DeserializeOwned,
{
    /// Opens (or creates) the log store in `dir` with the default [`StoreOptions`]; see
    /// [`WalLogStore::open_with`].
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<WalLogStore<C>, Error> {
        Self::open_with(dir, config, StoreOptions::default())
    }

    /// Opens (or creates) the log store in `dir`: replays the log once, from its oldest
    /// segment, building the index from raft log index to LSN, the vote, the committed log id
    /// and the purge point, and keeping the newest entries in memory. A torn tail is cut off
    /// by walcrypt first, so the store reopens to exactly the records that were durable.
    ///
    /// `config.sync` must be [`SyncMode::Durable`]: openraft reports an entry as persisted
    /// when its flush callback fires, and the store fires it only after fdatasync.
    pub fn open_with(
        dir: impl AsRef<Path>,
        config: Config,
        options: StoreOptions,
    ) -> Result<WalLogStore<C>, Error> {
        if config.sync_mode() != SyncMode::Durable {
            return Err(Error::Config(format!(
                "sync mode {} does not make entries durable before openraft is told they are; use durable",
                config.sync_mode().name()
            )));
        }
        let mut state = State::<C>::new(options.cache_entries);
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
        if let Err(hole) = state.check_start() {
            return Err(Error::Hole {
                lsn: state.first_lsn().unwrap_or_default(),
                index: hole.index,
                expected: hole.next,
            });
        }
        let flusher = Flusher::start(wal.clone()).map_err(Error::Thread)?;
        let store = WalLogStore {
            inner: Arc::new(Inner {
                reader: OrderedMutex::new(None),
                state: OrderedMutex::new(state),
                flusher,
                wal,
            }),
        };
        // Truncations replayed may have left fewer entries in memory than the cache holds
        // (all of the log is durable now): read them back.
        let mut reader = store.inner.reader.lock();
        let mut state = store.inner.state.lock();
        let want = state
            .capacity()
            .min((state.end() - state.first_index()) as usize);
        if state.cache_len() < want {
            let lo = state.end() - want as u64;
            let hi = state.cache_first();
            let wanted = state.lsns(lo, hi);
            let entries = store
                .inner
                .read_from_log(&mut reader, &wanted)
                .map_err(Error::ReadBack)?;
            state.fill_front(entries);
        }
        drop(state);
        drop(reader);
        Ok(store)
    }

    /// The LSN of the record holding the entry at raft log `index`, if the store has it.
    pub fn lsn_of(&self, index: u64) -> Option<Lsn> {
        self.inner.state.lock().lsn_of(index)
    }

    /// How many entries are held in memory now (the rest are read from the log).
    pub fn cached_entries(&self) -> usize {
        self.inner.state.lock().cache_len()
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
        let entries: Vec<C::Entry> = entries.into_iter().collect();
        if !entries.is_empty() {
            // Encoding happens before the state lock (of all the entries: one at or below the
            // purge point, which is not written, is rare).
            let mut payloads = Vec::with_capacity(entries.len());
            for entry in &entries {
                payloads.push(record::encode(entry).map_err(|e| write_error::<C>(&e))?);
            }
            let mut state = self.inner.state.lock();
            // The whole batch is checked before anything is written, each entry by the rule
            // the replay at open applies (`place_entry`) against the log the entries before it
            // leave: an entry may replace the entry at its index (and all after it), never
            // leave a gap; one at or below the purge point is purged as it arrives.
            let purged = state.purged_index();
            let mut last = state.last_index();
            let mut batch = Vec::with_capacity(entries.len());
            for (entry, payload) in entries.into_iter().zip(payloads) {
                let log_id = entry.get_log_id();
                match place_entry(log_id.index, last, purged) {
                    Ok(Placement::Append) => {
                        last = Some(log_id.index);
                        batch.push((entry, payload));
                    }
                    Ok(Placement::Purged) => {}
                    Err(hole) => {
                        let why = format!("entry {log_id}: {hole}");
                        return Err(StorageIOError::write_log_entry(
                            log_id.clone(),
                            AnyError::error(why),
                        )
                        .into());
                    }
                }
            }
            if !batch.is_empty() {
                let lsns = append_records(
                    &self.inner.wal,
                    batch.iter().map(|(_, p)| (KIND_ENTRY, p.as_slice())),
                )
                .map_err(|e| write_error::<C>(&e))?;
                let durable = self.inner.wal.flushed_lsn();
                for (lsn, (entry, _)) in lsns.into_iter().zip(batch) {
                    let index = entry.get_log_id().index;
                    state.put_entry(lsn, index, entry, durable);
                }
            }
        }
        self.inner.flusher.submit(waiter);
        Ok(())
    }

    /// Waits until every record appended so far is durable.
    async fn flush_all(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.inner.flusher.submit(Waiter::Reply(tx));
        rx.await
            .map_err(|_| "the log store's flush thread has stopped".to_string())?
    }
}

impl<C> Inner<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone + Serialize + DeserializeOwned,
{
    /// Reads the entries `lo..hi` (clamped to the log) of which some lie below the cache:
    /// those from the log, the rest from the cache. Blocks: run it off the async workers.
    ///
    /// The reader's lock is held throughout, so no purge removes files and no truncation runs
    /// meanwhile; the state lock only for a look at the index and the cache, so appends go on.
    fn read_entries(&self, lo: u64, hi: u64) -> Result<Vec<C::Entry>, String> {
        let mut reader = self.reader.lock();
        let mut entries = Vec::new();
        let mut next = lo;
        loop {
            let wanted = {
                let state = self.state.lock();
                // `entries` holds `start..next`. A purge since the last look may have removed
                // some (their files stay until the reader's lock is released): leave them
                // out, as entries outside the log are.
                let start = next - entries.len() as u64;
                let purged = state.first_index().saturating_sub(start);
                entries.drain(..purged.min(entries.len() as u64) as usize);
                // Entries before the first are not in the log (`entries` is empty then).
                next = next.max(state.first_index());
                if next >= state.cache_first() || state.is_empty() {
                    entries.extend(state.cached(next, hi).cloned());
                    return Ok(entries);
                }
                state.lsns(next, hi.min(state.cache_first()))
            };
            // The cache may move on while the log is read (appends evict entries from it):
            // the next look reads what it no longer holds.
            let Some(&(last, _)) = wanted.last() else {
                return Ok(entries);
            };
            entries.extend(self.read_from_log(&mut reader, &wanted)?);
            next = last + 1;
        }
    }

    /// Reads the entries whose records start at `wanted` (index, LSN; in index order, all of
    /// them durable, none purged) from the log with the follower in `slot`, which the caller
    /// holds under the reader's lock. Blocks.
    fn read_from_log(
        &self,
        slot: &mut Option<Follower>,
        wanted: &[(u64, Lsn)],
    ) -> Result<Vec<C::Entry>, String> {
        let Some(&(_, first)) = wanted.first() else {
            return Ok(Vec::new());
        };
        let reusable = slot
            .as_ref()
            .is_some_and(|f| f.position() <= first && first.0 - f.position().0 <= REUSE_WITHIN);
        if !reusable {
            *slot = None;
            *slot = Some(
                Follower::attach(&self.wal, first)
                    .map_err(|e| format!("following the log from LSN {first}: {e}"))?,
            );
        }
        let Some(follower) = slot.as_mut() else {
            return Err("no reader".into());
        };
        let mut entries = Vec::with_capacity(wanted.len());
        let mut wanted = wanted.iter().peekable();
        while let Some(&&(index, lsn)) = wanted.peek() {
            let record = match follower.next_timeout(READ_TIMEOUT) {
                Ok(Some(record)) => record,
                Ok(None) => {
                    *slot = None;
                    return Err(format!(
                        "entry {index} at LSN {lsn} is not in the log after {READ_TIMEOUT:?}"
                    ));
                }
                Err(e) => {
                    *slot = None;
                    return Err(format!("reading entry {index} at LSN {lsn}: {e}"));
                }
            };
            if record.lsn < lsn {
                // A vote, a committed log id, a marker, or an entry replaced since.
                continue;
            }
            if record.lsn > lsn || record.kind != KIND_ENTRY {
                *slot = None;
                return Err(format!(
                    "entry {index} should start at LSN {lsn}; the log has a record of kind {} at {}",
                    record::kind_name(record.kind),
                    record.lsn
                ));
            }
            let entry: C::Entry =
                match LogRecord::<C::Entry, C::NodeId>::decode(record.kind, &record.payload) {
                    Ok(LogRecord::Entry(entry)) => entry,
                    Ok(_) => return Err(format!("record at LSN {lsn} is not an entry")),
                    Err(e) => return Err(format!("record at LSN {lsn}: {e}")),
                };
            if entry.get_log_id().index != index {
                return Err(format!(
                    "record at LSN {lsn} holds entry {}, not entry {index}",
                    entry.get_log_id()
                ));
            }
            entries.push(entry);
            wanted.next();
        }
        Ok(entries)
    }

    /// Appends a truncate record and drops the entries from `log_id.index` on; reads the new
    /// last entry back when the cache held none of the entries left. Blocks (it may wait for
    /// a read in progress and read from the log): run it off the async workers.
    #[expect(
        clippy::result_large_err,
        reason = "openraft's StorageError, as the trait returns it"
    )]
    fn truncate(&self, log_id: &LogId<C::NodeId>) -> StoreResult<(), C> {
        let payload = record::encode(log_id).map_err(|e| write_error::<C>(&e))?;
        // The reader's lock first (lock order): the read-back below needs it.
        let mut reader = self.reader.lock();
        let mut state = self.state.lock();
        self.wal
            .append(KIND_TRUNCATE, &payload)
            .map_err(|e| write_error::<C>(&e))?;
        state.truncate(log_id.index);
        if state.cache_len() == 0 && !state.is_empty() {
            let last = state.end() - 1;
            let wanted = state.lsns(last, last + 1);
            let entries = self
                .read_from_log(&mut reader, &wanted)
                .map_err(read_error::<C>)?;
            state.fill_front(entries);
        }
        Ok(())
    }

    /// Removes the segment files before `keep_from`, once no read from the log is in
    /// progress. Blocks: run it off the async workers.
    fn remove_segments_before(&self, keep_from: Lsn) -> walcrypt::Result<()> {
        // A read from the log holds the reader's lock: the files it reads stay until it is
        // done, and a follower kept for the next read may point into a removed segment.
        let mut reader = self.reader.lock();
        *reader = None;
        self.wal.purge_before(keep_from).map(drop)
    }
}

/// Runs blocking work off the async workers: on tokio's blocking threads when called inside a
/// tokio runtime (a panic in `work` is resumed here), in place otherwise.
pub(crate) async fn run_blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Ok(work());
    };
    match runtime.spawn_blocking(work).await {
        Ok(value) => Ok(value),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(format!("{what} did not run: {e}")),
    }
}

/// Appends records as one batch and returns one LSN for each, in order (checked: the store
/// maps entries to LSNs by position).
fn append_records<'a>(
    wal: &Wal,
    records: impl ExactSizeIterator<Item = (u8, &'a [u8])>,
) -> walcrypt::Result<Vec<Lsn>> {
    let count = records.len();
    let lsns = wal.append_batch(records)?;
    if lsns.len() != count {
        return Err(walcrypt::Error::Config(format!(
            "the log returned {} LSNs for a batch of {count} records",
            lsns.len()
        )));
    }
    Ok(lsns)
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let lo = match range.start_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&i) => i.saturating_add(1),
        Bound::Excluded(&i) => i,
        Bound::Unbounded => u64::MAX,
    };
    (lo, hi)
}

impl<C> RaftLogReader<C> for WalLogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Clone + Serialize + DeserializeOwned,
{
    /// Entries in memory are copied; older ones are read from the log (those purged meanwhile
    /// are left out, as entries outside the log are).
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<C::Entry>, C> {
        let (lo, hi) = bounds(&range);
        {
            let state = self.inner.state.lock();
            if lo >= state.cache_first() || state.is_empty() {
                return Ok(state.cached(lo, hi).cloned().collect());
            }
        }
        // Reading the older part blocks (and may wait for another read): on a blocking
        // thread, with no lock held on this one.
        let inner = self.inner.clone();
        run_blocking("a read from the log", move || inner.read_entries(lo, hi))
            .await
            .and_then(|read| read)
            .map_err(read_error::<C>)
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
        let last = state.last_log_id();
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
            self.inner
                .wal
                .append(KIND_VOTE, &payload)
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
        self.inner
            .wal
            .append(KIND_COMMITTED, &payload)
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
    ///
    /// When the truncation removes every entry held in memory, the new last entry is read
    /// back from the log, so the last log id stays known.
    #[expect(
        clippy::result_large_err,
        reason = "openraft's StorageError, as the trait returns it"
    )]
    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> StoreResult<(), C> {
        let inner = self.inner.clone();
        run_blocking("a truncation", move || inner.truncate(&log_id))
            .await
            .map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?
    }

    /// Appends a purge record followed by the current vote and committed log id, flushes,
    /// and removes the segment files that lie entirely before the oldest record still needed
    /// (the first entry after `log_id`, or the purge record when no entry is left).
    ///
    /// A purge at or below the purge point is stale (openraft ignores one as well): it writes
    /// nothing and removes nothing. A purge point before the index before the first entry (a
    /// log that started further on, nothing purged yet) is refused: it would leave a hole. Recorded, its lower point would name records before the
    /// current purge point as still needed, and removing the files before it could take the
    /// record of the higher purge point with them.
    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> StoreResult<(), C> {
        let payload = record::encode(&log_id).map_err(|e| write_error::<C>(&e))?;
        let keep_from = {
            let mut state = self.inner.state.lock();
            if state.is_stale_purge(log_id.index) {
                return Ok(());
            }
            if let Err(hole) = state.check_purge(log_id.index) {
                let why = format!(
                    "purge up to {log_id} would leave a hole: the first entry left is {}, not {}",
                    hole.index, hole.next
                );
                return Err(StorageIOError::write_logs(AnyError::error(why)).into());
            }
            let mut batch = vec![(KIND_PURGE, payload)];
            if let Some(vote) = &state.vote {
                batch.push((
                    KIND_VOTE,
                    record::encode(vote).map_err(|e| write_error::<C>(&e))?,
                ));
            }
            if state.committed.is_some() {
                batch.push((
                    KIND_COMMITTED,
                    record::encode(&state.committed).map_err(|e| write_error::<C>(&e))?,
                ));
            }
            let marker = append_records(
                &self.inner.wal,
                batch.iter().map(|(kind, p)| (*kind, p.as_slice())),
            )
            .map_err(|e| write_error::<C>(&e))?[0];
            state.purge(log_id);
            state.first_lsn().unwrap_or(marker)
        };
        self.flush_all()
            .await
            .map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?;
        let inner = self.inner.clone();
        run_blocking("the removal of purged segments", move || {
            inner.remove_segments_before(keep_from)
        })
        .await
        .map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?
        .map_err(|e| write_error::<C>(&e))
    }
}
