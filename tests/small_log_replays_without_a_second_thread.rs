//! A small log (a few hundred KiB) replays on the calling thread alone: recovery starts its
//! reading thread only past the first MiB, so short replays do not pay for one.

use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

/// 4 KiB pages and 1 MiB segments: a 3 MiB log crosses segments and replays past the size at
/// which recovery starts its second thread.
fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Buffered)
        .page_size(4096)
        .segment_size(1 << 20)
        .prepare_segments(false)
}

fn payload(i: usize) -> Vec<u8> {
    let len = 40 + (i * 97) % 3000;
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// Writes records until about `bytes` of payload are in the log; returns their LSNs.
fn write_log(dir: &std::path::Path, config: Config, bytes: usize) -> Vec<Lsn> {
    let wal = Wal::open(dir, config).unwrap();
    let mut lsns = Vec::new();
    let mut written = 0;
    while written < bytes {
        let p = payload(lsns.len());
        written += p.len();
        lsns.push(wal.append(1, &p).unwrap());
    }
    wal.close().unwrap();
    lsns
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn a_small_log_replays_on_the_calling_thread() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let lsns = write_log(dir.path(), config(Mode::PerRecord, &keys), 200 << 10);
    let before = threads();
    let mut most = 0;
    let mut n = 0;
    let wal = Wal::open_and_replay(
        dir.path(),
        config(Mode::PerRecord, &keys),
        Lsn::default(),
        |_| {
            most = most.max(threads());
            n += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(n, lsns.len());
    assert_eq!(most, before, "no second thread for a 200 KiB log");
    wal.close().unwrap();
}
