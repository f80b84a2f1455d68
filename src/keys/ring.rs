//! Data keys held by the caller: [`Key`], the raw [`KeyRing`] and its text file, and the
//! private, atomic file writes that every key file uses.
//!
//! Key bytes live in heap boxes that are wiped on drop, so moving a key or growing a ring never
//! leaves a copy behind; text forms of keys are built in pre-sized zeroizing buffers.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use zeroize::{Zeroize, Zeroizing};

use crate::error::{Error, Result};
use crate::format::KEY_LEN;

/// One AES-256 key. The bytes are wiped when the key is dropped and never printed.
///
/// The bytes sit in their own heap allocation: moving a `Key` (into a ring, a `Vec`, a
/// configuration) moves a pointer and leaves no copy of the key in freed memory.
#[derive(Clone)]
pub struct Key(Box<Zeroizing<[u8; KEY_LEN]>>);

impl Key {
    /// Draws a fresh key from the operating system's random source.
    pub fn generate() -> Result<Key> {
        let mut key = Key::zeroed();
        getrandom::fill(&mut key.0[..]).map_err(|e| Error::RandomSource {
            what: "a key",
            reason: e.to_string(),
        })?;
        Ok(key)
    }

    fn zeroed() -> Key {
        Key(Box::new(Zeroizing::new([0u8; KEY_LEN])))
    }

    /// Wraps key bytes the caller obtained elsewhere (a KMS, an HSM, a test vector).
    ///
    /// The array is taken by value, so the caller's own copy (and any copy the compiler made
    /// on the way) is the caller's to wipe; prefer [`Key::from_mut_bytes`], which wipes it.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Key {
        let mut bytes = bytes;
        Key::from_mut_bytes(&mut bytes)
    }

    /// Copies key bytes out of `bytes` and wipes `bytes`: no copy stays with the caller.
    pub fn from_mut_bytes(bytes: &mut [u8; KEY_LEN]) -> Key {
        let mut key = Key::zeroed();
        key.0.copy_from_slice(bytes);
        bytes.zeroize();
        key
    }

    /// Copies a key out of a slice of exactly [`KEY_LEN`] bytes (the caller wipes the slice).
    pub(crate) fn from_slice(bytes: &[u8]) -> Option<Key> {
        if bytes.len() != KEY_LEN {
            return None;
        }
        let mut key = Key::zeroed();
        key.0.copy_from_slice(bytes);
        Some(key)
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// An 8-byte fingerprint that names the key in key stores and listings: the start of
    /// SHA-256 over a domain label and the key. It reveals nothing usable about the key.
    pub fn fingerprint(&self) -> [u8; 8] {
        fingerprint(b"walcrypt data key fingerprint v1", self.bytes())
    }
}

pub(crate) fn fingerprint(label: &[u8], secret: &[u8]) -> [u8; 8] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(label);
    h.update(secret);
    let digest = h.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&digest[..8]);
    out
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key(fingerprint {})", hex_string(&self.fingerprint()))
    }
}

pub(crate) fn hex_string(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex(&mut s, bytes);
    s
}

/// Appends lower-case hex without temporary strings (used for key text: no stray copies).
pub(super) fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
}

/// Decodes `hex` (two digits per byte, either case) into `out`, which must be half its length;
/// on a non-hex digit, `Err` with the position of the pair that holds it. Writes only into
/// `out`, so key bytes stay in the caller's zeroizing memory.
pub(super) fn decode_hex(hex: &[u8], out: &mut [u8]) -> std::result::Result<(), usize> {
    debug_assert_eq!(hex.len(), out.len() * 2);
    for (i, (pair, byte)) in hex.chunks_exact(2).zip(out.iter_mut()).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        match (digit(pair[0]), digit(pair[1])) {
            (Some(hi), Some(lo)) => *byte = (hi * 16 + lo) as u8,
            _ => return Err(i * 2),
        }
    }
    Ok(())
}

