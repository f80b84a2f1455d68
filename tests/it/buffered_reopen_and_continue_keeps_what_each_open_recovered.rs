//! SyncMode::Buffered, opened, written and crashed several times in a row. Whatever an open
//! recovered it also made durable, so a power cut in the next session may lose that session's
//! records but never the ones that were already there: each crash image (unsynced writes
//! dropped, kept or torn at any subset of their 512-byte sectors) opens to a prefix holding at
//! least what the previous open recovered. In pagelevel mode this covers the first rewrite after
//! each open: the writer continues on a fresh page instead of re-encrypting the recovered tail.

use crate::support;

use std::path::{Path, PathBuf};

use support::faults::{FaultStorage, Tear};
use support::{Rng, check_payload, payload_for};
use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Buffered)
        .segment_size(16 * 8192)
}

/// Opens `dir`, checks it holds records 1..=m, byte-identical, and returns the writer and m.
fn open(dir: &Path, config: Config, what: &str) -> (Wal, u64) {
    let mut ids = Vec::new();
    let wal = Wal::open_and_replay(dir, config, Lsn::default(), |r| {
        ids.push(check_payload(r.kind, &r.payload).unwrap_or_else(|e| panic!("{what}: {e}")));
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let m = ids.len() as u64;
    assert_eq!(ids, (1..=m).collect::<Vec<_>>(), "{what}: not a prefix");
    (wal, m)
}

#[test]
fn each_crash_keeps_what_the_open_before_it_recovered() {
    for (i, mode) in Mode::ALL.into_iter().enumerate() {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(0xB0FF + i as u64);
        let mut dir: PathBuf = tmp.path().join("session-0");
        let mut recovered = 0;
        for session in 1..=6 {
            let what = format!("{mode} session {session}");
            let storage = FaultStorage::new();
            let (wal, m) = open(&dir, config(mode, &keys).storage(storage.arc()), &what);
            assert!(
                m >= recovered,
                "{what}: {m} records back, {recovered} were recovered"
            );
            recovered = m;
            // Mostly small records, several flushes per page: the tail page is rewritten often.
            for id in m + 1..=m + rng.range(5, 40) {
                let (kind, payload) = payload_for(id);
                let lsn = wal
                    .append(kind, &payload)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                if rng.chance(50) {
                    wal.flush(lsn).unwrap();
                }
            }
            let image = tmp.path().join(format!("session-{session}"));
            storage.crash_image(&dir, &image, &mut rng, Tear::AnySectors);
            drop(wal);
            dir = image;
        }
        let (wal, m) = open(&dir, config(mode, &keys), &format!("{mode} last"));
        assert!(m >= recovered);
        wal.close().unwrap();
    }
}
