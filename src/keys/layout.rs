//! The key store's byte layout (docs/FORMAT.md, "Key store file"): encoding and checked
//! decoding. Pure data: no I/O, nothing unwrapped.

/// First 8 bytes of a key store file.
pub const STORE_MAGIC: [u8; 8] = *b"WCKEYSTR";
/// Key store format version written by this build. Version 1 (no authentication of the
/// listing) is still read, and rewritten as this version at the store's next write; others are
/// refused.
pub const STORE_VERSION: u32 = 2;
/// The first version, read for compatibility.
pub(super) const STORE_VERSION_1: u32 = 1;
/// Nonce of the store's authentication tag.
pub(super) const AUTH_NONCE_LEN: usize = 12;
/// The store's authentication tag (AES-256-GCM over no plaintext, the body as associated data).
pub(super) const AUTH_TAG_LEN: usize = 16;
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

/// What authenticates a version 2 store: the wrapped authentication key and the tag's nonce.
pub(super) struct AuthHeader<'a> {
    pub(super) wrapped_key: &'a [u8],
    pub(super) nonce: [u8; AUTH_NONCE_LEN],
}

/// The stored form up to (not including) the authentication tag; layout in docs/FORMAT.md.
/// [`finish`] appends the tag, computed over these bytes, and the checksum.
pub(super) fn encode_body<'a>(
    kek_id: &str,
    generation: u64,
    auth: &AuthHeader<'_>,
    entries: impl ExactSizeIterator<Item = (&'a KeyInfo, &'a [u8])>,
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&STORE_MAGIC);
    out.extend_from_slice(&STORE_VERSION.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.push(kek_id.len() as u8);
    out.extend_from_slice(kek_id.as_bytes());
    out.extend_from_slice(&(auth.wrapped_key.len() as u16).to_le_bytes());
    out.extend_from_slice(auth.wrapped_key);
    out.extend_from_slice(&auth.nonce);
    for (info, wrapped) in entries {
        out.extend_from_slice(&info.id.to_le_bytes());
        out.push(info.state.code());
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&info.created.to_le_bytes());
        out.extend_from_slice(&info.fingerprint);
        out.extend_from_slice(&(wrapped.len() as u16).to_le_bytes());
        out.extend_from_slice(wrapped);
    }
    out
}

/// Appends the authentication tag and the checksum over everything before it.
pub(super) fn finish(mut body: Vec<u8>, tag: [u8; AUTH_TAG_LEN]) -> Vec<u8> {
    body.extend_from_slice(&tag);
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// What authenticates a decoded version 2 store, to be checked with the KEK.
pub(super) struct Authentication {
    pub(super) wrapped_key: Vec<u8>,
    pub(super) nonce: [u8; AUTH_NONCE_LEN],
    pub(super) tag: [u8; AUTH_TAG_LEN],
    /// The bytes the tag covers: every byte before it.
    pub(super) covered: Vec<u8>,
}

pub(super) struct Decoded {
    pub(super) version: u32,
    pub(super) kek_id: String,
    pub(super) generation: u64,
    pub(super) entries: Vec<(KeyInfo, Vec<u8>)>,
    /// `None` for a version 1 store, which has no authentication of its own.
    pub(super) auth: Option<Authentication>,
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
    if version != STORE_VERSION && version != STORE_VERSION_1 {
        return Err(format!(
            "key store version {version} is not supported (this build reads versions \
             {STORE_VERSION_1} and {STORE_VERSION})"
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
    let mut auth = None;
    if version == STORE_VERSION {
        let alen = u16::from_le_bytes(c.array()?) as usize;
        if alen == 0 || alen > MAX_WRAPPED_LEN {
            return Err(format!(
                "impossible wrapped authentication key length {alen}"
            ));
        }
        let wrapped_key = c.take(alen)?.to_vec();
        let nonce = c.array::<AUTH_NONCE_LEN>()?;
        if c.0.len() < AUTH_TAG_LEN {
            return Err("truncated".into());
        }
        let covered = body.len() - AUTH_TAG_LEN;
        let mut tag = [0u8; AUTH_TAG_LEN];
        tag.copy_from_slice(&body[covered..]);
        c.0 = &c.0[..c.0.len() - AUTH_TAG_LEN];
        auth = Some(Authentication {
            wrapped_key,
            nonce,
            tag,
            covered: body[..covered].to_vec(),
        });
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
        version,
        kek_id,
        generation,
        entries,
        auth,
    })
}
