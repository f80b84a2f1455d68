//! Keys, the key ring, the IV source and the AES-256-CTR keystream.
//!
//! Everything cryptographic lives here so that it can be read in one sitting:
//!
//! * [`Key`]: 32 key bytes in zeroizing memory; `Debug` never shows them.
//! * [`KeyRing`]: the keys a log may use, by id; the last one is active.
//! * [`Keys`]: the ring with every AES-256 key schedule expanded once, shared by all threads.
//! * [`IvSource`]: hands out counter blocks that are never reused under one key.
//!
//! The IV scheme (argued in docs/SECURITY.md): a counter block is 128 bits, big-endian,
//! `prefix (64) || sequence (32) || block (32)`. The prefix is drawn from the OS at every open
//! (and again after 2^32 sequences), the sequence numbers records (perrecord) or page writes
//! (pagelevel) within one prefix, and the block counter numbers 16-byte blocks inside one
//! record or page, so each sealed unit owns 2^32 blocks (64 GiB), far more than a record or
//! page may hold. The LSN plays no part: rewriting the same position always uses a new IV.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use aes::Aes256;
use cipher::{InnerIvInit, KeyInit, StreamCipherCore};
use parking_lot::Mutex;
use zeroize::{Zeroize, Zeroizing};

use crate::aead::GcmKey;
use crate::error::{Error, Result};

/// Length of an AES-256 key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of an IV (a full 128-bit counter block).
pub const IV_LEN: usize = 16;
/// Length of a key check value.
pub const KCV_LEN: usize = 8;

type Aes256CtrCore<'a> = ctr::CtrCore<&'a Aes256, ctr::flavors::Ctr128BE>;

/// One AES-256 key. The bytes are wiped when the key is dropped and never printed.
#[derive(Clone)]
pub struct Key(Zeroizing<[u8; KEY_LEN]>);

impl Key {
    /// Draws a fresh key from the operating system's random source.
    pub fn generate() -> Result<Key> {
        let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
        getrandom::fill(bytes.as_mut()).map_err(|e| Error::RandomSource {
            what: "a key",
            reason: e.to_string(),
        })?;
        Ok(Key(bytes))
    }

    /// Wraps key bytes the caller obtained elsewhere (a KMS, an HSM, a test vector).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Key {
        let mut wrapped = Zeroizing::new([0u8; KEY_LEN]);
        wrapped.copy_from_slice(&bytes);
        let mut bytes = bytes;
        bytes.zeroize();
        Key(wrapped)
    }

    /// The key check value: the first 8 bytes of AES-256 applied to a fixed domain block.
    ///
    /// It identifies a key without revealing it, so a wrong key is reported as a wrong key.
    pub fn check_value(&self) -> [u8; KCV_LEN] {
        check_value(&Aes256::new((&*self.0).into()))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key(kcv {})", hex_string(&self.check_value()))
    }
}

/// The fixed block whose encryption is the key check value. Its prefix is not a counter
/// prefix that [`IvSource`] can draw in practice (a 2^-64 chance per open; see SECURITY.md).
const KCV_BLOCK: [u8; 16] = *b"walcrypt key kcv";

fn check_value(aes: &Aes256) -> [u8; KCV_LEN] {
    use cipher::BlockCipherEncrypt;
    let mut block = KCV_BLOCK.into();
    aes.encrypt_block(&mut block);
    let mut kcv = [0u8; KCV_LEN];
    kcv.copy_from_slice(&block[..KCV_LEN]);
    kcv
}

pub(crate) fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The keys a log may use, each under a numeric id (1, 2, ...). The last key added is active:
/// new records (or pages) are encrypted with it; older ids stay for reading old log.
///
/// Key file format: UTF-8 text, one key per line as `<key_id> <64 hex digits>`, blank lines
/// and lines starting with `#` ignored; the last key line is the active key. Files are written
/// with mode 0600.
#[derive(Clone, Default)]
pub struct KeyRing {
    keys: Vec<(u32, Key)>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("ids", &self.ids())
            .field("active", &self.active_id())
            .finish()
    }
}

impl KeyRing {
    /// A ring with no keys (valid only for plaintext logs and for readers that want headers).
    pub fn empty() -> KeyRing {
        KeyRing::default()
    }

