//! Random appends, truncations, purges, reads and reopens on a store with a two-entry cache
//! (so nearly every read goes to the log), checked after every step against a plain in-memory
//! model of the raft log: same entries for every range read, same log state.

use crate::support;

use std::collections::BTreeMap;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{LogId, RaftLogReader};
use support::{Rng, assert_entry, config, entry, log_id};
use walcrypt::{KeyRing, Mode};
use walcrypt_openraft::kv::{NodeId, TypeConfig};
use walcrypt_openraft::{StoreOptions, WalLogStore};

type Store = WalLogStore<TypeConfig>;

/// The raft log as openraft's in-memory stores keep it.
#[derive(Default)]
struct Model {
    /// index -> term
    log: BTreeMap<u64, u64>,
    purged: Option<LogId<NodeId>>,
}

async fn check(store: &mut Store, model: &Model, rng: &mut Rng, ctx: &str) {
    let state = store.get_log_state().await.unwrap();
    let last = model
        .log
        .last_key_value()
        .map(|(&i, &t)| log_id(t, i))
        .or(model.purged);
    assert_eq!(state.last_log_id, last, "{ctx}: last log id");
    assert_eq!(state.last_purged_log_id, model.purged, "{ctx}: purged");
    let end = model.log.last_key_value().map_or(10, |(&i, _)| i + 3);
    for _ in 0..2 {
        let lo = rng.below(end);
        let hi = lo + rng.below(end - lo + 1);
        let got = store
            .try_get_log_entries(lo..hi)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: reading {lo}..{hi}: {e}"));
        let want: Vec<_> = model.log.range(lo..hi).collect();
        assert_eq!(got.len(), want.len(), "{ctx}: entries in {lo}..{hi}");
        for (e, (&i, &t)) in got.iter().zip(want) {
            assert_entry(e, t, i);
        }
    }
}

async fn scenario(mode: Mode, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let options = StoreOptions::default().cache_entries(2);
    let open = || Store::open_with(dir.path(), config(mode, &keys), options.clone()).unwrap();
    let mut store = open();
    let mut model = Model::default();
    let mut rng = Rng(seed | 1);
    let mut term = 1;
    for step in 0..100 {
        let ctx = format!("{mode} seed {seed} step {step}");
        let next = model
            .log
            .last_key_value()
            .map(|(&i, _)| i + 1)
            .or(model.purged.map(|p| p.index + 1))
            .unwrap_or(1);
        let first = model.log.first_key_value().map(|(&i, _)| i);
        match rng.below(100) {
            0..=9 if first.is_some_and(|f| next > f + 1) => {
                // A conflicting suffix, sometimes deep below the cache.
                let since = first.unwrap_or(1) + 1 + rng.below(next - first.unwrap_or(1) - 1);
                store.truncate(log_id(term, since)).await.unwrap();
                model.log.split_off(&since);
                term += 1;
            }
            10..=15 if first.is_some() => {
                let first = first.unwrap_or(1);
                let upto = first + rng.below(next - first);
                let purged = log_id(model.log[&upto], upto);
                store.purge(purged).await.unwrap();
                model.log = model.log.split_off(&(upto + 1));
                model.purged = Some(purged);
            }
            16..=19 => {
                drop(store);
                store = open();
            }
            _ => {
                // Sometimes overwrite a suffix directly, as a follower does.
                let from = match first {
                    Some(f) if rng.below(8) == 0 && next > f => {
                        term += 1;
                        next - rng.below(next - f).min(3)
                    }
                    _ => next,
                };
                let n = 1 + rng.below(6);
                store
                    .blocking_append((from..from + n).map(|i| entry(term, i)))
                    .await
                    .unwrap();
                model.log.split_off(&from);
                model.log.extend((from..from + n).map(|i| (i, term)));
            }
        }
        check(&mut store, &model, &mut rng, &ctx).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn random_operations_match_a_model_in_every_mode() {
    let seed = std::env::var("WALCRYPT_RAFT_MODEL_SEED").map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        },
        |v| v.parse().unwrap(),
    );
    // The modes run at once: most of the time is spent waiting for fdatasync.
    let runs: Vec<_> = Mode::ALL
        .into_iter()
        .map(|mode| tokio::spawn(scenario(mode, seed)))
        .collect();
    for run in runs {
        run.await.unwrap();
    }
}
