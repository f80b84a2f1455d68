//! openraft's own storage test suite (`openraft::testing::Suite::test_all`) against the log
//! store, once per walcrypt mode, each test on a fresh log with its own key ring.

use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;
use walcrypt::{Config, KeyRing, Mode, SyncMode};
use walcrypt_openraft::WalLogStore;
use walcrypt_openraft::kv::{KvStateMachine, NodeId, TypeConfig};

struct Builder {
    mode: Mode,
}

impl StoreBuilder<TypeConfig, WalLogStore<TypeConfig>, KvStateMachine, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, WalLogStore<TypeConfig>, KvStateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let keys = KeyRing::generate().expect("key ring");
        let config = Config::new(self.mode)
            .keys(keys)
            .sync(SyncMode::Durable)
            .page_size(4096)
            .segment_size(64 * 1024);
        let store = WalLogStore::open(dir.path(), config).expect("open the log store");
        Ok((dir, store, KvStateMachine::default()))
    }
}

fn run(mode: Mode) {
    let result = Suite::test_all(Builder { mode });
    assert!(result.is_ok(), "{mode}: {result:?}");
}

#[test]
fn suite_plaintext() {
    run(Mode::Plaintext);
}

#[test]
fn suite_perrecord() {
    run(Mode::PerRecord);
}

#[test]
fn suite_pagelevel() {
    run(Mode::PageLevel);
}
