//! AES-256-CTR sealing: the payload of a perrecord record under the IV in its header, and the
//! body of a pagelevel page under the IV in the page header. No tag: the record CRC is the only
//! check, and it is over the ciphertext.

use crate::crypto::{IV_LEN, Keys};
use crate::error::Result;

/// Encrypts or decrypts `data` in place with the keystream of (`key_id`, `iv`); the same call
/// seals and opens.
pub(crate) fn apply(keys: &Keys, key_id: u32, iv: &[u8; IV_LEN], data: &mut [u8]) -> Result<()> {
    keys.apply_keystream(key_id, iv, data)
}
