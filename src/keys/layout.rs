//! The key store's byte layout (docs/FORMAT.md, "Key store file"): encoding and checked
//! decoding. Pure data: no I/O, nothing unwrapped.

/// First 8 bytes of a key store file.
pub const STORE_MAGIC: [u8; 8] = *b"WCKEYSTR";
/// Key store format version written by this build; others are refused.
pub const STORE_VERSION: u32 = 1;
/// Fixed part of the header, before the KEK id.
pub(super) const HEADER_FIXED: usize = 25;
/// Fixed part of an entry, before the wrapped key.
pub(super) const ENTRY_FIXED: usize = 26;
/// Largest wrapped key accepted (a KMS blob with its metadata).
pub const MAX_WRAPPED_LEN: usize = 1024;
/// Largest key store file read.
pub(super) const MAX_STORE_LEN: u64 = 4 << 20;

/// What a data key in the store is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Encrypts new records and pages. Exactly one key is active.
    Active,
    /// Kept to read older log; encrypts nothing new.
    DecryptOnly,
}

impl KeyState {
    fn code(self) -> u8 {
        match self {
            KeyState::Active => 1,
            KeyState::DecryptOnly => 2,
        }
    }

    fn from_code(code: u8) -> Option<KeyState> {
        match code {
            1 => Some(KeyState::Active),
            2 => Some(KeyState::DecryptOnly),
            _ => None,
        }
    }

    /// `active` or `decrypt-only`.
    pub fn name(self) -> &'static str {
        match self {
            KeyState::Active => "active",
            KeyState::DecryptOnly => "decrypt-only",
        }
    }
}

/// What a listing shows of one data key: never the key bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// Key id (as records, pages and segment headers name it).
    pub id: u32,
    /// Active or decrypt-only.
    pub state: KeyState,
    /// Creation time, seconds since the Unix epoch.
    pub created: u64,
    /// [`crate::Key::fingerprint`] of the data key.
    pub fingerprint: [u8; 8],
}

/// The stored form; layout in docs/FORMAT.md.
pub(super) fn encode<'a>(
    kek_id: &str,
    generation: u64,
    entries: impl ExactSizeIterator<Item = (&'a KeyInfo, &'a [u8])>,
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&STORE_MAGIC);
    out.extend_from_slice(&STORE_VERSION.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.push(kek_id.len() as u8);
    out.extend_from_slice(kek_id.as_bytes());
    for (info, wrapped) in entries {
        out.extend_from_slice(&info.id.to_le_bytes());
        out.push(info.state.code());
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&info.created.to_le_bytes());
        out.extend_from_slice(&info.fingerprint);
        out.extend_from_slice(&(wrapped.len() as u16).to_le_bytes());
        out.extend_from_slice(wrapped);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

pub(super) struct Decoded {
    pub(super) kek_id: String,
    pub(super) generation: u64,
    pub(super) entries: Vec<(KeyInfo, Vec<u8>)>,
}

/// A little-endian cursor that reports a short read instead of panicking.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

pub(super) fn decode(bytes: &[u8]) -> std::result::Result<Decoded, String> {
    if bytes.len() < HEADER_FIXED + 4 {
        return Err(format!("truncated: {} bytes", bytes.len()));
    }
    if bytes[..8] != STORE_MAGIC {
        return Err("not a walcrypt key store (bad magic)".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let mut c = Cursor(&body[8..]);
    let version = u32::from_le_bytes(c.array()?);
    if version != STORE_VERSION {
        return Err(format!(
            "key store version {version} is not supported (this build reads version {STORE_VERSION})"
        ));
    }
    let expected = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let got = crc32c::crc32c(body);
    if expected != got {
        return Err(format!(
            "checksum mismatch (expected {expected:#010x}, got {got:#010x}): truncated or damaged"
        ));
    }
    let count = u32::from_le_bytes(c.array()?) as usize;
    let generation = u64::from_le_bytes(c.array()?);
    let kek_len = c.array::<1>()?[0] as usize;
    let kek_id = std::str::from_utf8(c.take(kek_len)?)
        .map_err(|_| "the KEK id is not UTF-8".to_string())?
        .to_string();
    if kek_id.is_empty() {
        return Err("empty KEK id".into());
    }
    if count == 0 || count > body.len() / ENTRY_FIXED {
        return Err(format!("impossible key count {count}"));
    }
    let mut entries: Vec<(KeyInfo, Vec<u8>)> = Vec::with_capacity(count);
    for _ in 0..count {
        let id = u32::from_le_bytes(c.array()?);
        let state = c.array::<1>()?[0];
        let state =
            KeyState::from_code(state).ok_or(format!("key id {id}: unknown state {state}"))?;
        if c.array::<3>()? != [0; 3] {
            return Err(format!("key id {id}: reserved bytes are not zero"));
        }
        let created = u64::from_le_bytes(c.array()?);
        let fingerprint = c.array::<8>()?;
        let wlen = u16::from_le_bytes(c.array()?) as usize;
        if wlen == 0 || wlen > MAX_WRAPPED_LEN {
            return Err(format!("key id {id}: impossible wrapped length {wlen}"));
        }
        let wrapped = c.take(wlen)?.to_vec();
        if id == 0 || entries.last().is_some_and(|(last, _)| last.id >= id) {
            return Err(format!("key id {id} is zero or out of order"));
        }
        entries.push((
            KeyInfo {
                id,
                state,
                created,
                fingerprint,
            },
            wrapped,
        ));
    }
    if !c.0.is_empty() {
        return Err(format!("{} unexpected bytes after the last key", c.0.len()));
    }
    let active = entries
        .iter()
        .filter(|(i, _)| i.state == KeyState::Active)
        .count();
    if active != 1 {
        return Err(format!("{active} active keys; a store has exactly one"));
    }
    Ok(Decoded {
        kek_id,
        generation,
        entries,
    })
}
