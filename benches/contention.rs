//! Append + commit from 1, 2, 4 and 8 threads sharing one log, per mode: the iterations of each
//! sample are split across the threads and the wall time of the whole batch is reported.

mod common;

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use walcrypt::{KeyRing, Lsn, Mode, Wal};

const THREADS: [usize; 4] = [1, 2, 4, 8];

/// Runs `iters` transactions split over `threads` threads; returns the wall time.
fn run(wal: &Wal, threads: usize, iters: u64, records: &[(u8, usize)], data: &[u8]) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let share = iters / threads as u64 + u64::from((t as u64) < iters % threads as u64);
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for _ in 0..share {
                    common::txn(wal, records, data);
                }
            });
        }
        barrier.wait();
        let started = Instant::now();
        // The scope joins every thread before returning.
        started
    })
    .elapsed()
}

fn contention(c: &mut Criterion) {
    let keys = KeyRing::generate().expect("generate keys");
    for (workload, records) in [common::WORKLOADS[0], common::WORKLOADS[2]] {
        let mut group = c.benchmark_group(format!("contention_{workload}"));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        group.throughput(Throughput::Bytes(common::txn_bytes(records)));
        let data = common::payload(records.iter().map(|r| r.1).max().unwrap_or(0));
        for mode in Mode::ALL {
            let dir = tempfile::tempdir().expect("temporary directory");
            let wal = Wal::open(dir.path(), common::config(mode, &keys)).expect("open");
            for threads in THREADS {
                group.bench_function(BenchmarkId::new(mode.name(), threads), |b| {
                    b.iter_custom(|iters| {
                        let took = run(&wal, threads, iters, records, &data);
                        common::purge(&wal, Lsn(wal.flushed_lsn().0));
                        took
                    })
                });
            }
            wal.close().expect("close");
        }
        group.finish();
    }
}

criterion_group!(benches, contention);
criterion_main!(benches);
