//! AES-256-GCM sealing of a perrecord-gcm record: the stored payload is the ciphertext
//! followed by a [`TAG_LEN`]-byte tag, the nonce is the IV's first 12 bytes and the associated
//! data is [`format::auth_aad`] (log id, key id, stored length, kind, flags, mode code, the
//! log's geometry from format version 5 on, LSN).
//! The GCM itself is `crate::aead`'s.

use crate::aead::NONCE_LEN;
use crate::crypto::{IV_LEN, Keys};
use crate::error::{Error, Result};
use crate::format::{self, AAD_LEN, TAG_LEN};

fn nonce(iv: &[u8; IV_LEN]) -> [u8; NONCE_LEN] {
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&iv[..NONCE_LEN]);
    nonce
}

/// Encrypts `stored` (the payload, then [`TAG_LEN`] bytes of room) in place and writes the tag
/// over `aad` into the room.
pub(super) fn seal(
    keys: &Keys,
    (key_id, iv): (u32, &[u8; IV_LEN]),
    aad: &[u8; AAD_LEN],
    stored: &mut [u8],
) -> Result<()> {
    let gcm = keys.gcm(key_id)?;
    let (body, tag_room) = stored.split_at_mut(stored.len() - TAG_LEN);
    let len = body.len();
    let tag = gcm
        .seal(&nonce(iv), aad, body)
        .ok_or(Error::RecordTooLarge {
            len,
            max: format::MAX_PAYLOAD,
        })?;
    tag_room.copy_from_slice(&tag);
    Ok(())
}

/// Checks the tag at the end of `stored` over `aad` and the ciphertext, then decrypts the
/// ciphertext before it in place, returning its length; the tag's bytes stay where they were.
/// `Ok(None)` when the tag does not match (the ciphertext is then zeroed, not decrypted) or
/// there is no room for one (`stored` left as it was).
pub(super) fn open_in_place(
    keys: &Keys,
    (key_id, iv): (u32, &[u8; IV_LEN]),
    aad: &[u8; AAD_LEN],
    stored: &mut [u8],
) -> Result<Option<usize>> {
    let gcm = keys.gcm(key_id)?;
    let Some(body_len) = stored.len().checked_sub(TAG_LEN) else {
        return Ok(None);
    };
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&stored[body_len..]);
    let body = &mut stored[..body_len];
    Ok(gcm.open(&nonce(iv), aad, body, &tag).then_some(body_len))
}
