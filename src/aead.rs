//! AES-256-GCM (NIST SP 800-38D), every use of it in walcrypt: perrecord-gcm records, the
//! sealed segment switch, checkpoint metadata, the key store's wraps and authentication, and
//! sealed files. The AEAD is AWS-LC's (`aws-lc-rs`); this file only adapts its calls.
//!
//! Why AWS-LC and not RustCrypto's `aes-gcm`, which walcrypt used before: on this project's
//! machines (x86-64 with AES-NI, VAES, VPCLMULQDQ, AVX-512) AWS-LC's fused AES-GCM opens a
//! 100-byte oltp payload (32 bytes of associated data) in 67–74 ns against 165 ns for
//! `aes-gcm` 0.11, and 8 KiB in 577 ns against 2089 ns (docs/BENCHMARKS.md, "perrecord-gcm on AWS-LC").
//! A perrecord-gcm replay is the AEAD's open per record, so that is the mode's recovery time.
//! The key schedule and GHASH key table live in memory AWS-LC allocated, which it wipes when it
//! frees it (`OPENSSL_free` cleanses every allocation), so a dropped [`GcmKey`] leaves no key
//! schedule behind, as the `zeroize` feature of the RustCrypto crates does for CTR. Not wiped:
//! each seal and open leaves a copy of the GHASH key table on the calling thread's stack
//! (AWS-LC's `GCM128_CONTEXT`), until later calls overwrite it; docs/SECURITY.md ("Key bytes
//! in memory") weighs it.
//!
//! For records, the tag covers the ciphertext and, as associated data,
//! [`crate::format::auth_aad`]: log id, key id, length, kind, flags, mode code, the log's
//! geometry (page size and pages per segment, format version 5 on) and the record's LSN. An
//! appender learns its record's LSN when it reserves the record's bytes, before it seals, so
//! the tag is plain AES-GCM over the full associated data.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};

use crate::error::{Error, Result};
use crate::format::KEY_LEN;

/// Length of a GCM nonce: for records, the first 12 bytes of the record's IV.
pub(crate) const NONCE_LEN: usize = 12;

/// Length of a GCM tag.
pub(crate) const GCM_TAG_LEN: usize = 16;

/// One key's AES-256-GCM state: the expanded key schedule and GHASH key, built once and
/// shared by every thread.
pub(crate) struct GcmKey {
    key: LessSafeKey,
}

impl GcmKey {
    /// Expands `key`. `what` names the key (which one, of what) in the error AWS-LC's refusal
    /// becomes (it refuses only when it cannot allocate the state).
    pub(crate) fn new(key: &[u8; KEY_LEN], what: impl FnOnce() -> String) -> Result<GcmKey> {
        let unbound =
            UnboundKey::new(&AES_256_GCM, key).map_err(|_| Error::CipherSetup { what: what() })?;
        Ok(GcmKey {
            key: LessSafeKey::new(unbound),
        })
    }

    /// Encrypts `data` in place under `nonce` and returns the tag over `aad` and the
    /// ciphertext. `None` only for data beyond GCM's limit (about 64 GiB).
    pub(crate) fn seal(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        data: &mut [u8],
    ) -> Option<[u8; GCM_TAG_LEN]> {
        let tag = self
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(*nonce), Aad::from(aad), data)
            .ok()?;
        let mut out = [0u8; GCM_TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        Some(out)
    }

    /// Checks `tag` over `aad` and the ciphertext, then decrypts `data` in place. On failure
    /// `false` is returned and `data` holds neither the ciphertext nor anything decrypted:
    /// AWS-LC zeroes it, so unauthenticated plaintext is never handed on. A caller that needs
    /// the ciphertext again reads it again.
    pub(crate) fn open(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8; GCM_TAG_LEN],
    ) -> bool {
        self.key
            .open_in_place_separate_tag(
                Nonce::assume_unique_for_key(*nonce),
                Aad::from(aad),
                tag,
                data,
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{AAD_LEN, AAD_LSN_AT};

    #[test]
    fn a_tag_sealed_at_one_lsn_fails_at_another() {
        let gcm = GcmKey::new(&[7u8; 32], || "a test key".into()).unwrap();
        let mut aad = [0u8; AAD_LEN];
        aad[AAD_LSN_AT..].copy_from_slice(&4096u64.to_le_bytes());
        let mut data = vec![5u8; 64];
        let tag = gcm.seal(&[1; NONCE_LEN], &aad, &mut data).unwrap();
        let sealed = data.clone();
        aad[AAD_LSN_AT..].copy_from_slice(&8192u64.to_le_bytes());
        assert!(!gcm.open(&[1; NONCE_LEN], &aad, &mut data, &tag));
        assert_eq!(data, vec![0u8; 64], "a failed check hands out no plaintext");
        data.copy_from_slice(&sealed);
        aad[AAD_LSN_AT..].copy_from_slice(&4096u64.to_le_bytes());
        assert!(gcm.open(&[1; NONCE_LEN], &aad, &mut data, &tag));
        assert_eq!(data, vec![5u8; 64]);
    }

    /// The test vector of NIST SP 800-38D's specification ("The Galois/Counter Mode of
    /// Operation", McGrew and Viega, test case 16): AES-256, 96-bit IV, 60 bytes of plaintext,
    /// 20 bytes of associated data.
    #[test]
    fn matches_the_gcm_specification_test_case_16() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let key: [u8; 32] = hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
            .try_into()
            .unwrap();
        let nonce: [u8; 12] = hex("cafebabefacedbaddecaf888").try_into().unwrap();
        let aad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
        let plain = hex(
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72\
             1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
        );
        let cipher = hex(
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa\
             8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
        );
        let gcm = GcmKey::new(&key, || "a test key".into()).unwrap();
        let mut data = plain.clone();
        let tag = gcm.seal(&nonce, &aad, &mut data).unwrap();
        assert_eq!(data, cipher);
        assert_eq!(tag.to_vec(), hex("76fc6ece0f4e1768cddf8853bb2d551b"));
        assert!(gcm.open(&nonce, &aad, &mut data, &tag));
        assert_eq!(data, plain);
    }
}
