//! Replay throughput: open_and_replay of a whole log (written without checkpoints, dropped
//! without close) per mode and workload. The log is in the page cache, so this measures CPU.

mod common;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use walcrypt::{KeyRing, Lsn, Mode, Wal};

const LOG_BYTES: u64 = 16 << 20;

fn recovery(c: &mut Criterion) {
    let keys = KeyRing::generate().expect("generate keys");
    let mut group = c.benchmark_group("replay");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (workload, records) in common::WORKLOADS {
        for mode in Mode::ALL {
            let dir = tempfile::tempdir().expect("temporary directory");
            let bytes = common::write_log(dir.path(), mode, &keys, records, LOG_BYTES);
            group.throughput(Throughput::Bytes(bytes));
            group.bench_function(BenchmarkId::new(mode.name(), workload), |b| {
                b.iter(|| {
                    let mut n = 0u64;
                    let wal = Wal::open_and_replay(
                        dir.path(),
                        common::config(mode, &keys),
                        Lsn::default(),
                        |record| {
                            n += record.payload.len() as u64;
                            Ok(())
                        },
                    )
                    .expect("replay");
                    drop(wal);
                    n
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, recovery);
criterion_main!(benches);
