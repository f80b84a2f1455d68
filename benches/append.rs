//! Single-thread append + commit (flush, SyncMode::Buffered) per mode and workload.

mod common;

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use walcrypt::{KeyRing, Mode, Wal};

fn append(c: &mut Criterion) {
    let keys = KeyRing::generate().expect("generate keys");
    let mut group = c.benchmark_group("append_commit");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (workload, records) in common::WORKLOADS {
        let data = common::payload(records.iter().map(|r| r.1).max().unwrap_or(0));
        group.throughput(Throughput::Bytes(common::txn_bytes(records)));
        for mode in Mode::ALL {
            let dir = tempfile::tempdir().expect("temporary directory");
            let wal = Wal::open(dir.path(), common::config(mode, &keys)).expect("open");
            group.bench_function(BenchmarkId::new(mode.name(), workload), |b| {
                b.iter_custom(|iters| {
                    let started = Instant::now();
                    let mut last = wal.end_lsn();
                    for _ in 0..iters {
                        last = common::txn(&wal, records, &data);
                    }
                    let took = started.elapsed();
                    common::purge(&wal, last);
                    took
                })
            });
            wal.close().expect("close");
        }
    }
    group.finish();
}

criterion_group!(benches, append);
criterion_main!(benches);
