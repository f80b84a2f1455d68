//! Helpers shared by the scenario tests in this directory.
#![allow(dead_code)]

use std::path::Path;

use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

/// A small geometry so that tests cross many page and segment boundaries quickly.
pub fn small_config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .page_size(512)
        .segment_size(8 * 512)
        .buffer_size(8 * 512)
        .sync(SyncMode::Durable)
}

/// A payload whose bytes depend on `seed`, so a misplaced or altered payload never matches.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every record of the log in `dir`, as (lsn, kind, payload); panics on any read error.
pub fn read_all(dir: &Path, keys: Option<KeyRing>) -> Vec<(Lsn, u8, Vec<u8>)> {
    let reader = Reader::open(dir, keys).expect("open reader");
    reader
        .records_from(Lsn::default())
        .map(|r| {
            let r = r.expect("read record");
            (r.lsn, r.kind, r.payload)
        })
        .collect()
}

/// Appends `(kind, payload)` records, flushing each, and returns their LSNs.
pub fn append_all(wal: &Wal, records: &[(u8, Vec<u8>)]) -> Vec<Lsn> {
    records
        .iter()
        .map(|(kind, p)| {
            let lsn = wal.append(*kind, p).expect("append");
            wal.flush(lsn).expect("flush");
            lsn
        })
        .collect()
}

/// Copies every file of `from` into the (existing) directory `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy file");
    }
}

/// Paths of the segment files in `dir`, oldest first.
pub fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    files.sort();
    files
}
