//! A small key-value state machine and an in-process network: what the example, the tests and
//! the benchmark run the log store with. Not a production state machine: it keeps its data in
//! memory and writes a snapshot whole.
//!
//! # Snapshots on disk
//!
//! [`KvStateMachine::default`] keeps its snapshots in memory only: a node restarted after its
//! log was purged past a snapshot cannot rebuild its state. [`KvStateMachine::open`] keeps
//! them in a directory of the node as well, sealed ([`SealedFiles`]: AES-256-GCM in chunks,
//! every chunk authenticated) under the node's own keys, the keys of its log:
//!
//! * A snapshot, built or installed, is sealed into `<dir>/snapshot` ([`SNAPSHOT_FILE_NAME`])
//!   before `build_snapshot` or `install_snapshot` returns, so before openraft can purge the
//!   log it covers. The file holds the snapshot's meta (last log id, membership, snapshot id)
//!   and the state, and is replaced atomically (temporary file, fsync, rename, directory
//!   fsync): a crash leaves the old snapshot or the new one, never a mix.
//! * Snapshots are written one at a time, and one older than the file's (a build that an
//!   installed snapshot overtook) is not written.
//! * [`KvStateMachine::open`] loads the snapshot in the directory, if any; openraft then
//!   applies the committed entries after it from the log. A snapshot file that fails to
//!   authenticate or decode fails the open: a node never starts from less state than its log
//!   assumes.
//! * Give the directory to the log's `Config::sealed_dirs`, so that key retirement keeps every
//!   key the snapshot is sealed under.
//!
//! Sealing and opening the file block; the async methods run them on tokio's blocking threads
//! (`spawn_blocking`), never on a runtime worker, and hold no lock across an `.await`.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, EntryPayload, LogId, OptionalSend, Raft, RaftNetwork, RaftNetworkFactory,
    RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use walcrypt::SealedFiles;

use crate::error::Error;
use crate::lock_order::{MACHINE, OrderedMutex, SNAPSHOT_FILE};
use crate::store::run_blocking;

/// A write: set `key` to `value`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The key.
    pub key: String,
    /// The new value.
    pub value: Vec<u8>,
}

/// What a write returns: the value the key had before.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Response {
    /// The previous value, if any.
    pub previous: Option<Vec<u8>>,
}

openraft::declare_raft_types!(
    /// The raft types of the key-value demo: u64 node ids, `BasicNode`, `Request`/`Response`.
    pub TypeConfig: D = Request, R = Response
);

/// The raft node id of the demo.
pub type NodeId = u64;

#[derive(Default, Serialize, Deserialize)]
struct Data {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    map: BTreeMap<String, Vec<u8>>,
}

type Meta = SnapshotMeta<NodeId, BasicNode>;

#[derive(Default)]
struct Machine {
    data: Data,
    snapshot: Option<(Meta, Vec<u8>)>,
    snapshots_built: u64,
}

/// The name of the snapshot file in a state machine's snapshot directory.
pub const SNAPSHOT_FILE_NAME: &str = "snapshot";

/// The first plaintext byte of a snapshot file: the version of what follows (the postcard
/// encoding of [`StoredSnapshot`]).
const SNAPSHOT_FORMAT: u8 = 1;

/// What a snapshot file holds, after its version byte: the meta, and the state as
/// `build_snapshot` encoded it (postcard of `Data`).
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: Meta,
    data: Vec<u8>,
}

/// The same, borrowed, for writing.
#[derive(Serialize)]
struct StoredSnapshotRef<'a> {
    meta: &'a Meta,
    data: &'a [u8],
}

/// A state machine's snapshot directory.
struct SnapshotDir {
    /// The snapshot file.
    path: PathBuf,
    files: SealedFiles,
    /// The last log id of the snapshot in the file (`None` before the first); held while a
    /// snapshot is sealed into the file.
    written: OrderedMutex<Option<LogId<NodeId>>, SNAPSHOT_FILE>,
}

impl SnapshotDir {
    /// Seals `meta` and `data` into the snapshot file, replacing it atomically, unless the
    /// file holds a newer snapshot. Blocks.
    fn write(&self, meta: &Meta, data: &[u8]) -> Result<(), String> {
        let mut written = self.written.lock();
        if meta.last_log_id < *written {
            return Ok(());
        }
        let plain = postcard::to_extend(&StoredSnapshotRef { meta, data }, vec![SNAPSHOT_FORMAT])
            .map_err(|e| format!("encoding snapshot {}: {e}", meta.snapshot_id))?;
        self.files
            .write(&self.path, &plain)
            .map_err(|e| format!("sealing snapshot {}: {e}", meta.snapshot_id))?;
        *written = meta.last_log_id;
        Ok(())
    }
}

