//! Authenticated record encryption (mode `perrecord-gcm`): AES-256-GCM from the `aes-gcm`
//! crate.
//!
//! The tag covers the ciphertext and, as associated data, [`crate::format::auth_aad`]: log id, key
//! id, length, kind, flags, mode code and the record's LSN. An appender learns its record's LSN
//! when it reserves the record's bytes, before it seals, so the tag is plain AES-GCM over the
//! full associated data, sealed ([`GcmKey::seal`]) and checked ([`GcmKey::open`]) by the crate.

use aes::Aes256;
use aes_gcm::aead::AeadInOut;
use aes_gcm::{Aes256Gcm, Nonce, Tag};

use crate::format::{AAD_LEN, TAG_LEN};

/// Length of a GCM nonce: the first 12 bytes of the record's IV.
pub(crate) const NONCE_LEN: usize = 12;

/// One key's AES-256-GCM state, over the key schedule the log expanded once.
pub(crate) struct GcmKey {
    aead: Aes256Gcm,
}

impl GcmKey {
    /// Builds the GCM state over an already expanded key schedule.
    pub(crate) fn new(aes: &Aes256) -> GcmKey {
        GcmKey {
            aead: Aes256Gcm::from(aes.clone()),
        }
    }

    /// Encrypts `data` in place under `nonce` and returns the tag over `aad` (the record's LSN
    /// in it) and the ciphertext. `None` only for data beyond GCM's limit (about 64 GiB).
    pub(crate) fn seal(
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::AAD_LSN_AT;
    use cipher::KeyInit;

    #[test]
    fn a_tag_sealed_at_one_lsn_fails_at_another() {
        let gcm = GcmKey::new(&Aes256::new(&[7u8; 32].into()));
        let mut aad = [0u8; AAD_LEN];
        aad[AAD_LSN_AT..].copy_from_slice(&4096u64.to_le_bytes());
        let mut data = vec![5u8; 64];
        let tag = gcm.seal(&[1; NONCE_LEN], &aad, &mut data).unwrap();
        aad[AAD_LSN_AT..].copy_from_slice(&8192u64.to_le_bytes());
        let sealed = data.clone();
        assert!(!gcm.open(&[1; NONCE_LEN], &aad, &mut data, &tag));
        assert_eq!(data, sealed, "a failed check leaves the ciphertext alone");
        aad[AAD_LSN_AT..].copy_from_slice(&4096u64.to_le_bytes());
        assert!(gcm.open(&[1; NONCE_LEN], &aad, &mut data, &tag));
        assert_eq!(data, vec![5u8; 64]);
    }
}