    /// A ring with one fresh random key, id 1.
    pub fn generate() -> Result<KeyRing> {
        Ok(KeyRing {
            keys: vec![(1, Key::generate()?)],
        })
    }

    /// Adds `key` under `id` and makes it active. Ids must be unique and non-zero.
    pub fn add(&mut self, id: u32, key: Key) -> Result<()> {
        if id == 0 {
            return Err(key_ring_error("key id 0 is reserved for unencrypted data"));
        }
        if self.get(id).is_some() {
            return Err(key_ring_error(&format!(
                "key id {id} is already in the ring"
            )));
        }
        self.keys.push((id, key));
        Ok(())
    }

    /// Adds a fresh random key with the next id and makes it active. Returns the new id.
    pub fn rotate(&mut self) -> Result<u32> {
        let next = self
            .keys
            .iter()
            .map(|(id, _)| *id)
            .max()
            .unwrap_or(0)
            .checked_add(1)
            .ok_or_else(|| key_ring_error("key ids exhausted"))?;
        self.add(next, Key::generate()?)?;
        Ok(next)
    }

    /// The key with `id`, if the ring holds it.
    pub fn get(&self, id: u32) -> Option<&Key> {
        self.keys.iter().find(|(k, _)| *k == id).map(|(_, key)| key)
    }

    /// The id of the active key (the last one added), if any.
    pub fn active_id(&self) -> Option<u32> {
        self.keys.last().map(|(id, _)| *id)
    }

    /// All key ids in the order they were added.
    pub fn ids(&self) -> Vec<u32> {
        self.keys.iter().map(|(id, _)| *id).collect()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when the ring holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Loads a key file (format in the type's docs and docs/FORMAT.md).
    ///
    /// A file readable by group or others is still loaded; the caller can check
    /// [`KeyRing::file_is_private`] and warn.
    pub fn load(path: impl AsRef<Path>) -> Result<KeyRing> {
        let path = path.as_ref();
        let text = Zeroizing::new(
            fs::read_to_string(path).map_err(|e| Error::io("read key file", path, e))?,
        );
        Self::parse(&text).map_err(|(line, reason)| Error::KeyFile {
            path: path.to_path_buf(),
            line,
            reason,
        })
    }

    fn parse(text: &str) -> std::result::Result<KeyRing, (usize, String)> {
        let mut ring = KeyRing::empty();
        for (n, line) in text.lines().enumerate() {
            let line_no = n + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(id), Some(hex), None) = (fields.next(), fields.next(), fields.next()) else {
                return Err((line_no, "expected `<key_id> <64 hex digits>`".into()));
            };
            let id: u32 = id
                .parse()
                .map_err(|_| (line_no, format!("key id `{id}` is not a number")))?;
            let key = parse_hex_key(hex).map_err(|reason| (line_no, reason))?;
            ring.add(id, key).map_err(|e| match e {
                Error::KeyFile { reason, .. } => (line_no, reason),
                other => (line_no, other.to_string()),
            })?;
        }
        if ring.is_empty() {
            return Err((0, "the file holds no key".into()));
        }
        Ok(ring)
    }

    /// Writes the ring to `path` with mode 0600, replacing the file atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let mut text = Zeroizing::new(String::from(
            "# walcrypt key ring: <key_id> <64 hex digits>; the last key is active\n",
        ));
        for (id, key) in &self.keys {
            text.push_str(&id.to_string());
            text.push(' ');
            let hex = Zeroizing::new(hex_string(key.0.as_ref()));
            text.push_str(&hex);
            text.push('\n');
        }
        let tmp = path.with_extension("tmp-keyring");
        let write = || -> std::io::Result<()> {
            let mut file = open_private(&tmp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            Error::io("write key file", path, e)
        })
    }

    /// True when the key file is readable by its owner only (no group or other bits).
    pub fn file_is_private(path: impl AsRef<Path>) -> Result<bool> {
        use std::os::unix::fs::PermissionsExt;
        let path = path.as_ref();
        let meta = fs::metadata(path).map_err(|e| Error::io("stat key file", path, e))?;
        Ok(meta.permissions().mode() & 0o077 == 0)
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, &Key)> {
        self.keys.iter().map(|(id, key)| (*id, key))
    }
}