/// Decodes the plaintext of a snapshot file.
fn decode_snapshot(plain: &[u8]) -> Result<(Meta, Vec<u8>, Data), String> {
    match plain.first() {
        Some(&SNAPSHOT_FORMAT) => {}
        Some(other) => {
            return Err(format!(
                "snapshot format {other} is unknown (this build reads {SNAPSHOT_FORMAT})"
            ));
        }
        None => return Err("the snapshot file is empty".into()),
    }
    let stored: StoredSnapshot =
        postcard::from_bytes(&plain[1..]).map_err(|e| format!("undecodable snapshot: {e}"))?;
    let data: Data = postcard::from_bytes(&stored.data).map_err(|e| {
        format!(
            "undecodable state in snapshot {}: {e}",
            stored.meta.snapshot_id
        )
    })?;
    Ok((stored.meta, stored.data, data))
}

/// The key-value state machine. Clones share one machine.
#[derive(Clone)]
pub struct KvStateMachine {
    inner: Arc<OrderedMutex<Machine, MACHINE>>,
    /// Where snapshots are sealed; `None` keeps them in memory only.
    dir: Option<Arc<SnapshotDir>>,
}

impl Default for KvStateMachine {
    /// An empty machine that keeps its snapshots in memory only.
    fn default() -> KvStateMachine {
        KvStateMachine {
            inner: Arc::new(OrderedMutex::new(Machine::default())),
            dir: None,
        }
    }
}

impl KvStateMachine {
    /// A machine that seals its snapshots into `dir` (created if missing) with `files` (made
    /// with the keys of the node's log: `SealedFiles::new(&key_ring)` or
    /// `SealedFiles::new(&key_store)`), starting from the snapshot in `dir` if there is one.
    /// Blocks while it reads the file; call it before `Raft::new`, as `WalLogStore::open`.
    ///
    /// Fails if `dir` cannot be created, or if its snapshot file cannot be read, fails to
    /// authenticate under `files`' keys, or does not decode.
    pub fn open(dir: impl AsRef<Path>, files: SealedFiles) -> Result<KvStateMachine, Error> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| Error::Snapshot {
            path: dir.to_path_buf(),
            source: Box::new(e),
        })?;
        let path = dir.join(SNAPSHOT_FILE_NAME);
        let mut machine = Machine::default();
        match files.read(&path) {
            Ok(plain) => {
                let (meta, bytes, mut data) =
                    decode_snapshot(&plain).map_err(|why| Error::Snapshot {
                        path: path.clone(),
                        source: why.into(),
                    })?;
                data.last_applied = meta.last_log_id;
                data.membership = meta.last_membership.clone();
                machine.data = data;
                machine.snapshot = Some((meta, bytes));
            }
            Err(walcrypt::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Snapshot {
                    path,
                    source: Box::new(e),
                });
            }
        }
        let written = machine
            .snapshot
            .as_ref()
            .and_then(|(meta, _)| meta.last_log_id);
        Ok(KvStateMachine {
            inner: Arc::new(OrderedMutex::new(machine)),
            dir: Some(Arc::new(SnapshotDir {
                path,
                files,
                written: OrderedMutex::new(written),
            })),
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.inner.lock().data.map.get(key).cloned()
    }

    /// How many keys the machine holds.
    pub fn len(&self) -> usize {
        self.inner.lock().data.map.len()
    }

    /// Whether the machine holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of the last entry applied.
    pub fn last_applied(&self) -> Option<LogId<NodeId>> {
        self.inner.lock().data.last_applied
    }

    /// The last log id of the current snapshot (built, installed, or loaded at open); `None`
    /// without a snapshot.
    pub fn snapshot_last_log_id(&self) -> Option<LogId<NodeId>> {
        self.inner
            .lock()
            .snapshot
            .as_ref()
            .and_then(|(meta, _)| meta.last_log_id)
    }

    /// Makes `meta` and `bytes` the current snapshot unless the current one is newer: sealed
    /// into the snapshot file first (on a blocking thread), then kept in memory. Returns them.
    async fn keep_snapshot(
        &self,
        meta: Meta,
        bytes: Vec<u8>,
    ) -> Result<(Meta, Vec<u8>), StorageError<NodeId>> {
        let (meta, bytes) = match &self.dir {
            Some(dir) => {
                let dir = dir.clone();
                let signature = meta.signature();
                let (written, meta, bytes) = run_blocking("sealing a snapshot", move || {
                    let written = dir.write(&meta, &bytes);
                    (written, meta, bytes)
                })
                .await
                .map_err(|why| snapshot_write_error(&signature, why))?;
                written.map_err(|why| snapshot_write_error(&signature, why))?;
                (meta, bytes)
            }
            None => (meta, bytes),
        };
        let mut m = self.inner.lock();
        let newer = m
            .snapshot
            .as_ref()
            .is_none_or(|(current, _)| current.last_log_id <= meta.last_log_id);
        if newer {
            m.snapshot = Some((meta.clone(), bytes.clone()));
        }
        Ok((meta, bytes))
    }
}

