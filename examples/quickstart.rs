//! Writes a log in each mode, simulates a crash, recovers and prints what it found.
//!
//! Run with `cargo run --release --example quickstart`. With `-- --keep DIR` the four logs
//! and their key file (`DIR/keys`, mode 0600) stay in DIR for `wal-dump`.

use std::time::Instant;

use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let keep = match args.as_slice() {
        [] => None,
        [flag, dir] if flag == "--keep" => Some(std::path::PathBuf::from(dir)),
        _ => return Err("usage: quickstart [--keep DIR]".into()),
    };
    let keys = KeyRing::generate()?;
    if let Some(keep) = &keep {
        std::fs::create_dir_all(keep)?;
        keys.save(keep.join("keys"))?;
    }
    for mode in Mode::ALL {
        let dir = tempfile::tempdir()?;
        let config = Config::new(mode)
            .keys(keys.clone())
            .sync(SyncMode::Buffered);

        // Append 100 000 records of 100 bytes, committing every 10.
        let wal = Wal::open(dir.path(), config.clone())?;
        let payload = [0x5au8; 100];
        let started = Instant::now();
        let mut last = Lsn::default();
        for i in 0..100_000u32 {
            last = wal.append((i % 4) as u8, &payload)?;
            if i % 10 == 9 {
                wal.flush(last)?;
            }
        }
        let elapsed = started.elapsed();
        // One more record that is never flushed, then a "crash": copy the files as they are
        // on disk right now, while the Wal is still open, and recover from the copy.
        wal.append(9, b"never flushed")?;
        let crashed = tempfile::tempdir()?;
        for entry in std::fs::read_dir(dir.path())? {
            let entry = entry?;
            std::fs::copy(entry.path(), crashed.path().join(entry.file_name()))?;
        }
        drop(wal);
        let dir = crashed;
        let stats_mb = 100_000.0 * 100.0 / 1e6 / elapsed.as_secs_f64();

        // Recovery: replay every record, then continue writing at the end.
        let mut replayed = 0u64;
        let wal = Wal::open_and_replay(dir.path(), config, Lsn::default(), |_| {
            replayed += 1;
            Ok(())
        })?;
        let next = wal.append(1, b"after recovery")?;
        wal.flush(next)?;
        wal.close()?;

        let reader = Reader::open(dir.path(), Some(keys.clone()))?;
        let total = reader.records_from(Lsn::default()).count();
        println!(
            "{mode:>9}: appended 100000 x 100 B at {stats_mb:.1} MB/s (payload), \
             recovered {replayed} records ending at {last}, {total} after one more append"
        );
        if let Some(keep) = &keep {
            let target = keep.join(mode.name());
            std::fs::create_dir_all(&target)?;
            for entry in std::fs::read_dir(dir.path())? {
                let entry = entry?;
                std::fs::copy(entry.path(), target.join(entry.file_name()))?;
            }
        }
    }
    Ok(())
}
