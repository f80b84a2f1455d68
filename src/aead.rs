//! Authenticated record encryption (mode `perrecord-gcm`): AES-256-GCM from the `aes-gcm`
//! crate, with the record's position bound into the tag after sealing.
//!
//! The tag covers the ciphertext and, as associated data, [`crate::format::auth_aad`]: log id, key
//! id, length, kind, flags and the record's LSN. The LSN is only known inside the insert lock,
//! and no AES or checksum over the payload may run there. GHASH is linear in every block of
//! associated data, so the appending thread encrypts and computes the tag with the LSN field
//! zero ([`GcmKey::seal`]); inside the lock [`LsnBinder::bind`] adds the LSN's share of the
//! hash, `lsn_block · H^(c+2)` for `c` ciphertext blocks: one GF(2^128) multiplication of a
//! 16-byte block. The result is exactly the AES-GCM tag over the full associated data, so
//! readers check it with plain AES-GCM ([`GcmKey::open`]). A record whose LSN is known when it
//! is sealed (`seal::Seal::seal_record_at`, a segment switch) takes its tag over the full
//! associated data at once ([`GcmKey::seal_detached`]); once the writer seals every record that
//! way, the late binding here goes.

use std::sync::OnceLock;

use aes::Aes256;
use aes_gcm::aead::AeadInOut;
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use cipher::BlockCipherEncrypt;
use ghash::GHash;
use ghash::universal_hash::UniversalHash;
use zeroize::Zeroizing;

use crate::format::{AAD_LEN, AAD_LSN_AT, TAG_LEN};

/// Length of a GCM nonce: the first 12 bytes of the record's IV.
pub(crate) const NONCE_LEN: usize = 12;

/// `H^(2^i)` for i below this covers every exponent a record can need: a 1 GiB payload has
/// 2^26 blocks.
const POWERS: usize = 28;

/// Records of up to this many 16-byte blocks (4 KiB) take their binder from a table built on
/// first use, instead of computing `H^(c+2)` and keying GHASH per record, which costs several
/// times a small record's encryption.
const CACHED_BLOCKS: usize = 256;

/// One key's AES-256-GCM state: the shared AES key schedule, the hash key `H` and its
/// powers `H^(2^i)` (secret: zeroized on drop).
pub(crate) struct GcmKey {
    aead: Aes256Gcm,
    powers: Zeroizing<[[u8; 16]; POWERS]>,
    /// GHASH keyed with `H^(c+2)` for `c` in `0..=CACHED_BLOCKS`, built by the first seal.
    binders: OnceLock<Vec<GHash>>,
}

impl GcmKey {
    /// Builds the GCM state over an already expanded key schedule.
    pub(crate) fn new(aes: &Aes256) -> GcmKey {
        let mut h = Zeroizing::new([0u8; 16]);
        let mut block = (*h).into();
        aes.encrypt_block(&mut block);
        h.copy_from_slice(&block);
        block.fill(0);
        let mut powers = Zeroizing::new([[0u8; 16]; POWERS]);
        powers[0] = *h;
        for i in 1..POWERS {
            powers[i] = gf_mul(&powers[i - 1], &powers[i - 1]);
        }
        GcmKey {
            aead: Aes256Gcm::from(aes.clone()),
            powers,
            binders: OnceLock::new(),
        }
    }

    /// The binder for a record of `blocks` ciphertext blocks: GHASH keyed with `H^(blocks+2)`.
    fn binder(&self, blocks: u64) -> LsnBinder {
        let cached = self.binders.get_or_init(|| {
            let h = self.powers[0];
            let mut p = Zeroizing::new(gf_mul(&h, &h));
            (0..=CACHED_BLOCKS)
                .map(|_| {
                    let hash = GHash::new(&(*p).into());
                    *p = gf_mul(&p, &h);
                    hash
                })
                .collect()
        });
        match cached.get(blocks as usize) {
            Some(hash) => LsnBinder(hash.clone()),
            None => LsnBinder(GHash::new(&(*self.power(blocks + 2)).into())),
        }
    }