fn snapshot_write_error(
    signature: &openraft::storage::SnapshotSignature<NodeId>,
    why: String,
) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(Some(signature.clone()), AnyError::error(why)).into()
}

fn sm_error(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(AnyError::new(e)).into()
}

impl RaftSnapshotBuilder<TypeConfig> for KvStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (meta, bytes) = {
            let mut m = self.inner.lock();
            let bytes = postcard::to_stdvec(&m.data).map_err(|e| sm_error(&e))?;
            m.snapshots_built += 1;
            let meta = SnapshotMeta {
                last_log_id: m.data.last_applied,
                last_membership: m.data.membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    m.data.last_applied.map_or(0, |l| l.index),
                    m.snapshots_built
                ),
            };
            (meta, bytes)
        };
        // Durable before openraft learns of it, and so before it purges the log it covers.
        let (meta, bytes) = self.keep_snapshot(meta, bytes).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for KvStateMachine {
    type SnapshotBuilder = KvStateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let m = self.inner.lock();
        Ok((m.data.last_applied, m.data.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut m = self.inner.lock();
        let mut out = Vec::new();
        for entry in entries {
            m.data.last_applied = Some(entry.log_id);
            let previous = match entry.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(req) => m.data.map.insert(req.key, req.value),
                EntryPayload::Membership(mem) => {
                    m.data.membership = StoredMembership::new(Some(entry.log_id), mem);
                    None
                }
            };
            out.push(Response { previous });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let mut data: Data = postcard::from_bytes(&bytes).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(
                Some(meta.signature()),
                AnyError::new(&e),
            ))
        })?;
        data.last_applied = meta.last_log_id;
        data.membership = meta.last_membership.clone();
        // Sealed into the snapshot file before the state changes and before openraft purges
        // the log the snapshot replaces.
        self.keep_snapshot(meta.clone(), bytes).await?;
        self.inner.lock().data = data;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let m = self.inner.lock();
        Ok(m.snapshot.as_ref().map(|(meta, bytes)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(bytes.clone())),
        }))
    }
}

/// An in-process network: each node's RPCs call the target's `Raft` handle directly. A node
/// that is not registered (never added, or removed when stopped) is unreachable.
#[derive(Clone, Default)]
pub struct Router {
    nodes: Arc<Mutex<BTreeMap<NodeId, Raft<TypeConfig>>>>,
}

impl Router {
    /// Makes `raft` reachable as node `id`.
    pub fn add(&self, id: NodeId, raft: Raft<TypeConfig>) {
        self.nodes.lock().insert(id, raft);
    }

    /// Makes node `id` unreachable; returns its handle.
    pub fn remove(&self, id: NodeId) -> Option<Raft<TypeConfig>> {
        self.nodes.lock().remove(&id)
    }

    #[expect(
        clippy::result_large_err,
        reason = "openraft's RPCError, as the network trait returns it"
    )]
    fn get<E: std::error::Error>(
        &self,
        target: NodeId,
    ) -> Result<Raft<TypeConfig>, RPCError<NodeId, BasicNode, E>> {
        self.nodes.lock().get(&target).cloned().ok_or_else(|| {
            let e = std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("node {target} is not running"),
            );
            RPCError::Network(NetworkError::new(&e))
        })
    }
}

/// A connection from one node to `target` through the [`Router`].
pub struct Connection {
    router: Router,
    target: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: self.clone(),
            target,
        }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.router.get(self.target)?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let raft = self.router.get(self.target)?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self.router.get(self.target)?;
        raft.vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}
