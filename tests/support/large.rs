//! Logs large enough that recovery replays them on two threads (past its first MiB): 4 KiB
//! pages, 1 MiB segments, and records of 40 B to 3 KiB whose payloads follow from their index.

use std::path::Path;

use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

pub const PAGE: u64 = 4096;
pub const SEGMENT: u64 = 1 << 20;

/// 4 KiB pages, 1 MiB segments, no segments prepared ahead.
pub fn config(mode: Mode, keys: &KeyRing, sync: SyncMode) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

/// The payload of record `i`: 40 B to 3 KiB.
pub fn payload(i: usize) -> Vec<u8> {
    let len = 40 + (i * 97) % 3000;
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// Writes records until about `bytes` of payload are in the log, then closes it; returns
/// their LSNs.
pub fn write_log(dir: &Path, config: Config, bytes: usize) -> Vec<Lsn> {
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

/// Threads of this process now.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Appends records to `wal` while `more(records so far, payload bytes so far)` holds,
/// flushing every 50th; returns their LSNs.
pub fn append_flushing(wal: &Wal, more: impl Fn(usize, usize) -> bool) -> Vec<Lsn> {
    let mut lsns = Vec::new();
    let mut written = 0;
    while more(lsns.len(), written) {
        let p = payload(lsns.len());
        written += p.len();
        let lsn = wal.append(1, &p).unwrap();
        lsns.push(lsn);
        if lsns.len() % 50 == 0 {
            wal.flush(lsn).unwrap();
        }
    }
    lsns
}
