//! The perrecord seal (`CtrKey::seal_append`: the fused AES-256-CTR + CRC32C kernel on CPUs
//! that have AES-NI and SSE4.2, `aes` + `ctr` + `crc32c` elsewhere) gives exactly the bytes
//! and checksum of the reference path: the keystream of `aes` + `ctr` (`Ctr128BE`) and the
//! `crc32c` crate, for random keys, counters about to carry across the 32-, 64- and 128-bit
//! boundaries, every length up to 2 KiB and large ones, unaligned payloads, and headers of
//! any length before the ciphertext. The unit tests in `src/crypto/fused.rs` run the same
//! comparison for both kernels (AES-NI and VAES) where the CPU has them.

use walcrypt::Key;
use walcrypt::inspect::{CtrKey, ctr_apply_keystream};

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the OS random source");
    b
}

/// IVs: random, and counters whose low 32 or 64 bits, or all 128, are about to carry.
fn ivs() -> Vec<[u8; 16]> {
    let r = u128::from_be_bytes(random::<16>());
    let low64 = u128::from(u64::MAX);
    vec![
        r.to_be_bytes(),
        ((r & !0xffff_ffff) | 0xffff_fffe).to_be_bytes(),
        ((r & !low64) | (low64 - 1)).to_be_bytes(),
        ((r & !low64) | (low64 - 20)).to_be_bytes(),
        (u128::MAX - 3).to_be_bytes(),
    ]
}

/// The reference: the payload copied behind `head`, the `aes` + `ctr` keystream applied,
/// then `crc32c` over `out[crc_from..]`.
fn reference(
    key: &Key,
    iv: &[u8; 16],
    payload: &[u8],
    head: &[u8],
    crc_from: usize,
) -> (Vec<u8>, u32) {
    let mut out = head.to_vec();
    out.extend_from_slice(payload);
    ctr_apply_keystream(key, iv, &mut out[head.len()..]);
    let crc = crc32c::crc32c(&out[crc_from.min(head.len())..]);
    (out, crc)
}

fn check(key: &Key, ctr: &CtrKey, iv: &[u8; 16], payload: &[u8], head: &[u8], crc_from: usize) {
    let (want, want_crc) = reference(key, iv, payload, head, crc_from);
    let mut got = head.to_vec();
    let got_crc = ctr.seal_append(iv, payload, &mut got, crc_from);
    assert!(
        got == want,
        "ciphertext differs: kernel {}, {} bytes",
        ctr.seal_kernel(),
        payload.len()
    );
    assert_eq!(
        got_crc,
        want_crc,
        "checksum: kernel {}, {} bytes",
        ctr.seal_kernel(),
        payload.len()
    );
}

#[test]
fn every_length_up_to_2_kib_matches_the_reference() {
    let key = Key::from_bytes(random::<32>());
    let ctr = CtrKey::new(&key);
    let data: Vec<u8> = (0..2048 + 16).map(|i| (i * 31 + 7) as u8).collect();
    let head = random::<32>();
    for iv in ivs() {
        for len in 0..=2048 {
            let at = 1 + len % 15; // never 16-byte aligned
            check(&key, &ctr, &iv, &data[at..at + len], &head, 4);
        }
    }
}

#[test]
fn large_payloads_match_the_reference() {
    let key = Key::from_bytes(random::<32>());
    let ctr = CtrKey::new(&key);
    let data: Vec<u8> = (0..(1 << 20) + 64).map(|i| (i * 131 + 5) as u8).collect();
    for iv in ivs() {
        for len in [4096, 8192 + 7, 65536 + 33, 1 << 20] {
            check(&key, &ctr, &iv, &data[5..5 + len], &[0xa5; 32], 4);
        }
    }
}

#[test]
fn headers_of_any_length_and_checksum_starts_match_the_reference() {
    let key = Key::from_bytes(random::<32>());
    let ctr = CtrKey::new(&key);
    let data = random::<300>();
    for iv in ivs() {
        for head_len in [0, 1, 7, 12, 32, 33] {
            let head = vec![0x3c; head_len];
            for crc_from in [0, 3, head_len, head_len + 9] {
                for len in [0, 1, 15, 16, 17, 100, 300] {
                    check(&key, &ctr, &iv, &data[..len], &head, crc_from);
                }
            }
        }
    }
}

#[test]
fn many_keys_give_the_reference_keystream() {
    let data = [0u8; 200];
    for _ in 0..64 {
        let key = Key::from_bytes(random::<32>());
        check(&key, &CtrKey::new(&key), &random::<16>(), &data, &[], 0);
    }
}

#[test]
fn debug_names_the_kernel_and_never_the_key() {
    let bytes = [0x5au8; 32];
    let ctr = CtrKey::new(&Key::from_bytes(bytes));
    let shown = format!("{ctr:?}");
    assert!(shown.contains(ctr.seal_kernel()), "{shown}");
    assert!(!shown.to_lowercase().contains("5a"), "{shown}");
    assert!(!shown.contains("90"), "{shown}"); // 0x5a in decimal
}
