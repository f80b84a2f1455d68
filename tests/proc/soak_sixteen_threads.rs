//! Soak: 16 threads append a few million records of mixed sizes with periodic flushes, then the
//! log is recovered and every record checked. Reports peak RSS (VmHWM).
//!
//! Runs only when asked, with a release build: `WALCRYPT_SOAK=1 cargo test --release --test
//! soak_sixteen_threads -- --ignored --nocapture`. WALCRYPT_SOAK_RECORDS sets the total (default
//! 2,000,000), WALCRYPT_SOAK_MODE one mode (default: all three in turn).

use crate::support;

use std::collections::HashSet;

use support::{Rng, env_usize};
use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

const THREADS: u64 = 16;

/// A cheap deterministic payload: id, then a repeating pattern; sizes 8..~4 KiB, mostly small.
fn payload(id: u64) -> Vec<u8> {
    let mut rng = Rng::new(id);
    let len = match rng.below(100) {
        0..=79 => rng.range(8, 128),
        80..=97 => rng.range(128, 1024),
        _ => rng.range(1024, 4096),
    } as usize;
    let mut p = vec![(id % 251) as u8; len];
    p[..8].copy_from_slice(&id.to_le_bytes());
    p
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn soak(mode: Mode, total: u64) {
    let keys = KeyRing::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .segment_size(16 << 20);
    let per_thread = total / THREADS;
    let wal = Wal::open(dir.path(), config.clone()).unwrap();
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let wal = &wal;
            s.spawn(move || {
                for n in 0..per_thread {
                    let id = t * per_thread + n;
                    let lsn = wal.append((id % 251) as u8, &payload(id)).unwrap();
                    if n % 64 == 63 {
                        wal.flush(lsn).unwrap();
                    }
                }
            });
        }
    });
    let stats = wal.stats();
    wal.close().unwrap();
    let write_time = started.elapsed();

    let mut seen = HashSet::with_capacity((per_thread * THREADS) as usize);
    let mut count = 0u64;
    let wal = Wal::open_and_replay(dir.path(), config, Lsn::default(), |rec| {
        let id = u64::from_le_bytes(rec.payload[..8].try_into().unwrap());
        assert_eq!(rec.payload, payload(id), "record {id} altered");
        assert_eq!(rec.kind, (id % 251) as u8);
        assert!(seen.insert(id), "record {id} twice");
        count += 1;
        Ok(())
    })
    .unwrap();
    wal.close().unwrap();
    assert_eq!(count, per_thread * THREADS, "records lost");
    println!(
        "soak {mode}: {count} records from {THREADS} threads, {} MiB, {} fsyncs, written in \
         {:.1?}, all recovered; peak RSS {} KiB",
        stats.record_bytes >> 20,
        stats.fsyncs,
        write_time,
        peak_rss_kib().map_or("?".into(), |k| k.to_string()),
    );
}

#[test]
#[ignore = "a long soak: run with WALCRYPT_SOAK=1 cargo test --release --test proc soak_sixteen_threads:: -- --ignored --nocapture"]
fn soak_sixteen_threads_then_full_recovery() {
    let _serial = crate::support::serial();
    assert_eq!(
        std::env::var("WALCRYPT_SOAK").ok().as_deref(),
        Some("1"),
        "the soak runs only with WALCRYPT_SOAK=1"
    );
    let total = env_usize("WALCRYPT_SOAK_RECORDS", 2_000_000) as u64;
    let only = std::env::var("WALCRYPT_SOAK_MODE").ok();
    for mode in Mode::ALL {
        if only.as_deref().is_none_or(|m| m == mode.name()) {
            soak(mode, total);
        }
    }
}
