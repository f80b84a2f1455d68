//! openraft's own storage test suite (`openraft::testing::Suite::test_all`) against the log
//! store, once per walcrypt mode, each test on a fresh log with its own key ring: with the
//! default cache, and with a cache of one entry, where every read but the last entry's goes
//! to the log. The state machine seals its snapshots into a directory beside the log.

use crate::support;

use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use support::small_segments;
use tempfile::TempDir;
use walcrypt::{KeyRing, Mode, SealedFiles};
use walcrypt_openraft::kv::{KvStateMachine, NodeId, TypeConfig};
use walcrypt_openraft::{StoreOptions, WalLogStore};

struct Builder {
    mode: Mode,
    options: StoreOptions,
}

impl StoreBuilder<TypeConfig, WalLogStore<TypeConfig>, KvStateMachine, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, WalLogStore<TypeConfig>, KvStateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let keys = KeyRing::generate().expect("key ring");
        let snapshots = dir.path().join("snapshots");
        let sm = KvStateMachine::open(&snapshots, SealedFiles::new(&keys))
            .expect("open the state machine");
        let config = small_segments(self.mode, &keys).sealed_dirs([snapshots]);
        let store = WalLogStore::open_with(dir.path().join("log"), config, self.options.clone())
            .expect("open the log store");
        Ok((dir, store, sm))
    }
}

/// The three modes, with both caches, run at once, each on its own thread: the suite's
/// fixed sleeps (8 s a run) then overlap whatever the test runner's thread count is.
#[test]
fn suite_in_every_mode() {
    let runs: Vec<_> = Mode::ALL
        .into_iter()
        .flat_map(|mode| [(mode, None), (mode, Some(1))])
        .map(|(mode, cache)| {
            let options = cache.map_or_else(StoreOptions::default, |n| {
                StoreOptions::default().cache_entries(n)
            });
            (
                mode,
                cache,
                std::thread::spawn(move || {
                    Suite::test_all(Builder { mode, options }).map_err(|e| format!("{e:?}"))
                }),
            )
        })
        .collect();
    for (mode, cache, run) in runs {
        let result = run.join().expect("suite thread");
        assert!(result.is_ok(), "{mode}, cache {cache:?}: {result:?}");
    }
}
