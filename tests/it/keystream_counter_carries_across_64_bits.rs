//! The CTR keystream equals AES-256 of the 128-bit big-endian counter block, block by block,
//! for every length around the cipher backends' batch sizes (8, 30, 64 blocks) and for
//! counters that carry from the low 64 bits into the high 64 (and wrap at 2^128). Records
//! sealed one after another with consecutive IVs (what the log does) each get their own
//! keystream; no counter block is shared between two of them.

use aes::Aes256;
use cipher::{BlockCipherEncrypt, KeyInit};
use walcrypt::Key;
use walcrypt::inspect::ctr_apply_keystream;

const KEY: [u8; 32] = [
    0x60, 0x3d, 0xeb, 0x10, 0x15, 0xca, 0x71, 0xbe, 0x2b, 0x73, 0xae, 0xf0, 0x85, 0x7d, 0x77, 0x81,
    0x1f, 0x35, 0x2c, 0x07, 0x3b, 0x61, 0x08, 0xd7, 0x2d, 0x98, 0x10, 0xa3, 0x09, 0x14, 0xdf, 0xf4,
];

/// The reference: AES-256 of each counter block, computed with 128-bit arithmetic.
fn reference_keystream(iv: u128, len: usize) -> Vec<u8> {
    let aes = Aes256::new(&KEY.into());
    let mut out = Vec::with_capacity(len + 16);
    let mut counter = iv;
    while out.len() < len {
        let mut block = counter.to_be_bytes().into();
        aes.encrypt_block(&mut block);
        out.extend_from_slice(&block);
        counter = counter.wrapping_add(1);
    }
    out.truncate(len);
    out
}

fn keystream(iv: u128, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    ctr_apply_keystream(&Key::from_bytes(KEY), &iv.to_be_bytes(), &mut data);
    data
}

/// Lengths around every batch size a backend uses, in bytes, with partial last blocks.
fn lengths() -> Vec<usize> {
    let mut lens = vec![
        0, 1, 15, 16, 17, 31, 33, 63, 64, 65, 100, 1000, 8192, 8216, 32768,
    ];
    for blocks in [
        4usize, 7, 8, 9, 16, 29, 30, 31, 32, 60, 63, 64, 65, 120, 128, 129,
    ] {
        lens.extend([blocks * 16 - 1, blocks * 16, blocks * 16 + 5]);
    }
    lens
}

#[test]
fn keystream_matches_the_block_cipher_at_every_length() {
    let iv = 0x0123_4567_89ab_cdef_0000_0007_0000_0000u128;
    for len in lengths() {
        assert_eq!(
            keystream(iv, len),
            reference_keystream(iv, len),
            "len {len}"
        );
    }
}

#[test]
fn counter_carries_from_the_low_64_bits_into_the_high_64() {
    // The low 64 bits roll over after 1, 5, 29 and 63 blocks: inside every batch size.
    for before_carry in [1u128, 5, 29, 63] {
        let iv = (0xfedc_ba98_7654_3210u128 << 64) | (u64::MAX as u128 + 1 - before_carry);
        for len in lengths() {
            let got = keystream(iv, len);
            assert_eq!(
                got,
                reference_keystream(iv, len),
                "carry after {before_carry} blocks, len {len}"
            );
        }
    }
    // The block after the carry is the high half plus one, low half zero.
    let iv = (7u128 << 64) | u64::MAX as u128;
    let second_block = keystream(iv, 32)[16..].to_vec();
    assert_eq!(second_block, reference_keystream(8u128 << 64, 16));
}

#[test]
fn counter_wraps_at_2_to_the_128() {
    let iv = u128::MAX - 2;
    let got = keystream(iv, 6 * 16);
    assert_eq!(got, reference_keystream(iv, 6 * 16));
    assert_eq!(got[3 * 16..4 * 16], reference_keystream(0, 16)[..]);
}

#[test]
fn consecutive_records_get_distinct_keystreams() {
    // Records of several sizes sealed one after another with the log's IV layout:
    // prefix (64) || sequence (32) || block (32). Each keystream is the reference one, and no
    // 16-byte keystream block repeats across the records.
    let prefix = 0xa5a5_5a5a_0f0f_f0f0u128 << 64;
    let sizes = [16usize, 64, 100, 480, 481, 1024, 8216, 3, 960, 1040];
    let mut seen = std::collections::HashSet::new();
    for (seq, &len) in sizes.iter().enumerate() {
        let iv = prefix | ((seq as u128) << 32);
        let got = keystream(iv, len);
        assert_eq!(got, reference_keystream(iv, len), "record {seq}, len {len}");
        for block in got.chunks_exact(16) {
            assert!(seen.insert(block.to_vec()), "record {seq} repeats a block");
        }
    }
}
