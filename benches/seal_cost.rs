//! The cost of the seal-path options, measured side by side in one run: `append` from one
//! thread into logs of each variant (perrecord, perrecord-gcm, and each with LZ4 compression),
//! the variants interleaved in short slices so machine noise hits all of them alike. Prints,
//! per record size, the median nanoseconds per append, the ratio to perrecord, the insert-lock
//! hold per append, and the stored bytes per record.
//!
//! Run with `cargo bench -p walcrypt-benches --bench seal_cost` (a plain program, not a
//! criterion bench; `cargo bench` alone leaves it out).

use std::time::Instant;

mod common;

use walcrypt::{Compression, Config, KeyRing, Mode, SyncMode, Wal};

const SLICES: usize = 31;

struct Variant {
    name: &'static str,
    mode: Mode,
    compression: Compression,
}

const VARIANTS: [Variant; 4] = [
    Variant {
        name: "perrecord",
        mode: Mode::PerRecord,
        compression: Compression::Off,
    },
    Variant {
        name: "perrecord-gcm",
        mode: Mode::PerRecordGcm,
        compression: Compression::Off,
    },
    Variant {
        name: "perrecord+lz4",
        mode: Mode::PerRecord,
        compression: Compression::Lz4 { min_len: 1024 },
    },
    Variant {
        name: "perrecord-gcm+lz4",
        mode: Mode::PerRecordGcm,
        compression: Compression::Lz4 { min_len: 1024 },
    },
];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keys = KeyRing::generate()?;
    let cases: Vec<(String, Vec<u8>)> = vec![
        ("64 B random".into(), common::random_bytes(64, 1)),
        ("256 B random".into(), common::random_bytes(256, 2)),
        ("1 KiB random".into(), common::random_bytes(1024, 3)),
        ("8 KiB random".into(), common::random_bytes(8192, 4)),
        ("8 KiB page image".into(), common::page_like(5)),
    ];
    println!(
        "{:<17} {:<18} {:>9} {:>7} {:>9} {:>10}",
        "payload", "variant", "ns/append", "x_ctr", "ins ns", "stored B"
    );
    for (label, payload) in &cases {
        let per_slice = (2 << 20) / payload.len().max(256);
        let dirs: Vec<_> = VARIANTS
            .iter()
            .map(|_| tempfile::tempdir())
            .collect::<Result<_, _>>()?;
        let wals: Vec<Wal> = VARIANTS
            .iter()
            .zip(&dirs)
            .map(|(v, d)| {
                let config = Config::new(v.mode)
                    .keys(keys.clone())
                    .sync(SyncMode::Buffered)
                    .compression(v.compression);
                Wal::open(d.path(), config)
            })
            .collect::<Result<_, _>>()?;
        let mut times = vec![Vec::new(); VARIANTS.len()];
        let mut ratios = vec![Vec::new(); VARIANTS.len()];
        for _ in 0..SLICES {
            let mut slice = vec![0.0; VARIANTS.len()];
            for (i, wal) in wals.iter().enumerate() {
                let started = Instant::now();
                for _ in 0..per_slice {
                    wal.append(1, payload)?;
                }
                slice[i] = started.elapsed().as_nanos() as f64 / per_slice as f64;
            }
            for i in 0..VARIANTS.len() {
                times[i].push(slice[i]);
                ratios[i].push(slice[i] / slice[0]);
            }
        }
        for (i, wal) in wals.iter().enumerate() {
            let st = wal.stats();
            println!(
                "{:<17} {:<18} {:>9.0} {:>7.3} {:>9.0} {:>10.0}",
                label,
                VARIANTS[i].name,
                median(&mut times[i]),
                median(&mut ratios[i]),
                st.insert_lock_ns as f64 / st.appends as f64,
                st.record_bytes as f64 / st.appends as f64,
            );
        }
        for wal in wals {
            wal.close()?;
        }
    }
    Ok(())
}
