//! A small in-memory key-value state machine and an in-process network: what the example,
//! the tests and the benchmark run the log store with. Not a production state machine (it
//! keeps everything in memory and its snapshots are not persisted).

use std::collections::BTreeMap;
use std::io::Cursor;
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

#[derive(Default)]
struct Machine {
    data: Data,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
    snapshots_built: u64,
}

/// The key-value state machine. Clones share one machine.
#[derive(Clone, Default)]
pub struct KvStateMachine {
    inner: Arc<Mutex<Machine>>,
}

impl KvStateMachine {
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
}

fn sm_error(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(AnyError::new(e)).into()
}

impl RaftSnapshotBuilder<TypeConfig> for KvStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
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
        m.snapshot = Some((meta.clone(), bytes.clone()));
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
        let data: Data = postcard::from_bytes(&bytes).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(
                Some(meta.signature()),
                AnyError::new(&e),
            ))
        })?;
        let mut m = self.inner.lock();
        m.data = data;
        m.data.last_applied = meta.last_log_id;
        m.data.membership = meta.last_membership.clone();
        m.snapshot = Some((meta.clone(), bytes));
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
