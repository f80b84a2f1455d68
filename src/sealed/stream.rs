//! The per-file key and the STREAM construction over AES-256-GCM.
//!
//! This file frames STREAM (Hoang, Reyhanitabar, Rogaway, Vizár, "Online
//! Authenticated-Encryption and its Nonce-Reuse Misuse-Resistance", 2015) on top of
//! AES-256-GCM (`crate::aead`, AWS-LC's): chunk `i` is sealed with plain AES-256-GCM under the
//! nonce `prefix (7) || i (u32 BE) || last (1)`. This is framing, not a cipher: every AES and
//! GHASH operation is the library's.
//! The associated data of every chunk is the whole file header, so a chunk is bound to its
//! file, its position and to whether it ends the file.

use aes::Aes256;
use cipher::KeyInit;
use zeroize::Zeroizing;

use crate::aead::GcmKey;
use crate::error::Result;

use super::layout::{CHUNK_TAG_LEN, FILE_ID_LEN, NONCE_PREFIX_LEN, chunk_nonce};
use crate::crypto::{KCV_LEN, KEY_LEN, Key};

/// HKDF salt of per-file keys. The log's working keys use "walcrypt working key v2".
const FILE_KEY_SALT: &[u8] = b"walcrypt sealed file key v1";
/// Start of the HKDF info of per-file keys (then key id, then file id).
const FILE_KEY_INFO: &[u8] = b"walcrypt sealed file";

/// The key that seals one file: HKDF-SHA256(salt = "walcrypt sealed file key v1", ikm = data
/// key, info = "walcrypt sealed file" || key id (u32 LE) || file id (16 bytes)).
///
/// A log's working key uses another salt and a 12-byte info, so the two HKDF outputs differ
/// unless HMAC-SHA256 collides: no file key equals a log working key.
fn file_key(key: &Key, key_id: u32, file_id: &[u8; FILE_ID_LEN]) -> Zeroizing<[u8; KEY_LEN]> {
    let mut info = [0u8; FILE_KEY_INFO.len() + 4 + FILE_ID_LEN];
    info[..FILE_KEY_INFO.len()].copy_from_slice(FILE_KEY_INFO);
    info[FILE_KEY_INFO.len()..FILE_KEY_INFO.len() + 4].copy_from_slice(&key_id.to_le_bytes());
    info[FILE_KEY_INFO.len() + 4..].copy_from_slice(file_id);
    crate::crypto::derive_key(FILE_KEY_SALT, key, &info)
}

/// One file's sealing state: its AES-256-GCM key (`GcmKey`: AWS-LC's state, wiped when
/// freed), nonce prefix and check value.
pub(crate) struct FileCipher {
    aead: GcmKey,
    prefix: [u8; NONCE_PREFIX_LEN],
    kcv: [u8; KCV_LEN],
}

impl FileCipher {
    pub(crate) fn new(
        key: &Key,
        key_id: u32,
        file_id: &[u8; FILE_ID_LEN],
        prefix: [u8; NONCE_PREFIX_LEN],
        path: &std::path::Path,
    ) -> Result<FileCipher> {
        let okm = file_key(key, key_id, file_id);
        Ok(FileCipher {
            kcv: crate::crypto::check_value(&Aes256::new((&*okm).into())),
            aead: GcmKey::new(&okm, || {
                format!(
                    "the key of sealed file {} (key id {key_id})",
                    path.display()
                )
            })?,
            prefix,
        })
    }

    /// Check value of the file key: AES over the fixed block `"walcrypt key kcv"`, whose
    /// 32-bit block field (0x206B6376) no GCM counter of a chunk reaches (at most 2^20 + 1).
    pub(crate) fn check_value(&self) -> [u8; KCV_LEN] {
        self.kcv
    }

    /// Encrypts `data` in place as chunk `index` and returns its tag.
    pub(crate) fn seal(
        &self,
        header: &[u8],
        index: u32,
        last: bool,
        data: &mut [u8],
    ) -> Option<[u8; CHUNK_TAG_LEN]> {
        let nonce = chunk_nonce(&self.prefix, index, last);
        self.aead.seal(&nonce, header, data)
    }

    /// Checks chunk `index`'s tag and decrypts `data` in place; on failure `data` is zeroed
    /// (`GcmKey::open`), neither ciphertext nor plaintext.
    pub(crate) fn open(
        &self,
        header: &[u8],
        index: u32,
        last: bool,
        data: &mut [u8],
        tag: &[u8; CHUNK_TAG_LEN],
    ) -> bool {
        let nonce = chunk_nonce(&self.prefix, index, last);
        self.aead.open(&nonce, header, data, tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_keys_never_equal_the_log_working_key_for_the_same_bytes() {
        let key = Key::from_bytes([7; KEY_LEN]);
        let mut file_id = [0u8; FILE_ID_LEN];
        file_id[..8].copy_from_slice(&42u64.to_le_bytes());
        let file = file_key(&key, 1, &file_id);
        let log = key.for_log(42, 1);
        assert_ne!(&file[..], &log.bytes()[..]);
        let other = file_key(&key, 1, &[1; FILE_ID_LEN]);
        assert_ne!(&file[..], &other[..]);
    }

    #[test]
    fn a_chunk_opens_only_at_its_index_with_its_flag_and_header() {
        let cipher = FileCipher::new(
            &Key::from_bytes([1; KEY_LEN]),
            1,
            &[2; 16],
            [3; 7],
            "t".as_ref(),
        )
        .unwrap();
        let mut data = b"chunk".to_vec();
        let tag = cipher.seal(b"header", 4, false, &mut data).unwrap();
        let sealed = data.clone();
        for (header, index, last) in [
            (&b"header"[..], 5, false),
            (b"header", 4, true),
            (b"Header", 4, false),
        ] {
            data.copy_from_slice(&sealed);
            assert!(!cipher.open(header, index, last, &mut data, &tag));
            assert_eq!(data, [0; 5], "a failed check hands out nothing decrypted");
        }
        data.copy_from_slice(&sealed);
        assert!(cipher.open(b"header", 4, false, &mut data, &tag));
        assert_eq!(data, b"chunk");
    }
}
