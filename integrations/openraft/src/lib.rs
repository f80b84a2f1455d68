//! An openraft log store on walcrypt's encrypted write-ahead log.
//!
//! [`WalLogStore`] implements openraft 0.9's `RaftLogStorage` (feature `storage-v2`) on a
//! walcrypt [`Wal`](walcrypt::Wal): every raft log entry, vote and committed log id is a record
//! of the log, encrypted in the log's mode (`perrecord`, `pagelevel`, or `plaintext`) under the
//! node's own key ring.
//!
//! ```no_run
//! # async fn start() -> Result<(), Box<dyn std::error::Error>> {
//! use walcrypt::{Config, KeyRing, Mode, SealedFiles, SyncMode};
//! use walcrypt_openraft::WalLogStore;
//! use walcrypt_openraft::kv::{KvStateMachine, Router, TypeConfig};
//!
//! let keys = KeyRing::load("/var/lib/node-1/keys")?; // this node's ring, no other node's
//! // Snapshots sealed under the same keys; key retirement keeps the keys they use.
//! let sm = KvStateMachine::open("/var/lib/node-1/snapshots", SealedFiles::new(&keys))?;
//! let config = Config::new(Mode::PerRecord)
//!     .keys(keys)
//!     .sync(SyncMode::Durable)
//!     .sealed_dirs(["/var/lib/node-1/snapshots"]);
//! let log = WalLogStore::<TypeConfig>::open("/var/lib/node-1/raft-log", config)?;
//! let raft_config = std::sync::Arc::new(openraft::Config::default().validate()?);
//! let raft = openraft::Raft::new(1, raft_config, Router::default(), log, sm).await?;
//! # Ok(()) }
//! ```
//!
//! # How openraft's storage rules hold
//!
//! * **Readable at once, durable when told.** `append` encodes the entries, appends them as
//!   one `Wal::append_batch` (one record each, placed together) and updates the in-memory
//!   index (raft index → LSN) and cache before it returns, so a log reader sees them at once.
//!   The flush callback goes to one flush thread, which takes every callback waiting, calls
//!   `Wal::sync` once (a flush to the end of the log, which lies past every record of every
//!   callback taken: one fdatasync for all, group commit) and fires the callbacks only after
//!   that returned. A failed flush fires them with the error; the walcrypt log is then
//!   poisoned and the store fails every later write until reopened.
//! * **Vote.** `save_vote` appends a vote record and returns only after a flush covering it.
//!   `save_committed` appends a committed record without a flush of its own; the next flush
//!   (an append's callback, a vote) makes it durable, and it is always durable before a
//!   `save_vote` that follows it returns. openraft allows a committed log id that lags.
//! * **Order and no holes.** There is one record stream: log and vote writes reach the disk in
//!   the order they were issued, and a flush of a later record covers every earlier one. An
//!   entry whose index is beyond the last log index + 1 is refused; the last log index is the
//!   last entry's or, after a purge that left no entry, the purge point's (the last log id
//!   `get_log_state` reports), so the entry after such a purge goes right after the purge
//!   point. An entry at or below the purge point is purged as it arrives: nothing is written
//!   for it (openraft reads nothing back there; its own storage suite appends such entries
//!   once its state machine is ahead of the log). A log with neither entries nor a purge
//!   point (new, or truncated to nothing before any purge) takes its first entry at any index.
//!   Reopening applies the same rule, so the store reopens to every state it accepts.
//! * **Truncate** (a conflicting suffix) appends a truncate record naming the first index
//!   removed; an entry appended at an index already present also replaces it and everything
//!   after it. A truncation becomes durable with the next flush; a crash before that brings
//!   back the old suffix, which is the state before the truncation, acknowledged to no one.
//! * **Purge** (a compacted prefix) appends a purge record, then a copy of the current vote and
//!   committed log id (one batch), flushes, and calls `Wal::purge_before` with the LSN of the first entry
//!   kept (or of the purge record when no entry is left): whole segment files before it are
//!   removed. The copies keep the vote alive when the segment it was first written in goes.
//!   A purge at or below the purge point (stale, as openraft treats it) writes nothing and
//!   removes nothing; one that would leave a hole before the first entry (a log that started
//!   further on than the index after it, nothing purged yet) is refused.
//! * **Reopen.** [`WalLogStore::open`] replays the log once from its oldest segment, through
//!   walcrypt's `open_and_replay` (which cuts a torn tail first), applying the same rules as
//!   the live store: the entries (with their LSNs), vote, committed log id and purge point come
//!   back exactly as the durable records say. An unknown record kind, an undecodable payload
//!   or a hole is an error naming the LSN.
//!
//! # Memory: the newest entries cached, older ones read from the log
//!
//! The store keeps the LSN of every entry from the purge point to the end (8 bytes an entry)
//! and the newest entries themselves: [`StoreOptions::cache_entries`] of them once durable
//! (default [`StoreOptions::DEFAULT_CACHE_ENTRIES`]); entries not yet durable always stay in
//! memory. A read below the cache (a lagging follower being caught up, a node restarted far
//! behind) goes to the log through a walcrypt `Follower` attached to the `Wal`: it starts at
//! the first wanted entry's LSN, skips the records in between (votes, committed log ids,
//! markers, entries replaced after a truncation: only the record at the LSN the index names
//! counts) and is kept for the next read when that starts a little further on, as replication
//! reads do. Only durable entries are ever read back, which the follower's durable visibility
//! gives. A purge waits for a read in progress before it removes segment files, and a read
//! that a purge overtook leaves out the entries purged (as reads outside the log do). At open
//! the cache is refilled from the log when truncations replayed left it short; a truncation below
//! the cache reads the new last entry back.
//!
//! # Locks and threads
//!
//! The store has two locks, always taken in one order: first the reader's lock (the follower
//! for reads below the cache, held for a whole read from the log and while a purge removes
//! segment files), then the state lock (index, cache, vote, committed log id; held for short
//! steps). The state lock may be taken while the reader's lock is held, never the reverse: a
//! truncation that may have to read the new last entry back takes the reader's lock first,
//! and so waits for a read from the log in progress. Debug builds check the order at every
//! acquisition (a per-thread set of the locks held, asserted with `debug_assert!`); release
//! builds do not pay for it.
//!
//! Reads from the log block (a follower waits up to 5 s for a record), and so do the wait for
//! the reader's lock and the removal of segment files. The async methods run that work on
//! tokio's blocking threads (`spawn_blocking`), never on a runtime worker: reads below the
//! cache, truncations (which may read back) and the file removal of a purge. Reads served
//! from the cache, appends, votes and committed log ids stay on the calling task. Outside a
//! tokio runtime the work runs in place.
//!
//! The state machine in [`kv`] seals its snapshot file on a blocking thread the same way, and
//! its two locks (the snapshot file, then its data) come after the store's in the same order.
//!
//! The record kinds are in [`record`].
//!
//! # Snapshots
//!
//! A node restarted after openraft purged its log past a snapshot needs that snapshot to
//! rebuild its state. [`kv::KvStateMachine::open`] keeps the demo state machine's snapshot in
//! a directory of the node, sealed with walcrypt's `SealedFiles` (encrypted and authenticated)
//! under the node's own keys, and written before openraft may purge the log it covers; at open
//! it loads that snapshot and openraft applies the committed entries after it from the log.
//! Pass the directory to the log's `Config::sealed_dirs` so that key retirement never retires
//! a key the snapshot is sealed under. A state machine of your own can do the same with
//! `SealedFiles`.
//!
//! # Keys in a cluster
//!
//! Each node opens its log with its own key ring: replicas share the raft log, not keys, so a
//! stolen disk of one node says nothing about another's data keys. Entries travel between
//! nodes in plaintext as far as walcrypt is concerned, snapshots sent to a follower included:
//! securing the network (TLS) is the embedder's job.
//!
//! Rotating a node's key: stop the node, run `wal-key rotate` on its key file (or
//! `KeyRing::rotate` and save), start it again; new records are written under the new key id,
//! older segments stay readable with the older keys in the ring. Do one node at a time; raft
//! keeps serving with one node of three down. Keep an old key in the ring until every segment
//! written under it has been purged (after a snapshot) and no sealed snapshot uses it (a new
//! snapshot is sealed under the active key): `wal-dump` shows the key id in every record
//! header (perrecord) or page header (pagelevel), `walcrypt::sealed_key_ids` those of the
//! snapshot directory.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod flusher;
pub mod kv;
mod lock_order;
pub mod record;
mod state;
mod store;

pub use error::Error;
pub use store::{StoreOptions, WalLogStore};
