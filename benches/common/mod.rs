//! Shared by the benches: the walbench workloads, keys, and a log in a temporary directory.
//! Each bench uses a different part of this module.
#![allow(dead_code)] // not every bench uses every helper

use std::path::Path;

use walcrypt::{Config, KEY_LEN, KeyRing, Lsn, Mode, SyncMode, Wal};
use zeroize::Zeroizing;

/// (name, records of one transaction as (kind, payload length)), as walbench defines them.
pub const WORKLOADS: [(&str, &[(u8, usize)]); 3] = [
    ("oltp", &[(1, 96), (1, 112), (1, 104), (1, 88), (2, 24)]),
    ("bulk", &[(3, 32 << 10), (2, 24)]),
    ("fpw", &[(4, (8 << 10) + 24), (1, 100), (2, 24)]),
];

pub fn txn_bytes(records: &[(u8, usize)]) -> u64 {
    records.iter().map(|(_, len)| *len as u64).sum()
}

/// Payload bytes that look like data.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8)
        .collect()
}

/// An 8 KiB page image with rows of repeating structure and some entropy (like walbench's fpw
/// images: LZ4 stores it in about half its size).
pub fn page_like(seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut page = Vec::with_capacity(8192);
    while page.len() < 8192 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let row = page.len() as u32 / 80;
        page.extend_from_slice(&[0x17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 5, 0, 2, 9]);
        page.extend_from_slice(&row.to_le_bytes());
        page.extend_from_slice(&(x % 100_000).to_le_bytes());
        page.extend_from_slice(format!("name-{:<10}", x % 977).as_bytes());
        page.extend_from_slice(&(1_700_000_000 + u64::from(row) * 61).to_le_bytes());
        page.extend_from_slice(&x.to_le_bytes());
        page.extend_from_slice(&x.rotate_left(17).to_le_bytes());
        page.extend_from_slice(&[0; 8]);
    }
    page.truncate(8192);
    page
}

/// `len` pseudo-random bytes (xorshift from `seed`): incompressible, different per seed.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A fresh random key, never printed.
pub fn random_key_bytes() -> Zeroizing<[u8; KEY_LEN]> {
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    getrandom::fill(&mut *key).expect("the OS random source works");
    key
}

pub fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Buffered)
}

/// Appends and commits one transaction.
pub fn txn(wal: &Wal, records: &[(u8, usize)], data: &[u8]) -> Lsn {
    let mut last = Lsn::default();
    for &(kind, len) in records {
        last = wal.append(kind, &data[..len]).expect("append");
    }
    wal.flush(last).expect("flush");
    last
}

/// Drops the segments behind `lsn`, so long bench runs do not fill the disk.
pub fn purge(wal: &Wal, lsn: Lsn) {
    wal.purge_before(lsn).expect("purge");
}

/// Writes about `bytes` of `records` transactions into a fresh log at `dir` and drops it
/// without closing. Returns the record bytes in the log.
pub fn write_log(
    dir: &Path,
    mode: Mode,
    keys: &KeyRing,
    records: &[(u8, usize)],
    bytes: u64,
) -> u64 {
    let wal = Wal::open(dir, config(mode, keys)).expect("open");
    let data = payload(records.iter().map(|r| r.1).max().unwrap_or(0));
    while wal.stats().record_bytes < bytes {
        txn(&wal, records, &data);
    }
    wal.stats().record_bytes
}
