//! What a durable follower yields survives a power failure of the writer's machine: after any
//! crash image (built by the fault storage from what was fdatasync'ed and the writes since)
//! recovery keeps every record the follower yielded, at its LSN, byte-identical. A follower
//! that asked for `Visibility::Written` has no such promise, and under `SyncMode::Buffered`
//! the images do take back records it yielded (so the check above can fail).

use crate::support;

use std::collections::BTreeMap;

use support::faults::{FaultStorage, Tear};
use support::{Rng, payload_for};
use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Reader, SyncMode, Visibility, Wal};

fn config(mode: Mode, keys: &KeyRing, sync: SyncMode) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(1024)
        .segment_size(8 * 1024)
        .buffer_size(8 * 1024)
}

fn drain(follower: &mut Follower, into: &mut BTreeMap<Lsn, Vec<u8>>) {
    while let Some(r) = follower.poll().unwrap() {
        into.insert(r.lsn, r.payload);
    }
}

/// How many of `yielded` the recovered `image` lacks; panics on a changed payload.
fn missing(image: &std::path::Path, keys: &KeyRing, yielded: &BTreeMap<Lsn, Vec<u8>>) -> usize {
    let recovered: BTreeMap<Lsn, Vec<u8>> = Reader::open(image, Some(keys.clone()))
        .unwrap()
        .records_from(Lsn::default())
        .map(|r| r.map(|r| (r.lsn, r.payload)))
        .collect::<Result<_, _>>()
        .unwrap();
    yielded
        .iter()
        .filter(|(lsn, payload)| match recovered.get(lsn) {
            Some(got) => {
                assert_eq!(got, *payload, "record at {lsn} changed");
                false
            }
            None => true,
        })
        .count()
}

#[test]
fn follower_never_yields_what_a_crash_takes_back() {
    let mut rng = Rng::new(0x5EED_F011);
    let mut written_lost = 0;
    // pagelevel is left out: torn rewrites of its pages can damage flushed records (see
    // torn_page_rewrite.rs); whole-page images would still pass.
    for mode in [Mode::Plaintext, Mode::PerRecord] {
        for sync in [SyncMode::Durable, SyncMode::Buffered] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("log");
            let keys = KeyRing::generate().unwrap();
            let storage = FaultStorage::new();
            let wal = Wal::open(&dir, config(mode, &keys, sync).storage(storage.arc())).unwrap();
            let mut durable = Follower::open(&dir, Some(keys.clone()), Lsn::default()).unwrap();
            let mut written = Follower::open(&dir, Some(keys.clone()), Lsn::default())
                .unwrap()
                .visibility(Visibility::Written);
            let (mut from_durable, mut from_written) = (BTreeMap::new(), BTreeMap::new());
            for id in 1..=300u64 {
                let (kind, payload) = payload_for(id % 50);
                let lsn = wal
                    .append(kind, &payload[..payload.len().min(600)])
                    .unwrap();
                if rng.chance(40) {
                    wal.flush(lsn).unwrap();
                }
                drain(&mut durable, &mut from_durable);
                drain(&mut written, &mut from_written);
                if id % 30 == 0 {
                    let image = tmp.path().join(format!("image-{id}"));
                    let tear = [Tear::Whole, Tear::Prefix, Tear::AnySectors][id as usize % 3];
                    storage.crash_image(&dir, &image, &mut rng, tear);
                    drop(Wal::open(&image, config(mode, &keys, sync)).unwrap());
                    let lost = missing(&image, &keys, &from_durable);
                    assert_eq!(lost, 0, "{mode} {sync:?}: image after {id}");
                    written_lost += missing(&image, &keys, &from_written);
                }
            }
            if sync == SyncMode::Durable {
                assert!(from_durable.len() > 100, "{mode}: {}", from_durable.len());
            }
            wal.close().unwrap();
        }
    }
    assert!(
        written_lost > 0,
        "crash images never took back a written record"
    );
}