fn open_private(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

fn key_ring_error(reason: &str) -> Error {
    Error::KeyFile {
        path: Default::default(),
        line: 0,
        reason: reason.into(),
    }
}

fn parse_hex_key(hex: &str) -> std::result::Result<Key, String> {
    if hex.len() != KEY_LEN * 2 {
        return Err(format!(
            "a key is {} hex digits, this one has {}",
            KEY_LEN * 2,
            hex.len()
        ));
    }
    let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        match (digit(pair[0]), digit(pair[1])) {
            (Some(hi), Some(lo)) => bytes[i] = (hi * 16 + lo) as u8,
            _ => return Err(format!("key has a non-hex digit near position {}", i * 2)),
        }
    }
    Ok(Key(bytes))
}

/// A key ring with every key schedule expanded once, ready for many threads.
pub(crate) struct Keys {
    expanded: Vec<(u32, Aes256, [u8; KCV_LEN])>,
    /// The AES-256-GCM state of each key (perrecord-gcm), over the same key schedule.
    gcm: Vec<(u32, GcmKey)>,
    active: Option<u32>,
}

impl Keys {
    pub(crate) fn new(ring: &KeyRing) -> Keys {
        let expanded = ring
            .entries()
            .map(|(id, key)| {
                let aes = Aes256::new((&*key.0).into());
                let kcv = check_value(&aes);
                (id, aes, kcv)
            })
            .collect::<Vec<_>>();
        let gcm = expanded
            .iter()
            .map(|(id, aes, _)| (*id, GcmKey::new(aes)))
            .collect();
        Keys {
            expanded,
            gcm,
            active: ring.active_id(),
        }
    }

    /// The AES-256-GCM state of key `key_id`.
    pub(crate) fn gcm(&self, key_id: u32) -> Result<&GcmKey> {
        self.gcm
            .iter()
            .find(|(k, _)| *k == key_id)
            .map(|(_, gcm)| gcm)
            .ok_or(Error::MissingKey(key_id))
    }

    pub(crate) fn active(&self) -> Option<u32> {
        self.active
    }

    /// `(id, check value)` of every key.
    pub(crate) fn check_values(&self) -> Vec<(u32, [u8; KCV_LEN])> {
        self.expanded
            .iter()
            .map(|(id, _, kcv)| (*id, *kcv))
            .collect()
    }

    pub(crate) fn check_value(&self, id: u32) -> Option<[u8; KCV_LEN]> {
        self.expanded
            .iter()
            .find(|(k, _, _)| *k == id)
            .map(|(_, _, kcv)| *kcv)
    }

    /// XORs the AES-256-CTR keystream for (`key_id`, `iv`) into `data`.
    pub(crate) fn apply_keystream(
        &self,
        key_id: u32,
        iv: &[u8; IV_LEN],
        data: &mut [u8],
    ) -> Result<()> {
        let aes = self
            .expanded
            .iter()
            .find(|(k, _, _)| *k == key_id)
            .map(|(_, aes, _)| aes)
            .ok_or(Error::MissingKey(key_id))?;
        apply_keystream(aes, iv, data);
        Ok(())
    }
}

/// AES-256-CTR with a 128-bit big-endian counter, starting at `iv`, over a shared key schedule.
///
/// It drives the CTR core directly: `StreamCipherCoreWrapper` (the `StreamCipher` type) keeps
/// a keystream buffer for calls that continue mid-block, which one-shot use never makes, and
/// setting it up and wiping it cost as much as encrypting a 64-byte record (2× the throughput
/// at 16–64 B, 1.5× at 256 B; docs/BENCHMARKS.md, "Cipher"). The last partial block goes
/// through a stack block that holds only that block's output and unused keystream.
pub(crate) fn apply_keystream(aes: &Aes256, iv: &[u8; IV_LEN], data: &mut [u8]) {
    let core = Aes256CtrCore::inner_iv_init(aes, iv.into());
    // Panics only if the counter would wrap before the data ends, which a 128-bit counter
    // that starts at zero cannot (the IV is the nonce; `remaining_blocks` is unbounded).
    core.apply_keystream_partial(data.into());
}