    /// Encrypts `data` in place under `nonce` and returns the tag over `aad` as given (its LSN
    /// field included).
    pub(crate) fn seal_detached(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8; AAD_LEN],
        data: &mut [u8],
    ) -> Option<[u8; TAG_LEN]> {
        let tag = self
            .aead
            .encrypt_inout_detached(&Nonce::from(*nonce), aad, data.into())
            .ok()?;
        Some(tag.into())
    }

    /// Encrypts `data` in place under `nonce` and returns the tag over `aad` with its LSN
    /// field as given (the writer passes zero), and the binder that adds the LSN later.
    ///
    /// Late binding: deleted (with [`LsnBinder`], `binder`, `power`, the powers of `H` and
    /// `gf_mul`) once the writer seals with the LSN known ([`GcmKey::seal_detached`]).
    pub(crate) fn seal(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8; AAD_LEN],
        data: &mut [u8],
    ) -> Option<([u8; TAG_LEN], LsnBinder)> {
        let tag = self.seal_detached(nonce, aad, data)?;
        let blocks = data.len().div_ceil(16) as u64;
        Some((tag, self.binder(blocks)))
    }

    /// Checks `tag` over `aad` and the ciphertext, then decrypts `data` in place. On failure
    /// `data` is left as ciphertext and `false` returned.
    pub(crate) fn open(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8; AAD_LEN],
        data: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> bool {
        self.aead
            .decrypt_inout_detached(&Nonce::from(*nonce), aad, data.into(), &Tag::from(*tag))
            .is_ok()
    }

    /// `H^k` by square-and-multiply over the precomputed `H^(2^i)`.
    fn power(&self, k: u64) -> Zeroizing<[u8; 16]> {
        let mut acc: Option<Zeroizing<[u8; 16]>> = None;
        for (i, p) in self.powers.iter().enumerate() {
            if k >> i & 1 == 1 {
                acc = Some(match acc {
                    None => Zeroizing::new(*p),
                    Some(a) => Zeroizing::new(gf_mul(&a, p)),
                });
            }
        }
        // k >= 2 always (ciphertext blocks + 2) and below 2^POWERS for any record the format
        // allows; the fallback (H^0 = 1 would be wrong) is never reached.
        acc.unwrap_or_else(|| Zeroizing::new(self.powers[0]))
    }
}

/// Adds a record's LSN to a tag computed with a zero LSN field. Holds GHASH keyed with
/// `H^(c+2)`; built outside the insert lock, used inside it.
///
/// Late binding: deleted, with `gf_mul`, once the writer learns a record's LSN before
/// sealing it and seals through `seal::Seal::seal_record_at`.
pub(crate) struct LsnBinder(GHash);

impl LsnBinder {
    /// XORs `lsn_block · H^(c+2)` into `tag`, turning it into the tag over the associated
    /// data with `lsn` in place.
    pub(crate) fn bind(self, lsn: u64, tag: &mut [u8]) {
        let mut block = [0u8; 16];
        block[AAD_LSN_AT - 16..].copy_from_slice(&lsn.to_le_bytes());
        let mut hash = self.0;
        hash.update(&[block.into()]);
        let share = hash.finalize();
        for (t, s) in tag.iter_mut().zip(share.iter()) {
            *t ^= *s;
        }
    }
}

/// `a · b` in GCM's GF(2^128): GHASH keyed with `b` over the single block `a`. Only late
/// binding ([`LsnBinder`]) needs it; it goes with it.
fn gf_mul(a: &[u8; 16], b: &[u8; 16]) -> [u8; 16] {
    let mut hash = GHash::new(&(*b).into());
    hash.update(&[(*a).into()]);
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cipher::KeyInit;

    fn key() -> GcmKey {
        GcmKey::new(&Aes256::new(&[7u8; 32].into()))
    }

    #[test]
    fn late_bound_lsn_gives_the_plain_gcm_tag() {
        let gcm = key();
        for len in [0usize, 1, 15, 16, 17, 100, 4095, 4096, 4097, 8191] {
            let lsn = 0x0123_4567_89ab_cdef ^ len as u64;
            let mut aad = [3u8; AAD_LEN];
            aad[AAD_LSN_AT..].fill(0);
            let plain: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut data = plain.clone();
            let (mut tag, binder) = gcm.seal(&[9; NONCE_LEN], &aad, &mut data).unwrap();
            binder.bind(lsn, &mut tag);
            aad[AAD_LSN_AT..].copy_from_slice(&lsn.to_le_bytes());
            assert!(
                gcm.open(&[9; NONCE_LEN], &aad, &mut data, &tag),
                "len {len}"
            );
            assert_eq!(data, plain);
        }
    }

    #[test]
    fn a_tag_bound_to_one_lsn_fails_at_another() {
        let gcm = key();
        let mut aad = [0u8; AAD_LEN];
        let mut data = vec![5u8; 64];
        let (mut tag, binder) = gcm.seal(&[1; NONCE_LEN], &aad, &mut data).unwrap();
        binder.bind(4096, &mut tag);
        aad[AAD_LSN_AT..].copy_from_slice(&8192u64.to_le_bytes());
        let sealed = data.clone();
        assert!(!gcm.open(&[1; NONCE_LEN], &aad, &mut data, &tag));
        assert_eq!(data, sealed, "a failed check leaves the ciphertext alone");
        aad[AAD_LSN_AT..].copy_from_slice(&4096u64.to_le_bytes());
        assert!(gcm.open(&[1; NONCE_LEN], &aad, &mut data, &tag));
        assert_eq!(data, vec![5u8; 64]);
    }
}
