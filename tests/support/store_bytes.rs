//! Reading and rewriting a key store file's bytes as someone who can write the file (but has
//! no KEK) can: find each entry, change it, recompute the checksum. Layout in docs/FORMAT.md.

use std::ops::Range;

use walcrypt::{KeyInfo, KeyProvider};

/// The byte range of each entry of a store, in file order.
pub fn entries(bytes: &[u8]) -> Vec<Range<usize>> {
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    let count = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let k = bytes[24] as usize;
    let mut at = 25 + k;
    if version >= 2 {
        let alen = u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()) as usize;
        at += 2 + alen + 12;
    }
    let mut out = Vec::new();
    for _ in 0..count {
        let wlen = u16::from_le_bytes(bytes[at + 24..at + 26].try_into().unwrap()) as usize;
        out.push(at..at + 26 + wlen);
        at += 26 + wlen;
    }
    out
}

/// Sets the entry count (bytes 12..16).
pub fn set_count(bytes: &mut [u8], count: u32) {
    bytes[12..16].copy_from_slice(&count.to_le_bytes());
}

/// Byte offset of an entry's state within the entry.
pub const STATE_AT: usize = 4;

/// Recomputes the CRC32C in the last 4 bytes.
pub fn fix_crc(bytes: &mut [u8]) {
    let n = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..n]).to_le_bytes();
    bytes[n..].copy_from_slice(&crc);
}

/// A version 1 store file (the first format, without authentication of the listing), with
/// `entries` (id, state code, key) wrapped by `kek` as version 1 did.
pub fn version_1_file(
    kek: &dyn KeyProvider,
    generation: u64,
    entries: &[(u32, u8, &walcrypt::Key)],
) -> Vec<u8> {
    let kek_id = kek.kek_id().unwrap();
    let mut out = Vec::new();
    out.extend_from_slice(b"WCKEYSTR");
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.push(kek_id.len() as u8);
    out.extend_from_slice(kek_id.as_bytes());
    for (id, state, key) in entries {
        let created = 1_700_000_000u64;
        let fingerprint = key.fingerprint();
        let mut aad = b"walcrypt key store v1".to_vec();
        aad.push(kek_id.len() as u8);
        aad.extend_from_slice(kek_id.as_bytes());
        aad.extend_from_slice(&id.to_le_bytes());
        aad.extend_from_slice(&created.to_le_bytes());
        aad.extend_from_slice(&fingerprint);
        let wrapped = kek.wrap(key, &aad).unwrap();
        out.extend_from_slice(&id.to_le_bytes());
        out.push(*state);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&created.to_le_bytes());
        out.extend_from_slice(&fingerprint);
        out.extend_from_slice(&(wrapped.len() as u16).to_le_bytes());
        out.extend_from_slice(&wrapped);
    }
    out.extend_from_slice(&[0; 4]);
    fix_crc(&mut out);
    out
}

/// The ids and states a listing shows.
pub fn states(keys: &[KeyInfo]) -> Vec<(u32, &'static str)> {
    keys.iter().map(|k| (k.id, k.state.name())).collect()
}