/// The keys a log may use, each under a numeric id (1, 2, ...). The last key added is active:
/// new records (or pages) are encrypted with it; older ids stay for reading old log.
///
/// Key file format: UTF-8 text, one key per line as `<key_id> <64 hex digits>`, blank lines
/// and lines starting with `#` ignored; the last key line is the active key. Files are written
/// with mode 0600. A ring whose data keys should never sit on disk in the clear belongs in a
/// [`crate::KeyStore`] instead.
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
        let next = self.next_id()?;
        self.add(next, Key::generate()?)?;
        Ok(next)
    }

    pub(crate) fn next_id(&self) -> Result<u32> {
        self.keys
            .iter()
            .map(|(id, _)| *id)
            .max()
            .unwrap_or(0)
            .checked_add(1)
            .ok_or_else(|| key_ring_error("key ids exhausted"))
    }

    /// Removes the key with `id` (not the active one). Returns whether it was there.
    pub(crate) fn remove(&mut self, id: u32) -> bool {
        if self.active_id() == Some(id) {
            return false;
        }
        let before = self.keys.len();
        self.keys.retain(|(k, _)| *k != id);
        self.keys.len() != before
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
    /// [`KeyRing::file_is_private`] and warn. No error repeats the contents of a key line.
    pub fn load(path: impl AsRef<Path>) -> Result<KeyRing> {
        let path = path.as_ref();
        let bytes = Zeroizing::new(
            crate::storage::read_regular(path, crate::storage::MAX_KEY_FILE)
                .map_err(|e| Error::io("read key file", path, e))?,
        );
        let parsed = std::str::from_utf8(&bytes)
            .map_err(|_| (0, "the file is not UTF-8 text".to_string()))
            .and_then(Self::parse);
        parsed.map_err(|(line, reason)| Error::KeyFile {
            path: path.to_path_buf(),
            line,
            reason,
        })
    }

    pub(crate) fn parse(text: &str) -> std::result::Result<KeyRing, (usize, String)> {
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
            // Never echo a field: a line with its fields swapped puts the key first.
            let id: u32 = id.parse().map_err(|_| {
                let why = if id.len() == KEY_LEN * 2 {
                    "the first field is not a key id (are the fields swapped? expected `<key_id> <64 hex digits>`)"
                } else {
                    "the first field (key id) is not a decimal number"
                };
                (line_no, why.to_string())
            })?;
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

    /// The key file text, in a zeroizing buffer sized up front (no reallocation copies).
    fn to_text(&self) -> Zeroizing<String> {
        const HEADER: &str =
            "# walcrypt key ring: <key_id> <64 hex digits>; the last key is active\n";
        let mut text = Zeroizing::new(String::with_capacity(
            HEADER.len() + self.keys.len() * (11 + KEY_LEN * 2 + 1),
        ));
        text.push_str(HEADER);
        for (id, key) in &self.keys {
            text.push_str(&id.to_string());
            text.push(' ');
            push_hex(&mut text, key.bytes());
            text.push('\n');
        }
        text
    }

    /// Writes the ring to `path` with mode 0600, replacing the file atomically (a fresh
    /// temporary file created exclusively, fsync, rename, directory fsync).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let text = self.to_text();
        write_private(path.as_ref(), text.as_bytes(), Replace::Yes)
    }

    /// Like [`KeyRing::save`], but fails if `path` already exists (checked atomically: the
    /// file is linked into place, never renamed over another).
    pub fn save_new(&self, path: impl AsRef<Path>) -> Result<()> {
        let text = self.to_text();
        write_private(path.as_ref(), text.as_bytes(), Replace::No)
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

/// Whether [`write_private`] may replace an existing file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replace {
    Yes,
    No,
}

/// Writes `bytes` to `path` privately and atomically: a temporary file with a random name,
/// created exclusively (so never through a symlink or into a leftover file) with mode 0600
/// set on the handle, written, fsync'ed, then renamed (or, for `Replace::No`, hard-linked, which
/// fails if `path` exists) into place, and the directory fsync'ed.
pub(crate) fn write_private(path: &Path, bytes: &[u8], replace: Replace) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = temp_name(path)?;
    let dir = parent_dir(path);
    let write = || -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        match replace {
            Replace::Yes => fs::rename(&tmp, path)?,
            Replace::No => {
                fs::hard_link(&tmp, path)?;
                fs::remove_file(&tmp)?;
            }
        }
        fs::File::open(&dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io("write key file", path, e)
    })?;
    remove_stale_temporaries(path);
    Ok(())
}

