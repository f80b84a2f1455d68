//! No crash at all: records flushed one by one, then the next flush's page write comes back
//! short and fails with ENOSPC (as on copy-on-write file systems, where an overwrite needs new
//! space). The log is poisoned, and reopening the same files — or a power-cut image of them —
//! gives back every flushed record, in every mode, at 4 KiB and at the default 8 KiB page
//! size. The short write leaves the first half of the new page image over the old one.

use crate::support;

use support::Rng;
use support::faults::{Effect, FaultStorage, Op, Tear};
use walcrypt::{Config, Error, KeyRing, Lsn, Mode, SyncMode, Wal};

fn config(mode: Mode, keys: &KeyRing, page: u64) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(page)
        .segment_size(16 * page)
        .prepare_segments(false)
}

fn payload(id: u64) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.resize(100, id as u8);
    p
}

fn reopen_holds(dir: &std::path::Path, mode: Mode, keys: &KeyRing, page: u64, acked: u64) {
    let mut back = Vec::new();
    let wal = Wal::open_and_replay(dir, config(mode, keys, page), Lsn::default(), |r| {
        back.push(r.payload);
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{mode} {page}: reopen after the short write: {e}"));
    assert!(
        back.len() as u64 >= acked,
        "{mode} {page}: {} records back, {acked} acknowledged",
        back.len()
    );
    for (i, p) in back.iter().enumerate() {
        assert_eq!(
            p,
            &payload(i as u64 + 1),
            "{mode} {page}: record {i} altered"
        );
    }
    let lsn = wal.append(1, b"after").unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();
}

#[test]
fn a_short_write_then_enospc_keeps_every_flushed_record() {
    for page in [4096, 8192] {
        for mode in Mode::ALL {
            let keys = KeyRing::generate().unwrap();
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("log");
            let storage = FaultStorage::new();
            let wal = Wal::open(&dir, config(mode, &keys, page).storage(storage.arc())).unwrap();
            for id in 1..=30 {
                let lsn = wal.append(1, &payload(id)).unwrap();
                wal.flush(lsn).unwrap();
            }
            storage.fail_nth(
                Op::Write,
                storage.count(Op::Write) + 1,
                Effect::ShortWrite(libc::ENOSPC),
            );
            let lsn = wal.append(1, &payload(31)).unwrap();
            let flushed = wal.flush(lsn);
            assert!(
                matches!(flushed, Err(Error::Io { .. })),
                "{mode} {page}: the failed flush reports the I/O error, got {flushed:?}"
            );
            assert_eq!(storage.injected(), 1, "{mode} {page}: the fault fired");
            assert!(matches!(wal.flush(lsn), Err(Error::Poisoned(_))));
            for seed in 0..4 {
                let image = tmp.path().join(format!("image-{seed}"));
                storage.crash_image(&dir, &image, &mut Rng::new(seed), Tear::AnySectors);
                reopen_holds(&image, mode, &keys, page, 30);
            }
            drop(wal);
            reopen_holds(&dir, mode, &keys, page, 30);
        }
    }
}
