//! The key store's own authentication (docs/FORMAT.md, "Key store file"; docs/SECURITY.md,
//! "Key store authentication"): a random key kept wrapped under the KEK, whose AES-256-GCM tag
//! covers every byte of the store before it, so states, generation and the set of entries
//! cannot change without the KEK. Also how errors describe a KEK without what derives from it.

use std::path::Path;

use super::layout::{AUTH_NONCE_LEN, AUTH_TAG_LEN, Decoded, MAX_WRAPPED_LEN};
use super::provider::KeyProvider;
use super::ring::Key;
use super::store_error;
use crate::aead::GcmKey;
use crate::error::{Error, Result};

/// The store's authentication key: random, made with the store (and again at a KEK rotation),
/// kept wrapped under the KEK in the file. Its tag covers every byte of the store before it.
#[derive(Clone)]
pub(super) struct AuthKey {
    pub(super) key: Key,
    pub(super) wrapped: Vec<u8>,
}

/// Checks a version 2 store's tag with its authentication key, unwrapped under the KEK; returns
/// that key, or `None` for a version 1 store (nothing to check).
pub(super) fn check_authentication(
    path: &Path,
    provider: &dyn KeyProvider,
    parsed: &Decoded,
) -> Result<Option<AuthKey>> {
    let Some(auth) = &parsed.auth else {
        return Ok(None);
    };
    let key = provider.unwrap(&auth.wrapped_key, &auth_aad(&parsed.kek_id))?;
    let cipher = GcmKey::new(key.bytes(), || {
        format!("the authentication key of key store {}", path.display())
    })?;
    if !cipher.open(&auth.nonce, &auth.covered, &mut [], &auth.tag) {
        return Err(store_error(
            path,
            "authentication failed: its key states, generation or entries were altered, or \
             it was assembled from pieces of other stores or generations",
        ));
    }
    Ok(Some(AuthKey {
        key,
        wrapped: auth.wrapped_key.clone(),
    }))
}

/// The tag over a store's `body` (AES-256-GCM, no plaintext, the body as associated data).
pub(super) fn store_tag(
    key: &Key,
    nonce: &[u8; AUTH_NONCE_LEN],
    body: &[u8],
) -> Option<[u8; AUTH_TAG_LEN]> {
    GcmKey::new(key.bytes(), String::new)
        .ok()?
        .seal(nonce, body, &mut [])
}

/// A fresh authentication key, wrapped under the provider's KEK.
pub(super) fn new_auth_key(provider: &dyn KeyProvider, kek_id: &str) -> Result<AuthKey> {
    let key = Key::generate()?;
    let wrapped = provider.wrap(&key, &auth_aad(kek_id))?;
    if wrapped.is_empty() || wrapped.len() > MAX_WRAPPED_LEN {
        return Err(Error::KeyProvider {
            provider: provider.name(),
            reason: format!(
                "wrapped a key into {} bytes; the store takes 1 to {MAX_WRAPPED_LEN}",
                wrapped.len()
            ),
        });
    }
    Ok(AuthKey { key, wrapped })
}

/// The associated data of the wrapped authentication key.
fn auth_aad(kek_id: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(64 + kek_id.len());
    aad.extend_from_slice(b"walcrypt key store v2 authentication key");
    aad.push(kek_id.len() as u8);
    aad.extend_from_slice(kek_id.as_bytes());
    aad
}

/// Why a provider's KEK is not the store's, without a fingerprint, salt or cost of either:
/// those are derived from secrets (a passphrase's salt and KEK fingerprint together let anyone
/// who reads the error test guesses offline). A KMS's key ids are named; a passphrase that
/// derives another KEK under the store's own salt and cost is simply wrong.
pub(super) fn kek_mismatch(stored: &str, supplied: &str, provider: &str) -> String {
    let same_derivation = match (stored.rsplit_once(':'), supplied.rsplit_once(':')) {
        (Some((a, _)), Some((b, _))) => {
            stored.starts_with("argon2id:") && a.strip_suffix(":sha256").is_some() && a == b
        }
        _ => false,
    };
    if same_derivation {
        return "wrong passphrase: the KEK it derives is not the one the store is wrapped under"
            .into();
    }
    let (stored, supplied) = (describe_kek_id(stored), describe_kek_id(supplied));
    format!(
        "the store is wrapped under another KEK ({stored}) than {provider} supplies ({supplied})"
    )
}

/// A KEK id as errors show it: a KMS's key id as it is; a built-in KEK's fingerprint or a
/// passphrase KEK's salt and cost never.
pub(super) fn describe_kek_id(id: &str) -> String {
    if id.starts_with("argon2id:") {
        "a KEK derived from a passphrase".into()
    } else if id.starts_with("sha256:") {
        "a local KEK".into()
    } else {
        format!("KEK {id}")
    }
}