/// How old a leftover temporary of a key file must be before [`write_private`] removes it: a
/// write holds its temporary for milliseconds, so one this old is a crash's leftover, not
/// another process's write in progress (which these files have no lock to tell apart).
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes temporaries of `path` (`.<name>.<16 hex>.tmp`) that a crash or a killed process
/// left beside it, once they are [`STALE_TEMPORARY`] old: they hold the whole file's text (a
/// raw key ring's keys in hex, a KEK), and would otherwise outlive the file itself and any
/// rotation or secure removal of it. Best effort: a temporary that cannot be read or removed
/// is left.
fn remove_stale_temporaries(path: &Path) {
    let dir = parent_dir(path);
    let Ok(entries) = fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let ours = is_temporary_of(path, &entry.file_name().to_string_lossy());
        let stale = || {
            let modified = entry.metadata().and_then(|m| m.modified()).ok()?;
            Some(modified.elapsed().ok()? >= STALE_TEMPORARY)
        };
        if ours && stale() == Some(true) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether `candidate`, a name in `path`'s directory, is one [`temp_name`] makes for `path`.
pub(crate) fn is_temporary_of(path: &Path, candidate: &str) -> bool {
    let Some(name) = path.file_name() else {
        return false;
    };
    candidate
        .strip_prefix(&format!(".{}.", name.to_string_lossy()))
        .and_then(|rest| rest.strip_suffix(".tmp"))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `.<name>.<16 random hex>.tmp` beside `path`.
pub(crate) fn temp_name(path: &Path) -> Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::Config(format!("{} is not a file path", path.display())))?;
    let nonce = getrandom::u64().map_err(|e| Error::RandomSource {
        what: "a temporary file name",
        reason: e.to_string(),
    })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{nonce:016x}.tmp"));
    Ok(parent_dir(path).join(tmp))
}

fn key_ring_error(reason: &str) -> Error {
    Error::KeyFile {
        path: PathBuf::new(),
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
    let mut key = Key::zeroed();
    decode_hex(hex.as_bytes(), key.0.as_mut_slice())
        .map_err(|at| format!("key has a non-hex digit near position {at}"))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_save_removes_stale_temporaries_of_its_file_and_keeps_fresh_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ring");
        let ring = KeyRing::generate().unwrap();
        let stale = dir.path().join(".ring.0123456789abcdef.tmp");
        let fresh = dir.path().join(".ring.fedcba9876543210.tmp");
        let other = dir.path().join(".other.0123456789abcdef.tmp");
        for file in [&stale, &fresh, &other] {
            fs::write(file, ring.to_text()).unwrap();
        }
        let old = std::time::SystemTime::now() - 2 * STALE_TEMPORARY;
        for file in [&stale, &other] {
            let handle = fs::OpenOptions::new().write(true).open(file).unwrap();
            handle.set_modified(old).unwrap();
        }
        ring.save(&path).unwrap();
        assert!(
            !stale.exists(),
            "a crash's leftover holding the keys is removed"
        );
        assert!(
            fresh.exists(),
            "a temporary that may be another write's in progress is kept"
        );
        assert!(
            other.exists(),
            "another file's temporary is not this save's to remove"
        );
        assert_eq!(KeyRing::load(&path).unwrap().ids(), ring.ids());
    }

    #[test]
    fn key_ring_round_trips_through_text() {
        let mut ring = KeyRing::generate().unwrap();
        ring.rotate().unwrap();
        let text = ring.to_text();
        let parsed = KeyRing::parse(&text).unwrap();
        assert_eq!(parsed.ids(), vec![1, 2]);
        assert_eq!(parsed.active_id(), Some(2));
        assert_eq!(
            parsed.get(2).unwrap().fingerprint(),
            ring.get(2).unwrap().fingerprint()
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
    fn from_mut_bytes_wipes_the_source() {
        let mut bytes = [0x5a; KEY_LEN];
        let key = Key::from_mut_bytes(&mut bytes);
        assert_eq!(bytes, [0; KEY_LEN]);
        assert_eq!(key.bytes(), &[0x5a; KEY_LEN]);
    }
}