/// Applies the AES-256-CTR keystream of `key` and `iv` to `data`, expanding the key schedule
/// for this one call. For tests, benchmarks and tools; the log itself expands each key once.
pub fn ctr_apply_keystream(key: &Key, iv: &[u8; IV_LEN], data: &mut [u8]) {
    let aes = Aes256::new((&*key.0).into());
    apply_keystream(&aes, iv, data);
}

/// Hands out IVs (counter blocks) that never repeat under one key; see the module docs.
pub(crate) struct IvSource {
    /// Next sequence number; bits 32.. select the prefix epoch.
    next: AtomicU64,
    first_prefix: u64,
    /// Prefixes for epochs after the first, drawn on demand (after 2^32 IVs in one open).
    later: Mutex<Vec<u64>>,
}

impl IvSource {
    pub(crate) fn new() -> Result<IvSource> {
        Ok(IvSource {
            next: AtomicU64::new(0),
            first_prefix: random_u64("an IV prefix")?,
            later: Mutex::new(Vec::new()),
        })
    }

    /// The next IV. The block counter (low 32 bits) starts at zero.
    pub(crate) fn next_iv(&self) -> Result<[u8; IV_LEN]> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let epoch = n >> 32;
        let prefix = if epoch == 0 {
            self.first_prefix
        } else {
            self.prefix_for_epoch(epoch)?
        };
        let mut iv = [0u8; IV_LEN];
        iv[..8].copy_from_slice(&prefix.to_be_bytes());
        iv[8..12].copy_from_slice(&(n as u32).to_be_bytes());
        Ok(iv)
    }

    #[cold]
    fn prefix_for_epoch(&self, epoch: u64) -> Result<u64> {
        let mut later = self.later.lock();
        let index = usize::try_from(epoch - 1).unwrap_or(usize::MAX);
        while later.len() <= index {
            later.push(random_u64("an IV prefix")?);
        }
        Ok(later[index])
    }
}

/// Draws a random `u64` from the OS; `what` names it in the error (`"an IV prefix"`).
pub(crate) fn random_u64(what: &'static str) -> Result<u64> {
    getrandom::u64().map_err(|e| Error::RandomSource {
        what,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ring_round_trips_through_text() {
        let mut ring = KeyRing::generate().unwrap();
        ring.rotate().unwrap();
        let mut text = String::new();
        for (id, key) in ring.entries() {
            text.push_str(&format!("{id} {}\n", hex_string(key.0.as_ref())));
        }
        let parsed = KeyRing::parse(&text).unwrap();
        assert_eq!(parsed.ids(), vec![1, 2]);
        assert_eq!(parsed.active_id(), Some(2));
        assert_eq!(
            parsed.get(2).unwrap().check_value(),
            ring.get(2).unwrap().check_value()
        );
    }

    #[test]
    fn key_file_errors_name_the_line() {
        let bad = "# c\n1 zz\n";
        assert_eq!(KeyRing::parse(bad).unwrap_err().0, 2);
        let dup = format!("1 {0}\n1 {0}\n", "ab".repeat(32));
        let (line, reason) = KeyRing::parse(&dup).unwrap_err();
        assert_eq!(line, 2);
        assert!(reason.contains("already"), "{reason}");
    }

    #[test]
    fn debug_never_shows_key_bytes() {
        let key = Key::from_bytes([0xab; 32]);
        let shown = format!(
            "{key:?} {:?}",
            KeyRing {
                keys: vec![(1, key.clone())]
            }
        );
        assert!(!shown.contains("abab"), "{shown}");
    }

    #[test]
    fn ivs_differ_in_sequence_and_share_the_open_prefix() {
        let src = IvSource::new().unwrap();
        let a = src.next_iv().unwrap();
        let b = src.next_iv().unwrap();
        assert_ne!(a, b);
        assert_eq!(a[..8], b[..8]);
        assert_eq!(a[12..], [0; 4]);
        let other = IvSource::new().unwrap();
        assert_ne!(other.next_iv().unwrap()[..8], a[..8]);
    }

    #[test]
    fn a_new_epoch_draws_a_new_prefix() {
        let src = IvSource::new().unwrap();
        src.next.store(u32::MAX as u64, Ordering::Relaxed);
        let last = src.next_iv().unwrap();
        let first_of_next = src.next_iv().unwrap();
        assert_ne!(last[..8], first_of_next[..8]);
        assert_eq!(first_of_next[8..12], [0; 4]);
    }
}
