//! Key management: data keys, the raw key ring, KEK providers, the key store and rotation.
//!
//! * `ring`: [`Key`] and [`KeyRing`], the data keys as the log uses them, and the raw key ring
//!   text file for embedders who manage data keys themselves.
//! * `provider`: the [`KeyProvider`] trait and the built-in KEK sources.
//! * `store`: the [`KeyStore`] file, data keys stored only wrapped under the KEK; `layout`
//!   its byte layout, `store_auth` its authentication.
//!
//! The keystream itself and the per-log working keys are in `crypto`.

mod layout;
mod provider;
mod ring;
mod store;
mod store_auth;

use std::path::Path;
use std::time::Duration;

use crate::error::Error;

pub use layout::{KeyInfo, KeyState, STORE_MAGIC, STORE_VERSION};
pub use provider::{
    DEFAULT_COMMAND_TIMEOUT, Kek, KekCommand, KekFile, KekFormat, KeyProvider, LOCAL_WRAP_LEN,
    PASSPHRASE_COST, PassphraseKek, ProviderSpec,
};
pub use ring::{Key, KeyRing};
pub(crate) use ring::{parent_dir, temp_name};
pub use store::KeyStore;

/// When a live log rotates its data key by itself (see [`crate::Config::rotation`]).
/// Either limit, whichever comes first; `None` disables it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Rotate after this many bytes of log were written under one key.
    pub max_bytes: Option<u64>,
    /// Rotate after a key was active this long (checked on append).
    pub max_age: Option<Duration>,
}

/// An error about the key store file at `path` (its store, its authentication).
fn store_error(path: &Path, reason: &str) -> Error {
    Error::KeyStore {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}
