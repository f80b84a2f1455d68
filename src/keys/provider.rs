//! Key providers: what wraps and unwraps data keys under a key-encryption key (KEK).
//!
//! [`KeyProvider`] is the small trait an embedder implements to let its own KMS wrap and unwrap
//! data keys (the KEK then never leaves the KMS). The built-ins hold a KEK in memory and wrap
//! locally with AES-256-GCM: [`Kek`] (bytes the caller has), [`KekFile`] (a file, for
//! development and tests) and [`KekCommand`] (a program that prints the KEK, so any KMS
//! command-line client can supply it). No provider error repeats key material or a
//! command's output.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::ring::{Key, fingerprint, hex_string};
use crate::aead::GcmKey;
use crate::crypto::KEY_LEN;
use crate::error::{Error, Result};

/// Supplies the key-encryption key's operations to a [`crate::KeyStore`].
///
/// `wrap` must be authenticated: `unwrap` of altered bytes, or with other `aad`, fails (never
/// returns a different key). Implement it over a KMS's encrypt/decrypt (or wrap/unwrap) calls,
/// passing `aad` as the KMS's associated data or encryption context.
pub trait KeyProvider: Send + Sync {
    /// A short human name used in errors: `kek file /etc/wal.kek`, `command vault`. Never
    /// key material.
    fn name(&self) -> String;
    /// Names the KEK this provider wraps under (a KMS key id and version, or a fingerprint),
    /// stored in the key store so a store can say which KEK it needs. Never key material;
    /// at most 255 bytes of UTF-8.
    fn kek_id(&self) -> Result<String>;
    /// Wraps a data key, binding `aad` to it.
    fn wrap(&self, key: &Key, aad: &[u8]) -> Result<Vec<u8>>;
    /// Unwraps what [`KeyProvider::wrap`] returned for the same `aad`.
    fn unwrap(&self, wrapped: &[u8], aad: &[u8]) -> Result<Key>;
}

/// Length of a locally wrapped key: 12-byte nonce, 32-byte ciphertext, 16-byte GCM tag.
pub const LOCAL_WRAP_LEN: usize = 12 + KEY_LEN + 16;

/// A KEK held in memory; wraps with AES-256-GCM under a random 96-bit nonce per wrap
/// (a store holds a few keys and is rewritten rarely, far from GCM's random-nonce limits).
pub struct Kek {
    key: Key,
    name: String,
    /// What `kek_id` reports when it is more than the fingerprint (a passphrase KEK's salt and
    /// cost parameters, needed to derive it again).
    id: Option<String>,
}

impl Kek {
    /// A KEK from key bytes the caller obtained elsewhere; `name` appears in errors.
    pub fn new(key: Key, name: impl Into<String>) -> Kek {
        Kek {
            key,
            name: name.into(),
            id: None,
        }
    }

    /// A fresh random KEK.
    pub fn generate(name: impl Into<String>) -> Result<Kek> {
        Ok(Kek::new(Key::generate()?, name))
    }

    /// `sha256:` and 16 hex digits: SHA-256 over a domain label and the KEK, truncated. Names
    /// the KEK without revealing it.
    pub fn fingerprint(&self) -> String {
        format!(
            "sha256:{}",
            hex_string(&fingerprint(
                b"walcrypt kek fingerprint v1",
                self.key.bytes()
            ))
        )
    }

    fn cipher(&self) -> Result<GcmKey> {
        GcmKey::new(self.key.bytes(), || {
            format!("the KEK of key provider {}", self.name)
        })
    }

    fn error(&self, reason: &str) -> Error {
        Error::KeyProvider {
            provider: self.name.clone(),
            reason: reason.to_string(),
        }
    }
}

impl KeyProvider for Kek {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn kek_id(&self) -> Result<String> {
        Ok(self.id.clone().unwrap_or_else(|| self.fingerprint()))
    }

    fn wrap(&self, key: &Key, aad: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).map_err(|_| self.error("the OS random source failed"))?;
        let mut body = Zeroizing::new(*key.bytes());
        let tag = self
            .cipher()?
            .seal(&nonce, aad, body.as_mut_slice())
            .ok_or_else(|| self.error("AES-GCM refused to wrap"))?;
        let mut out = Vec::with_capacity(LOCAL_WRAP_LEN);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(body.as_ref());
        out.extend_from_slice(&tag);
        Ok(out)
    }

    fn unwrap(&self, wrapped: &[u8], aad: &[u8]) -> Result<Key> {
        if wrapped.len() != LOCAL_WRAP_LEN {
            return Err(self.error(&format!(
                "a wrapped key is {LOCAL_WRAP_LEN} bytes, this one has {}",
                wrapped.len()
            )));
        }
        let (nonce, rest) = wrapped.split_at(12);
        let (body, tag) = rest.split_at(KEY_LEN);
        let mut plain = Zeroizing::new([0u8; KEY_LEN]);
        plain.copy_from_slice(body);
        let mut nonce_bytes = [0u8; 12];
        nonce_bytes.copy_from_slice(nonce);
        let mut tag_bytes = [0u8; 16];
        tag_bytes.copy_from_slice(tag);
        if !self
            .cipher()?
            .open(&nonce_bytes, aad, plain.as_mut_slice(), &tag_bytes)
        {
            return Err(
                self.error("unwrap failed: wrong KEK, or the wrapped key or its entry was altered")
            );
        }
        Ok(Key::from_mut_bytes(&mut plain))
    }
}

/// Refuses 32 bytes of text taken for a raw key: a passphrase (with its newline, say), whose
/// strength is far below a 256-bit KEK's. 32 random bytes are all printable or whitespace with
/// probability (100/256)^32, about 1e-13, so no real key is refused.
fn refuse_text_as_raw_key(raw: &[u8]) -> std::result::Result<(), String> {
    if raw
        .iter()
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        return Err(
            "32 bytes of text, not a random key (a passphrase?): if these 32 bytes are \
             the KEK, write the same bytes as 64 hex digits (for example `xxd -p -c 64`); \
             otherwise derive the KEK from the passphrase (PassphraseKek)"
                .into(),
        );
    }
    Ok(())
}

/// Parses a KEK from a provider's output: 64 hex digits (surrounding whitespace allowed) or
/// exactly 32 raw bytes that are not all text (`refuse_text_as_raw_key`). The reason never
/// quotes the output.
fn parse_kek(output: &[u8]) -> std::result::Result<Key, String> {
    let trimmed = output.trim_ascii();
    if trimmed.len() == KEY_LEN * 2 {
        let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
        if super::ring::decode_hex(trimmed, &mut *bytes).is_ok() {
            return Ok(Key::from_mut_bytes(&mut bytes));
        }
    }
    if output.len() == KEY_LEN {
        refuse_text_as_raw_key(output)?;
        return Key::from_slice(output).ok_or_else(|| "impossible length".to_string());
    }
    Err(format!(
        "expected 64 hex digits or 32 raw bytes, got {} bytes of something else",
        output.len()
    ))
}

/// A KEK read from a file (64 hex digits, or 32 raw bytes), for development and tests.
pub struct KekFile;

impl KekFile {
    /// Reads the KEK in `path`. The file should be private (mode 0600).
    pub fn open(path: impl AsRef<Path>) -> Result<Kek> {
        let path = path.as_ref();
        let name = format!("kek file {}", path.display());
        let bytes = Zeroizing::new(
            crate::storage::read_regular(path, crate::storage::MAX_KEY_FILE)
                .map_err(|e| Error::io("read KEK file", path, e))?,
        );
        let key = parse_kek(&bytes).map_err(|reason| Error::KeyProvider {
            provider: name.clone(),
            reason,
        })?;
        Ok(Kek::new(key, name))
    }

    /// Writes a fresh random KEK to `path` (64 hex digits and a newline, mode 0600); fails if
    /// the file exists.
    pub fn create(path: impl AsRef<Path>) -> Result<Kek> {
        let path = path.as_ref();
        let key = Key::generate()?;
        let mut text = Zeroizing::new(String::with_capacity(KEY_LEN * 2 + 1));
        super::ring::push_hex(&mut text, key.bytes());
        text.push('\n');
        super::ring::write_private(path, text.as_bytes(), super::ring::Replace::No)?;
        Ok(Kek::new(key, format!("kek file {}", path.display())))
    }
}

/// A KEK printed by an external program (a KMS client, a secrets manager's CLI), the idea of
/// PostgreSQL's proposed `cluster_key_command`.
///
/// The program runs directly, without a shell, in a process group of its own, with no standard
/// input and its standard error discarded; it must print the KEK in the chosen [`KekFormat`]
/// (by default 64 hex digits or base64 of 32 bytes) and exit 0 within the timeout. The timeout
/// bounds the whole exchange, reading the output included: when it runs out, the program's
/// whole process group (children it started included) is killed. Failure, a hang or output of
/// the wrong form is an error naming the program; the output itself never appears in an error.
pub struct KekCommand;

/// How a KEK command prints the KEK.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KekFormat {
    /// Text: exactly 64 hex digits, or standard base64 (with its `=` padding) of exactly 32
    /// bytes, either optionally followed by one newline. Anything else is refused: a 128-bit
    /// key in hex or a 32-character passphrase is not taken for a 256-bit KEK.
    #[default]
    Text,
    /// Exactly 32 bytes, taken as the KEK as they are, with nothing after them. Choose it only
    /// for a program that prints a binary key: then any 32 bytes of output are a KEK.
    Raw,
}

/// Default time a KEK command may run.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Most bytes of output read from a KEK command.
const MAX_COMMAND_OUTPUT: u64 = 4096;

type Output = std::io::Result<Zeroizing<Vec<u8>>>;

impl KekCommand {
    /// Runs `program` with `args` and returns the KEK it printed as text ([`KekFormat::Text`]).
    pub fn run(program: impl AsRef<Path>, args: &[String], timeout: Duration) -> Result<Kek> {
        Self::run_with_format(program, args, timeout, KekFormat::Text)
    }

    /// Runs `program` with `args` and returns the KEK it printed in `format`.
    pub fn run_with_format(
        program: impl AsRef<Path>,
        args: &[String],
        timeout: Duration,
        format: KekFormat,
    ) -> Result<Kek> {
        use std::os::unix::process::CommandExt;
        let program = program.as_ref();
        let name = format!("command {}", program.display());
        let fail = |reason: String| Error::KeyProvider {
            provider: name.clone(),
            reason,
        };
        let deadline = Instant::now() + timeout;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| fail(format!("cannot start it: {e}")))?;
        let Some(stdout) = child.stdout.take() else {
            kill_all(&mut child);
            return Err(fail("its standard output could not be captured".into()));
        };
        // Read on a thread of its own, so that a process that keeps the output open (a
        // program's child left running) cannot hold this call past the deadline.
        let (sender, output) = std::sync::mpsc::sync_channel::<Output>(1);
        std::thread::spawn(move || {
            let mut out = Zeroizing::new(Vec::with_capacity(MAX_COMMAND_OUTPUT as usize));
            let read = stdout.take(MAX_COMMAND_OUTPUT).read_to_end(&mut out);
            let _ = sender.send(read.map(|_| out));
        });
        let killed = || {
            fail(format!(
                "it did not finish within {} ms and was killed with its process group",
                timeout.as_millis()
            ))
        };
        let status = match wait_until(&mut child, deadline) {
            Ok(Some(status)) => status,
            Ok(None) => {
                kill_all(&mut child);
                return Err(killed());
            }
            Err(e) => {
                kill_all(&mut child);
                return Err(fail(format!("waiting for it failed: {e}")));
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let output = match output.recv_timeout(left) {
            Ok(read) => read.map_err(|e| fail(format!("reading its output failed: {e}")))?,
            Err(_) => {
                // The program exited, but something it started holds its output open: that
                // process is alive, in the program's group, so the group id is still in use
                // and names no one else.
                kill_group(child.id());
                return Err(killed());
            }
        };
        if !status.success() {
            return Err(fail(format!("it failed ({status})")));
        }
        let key = parse_kek_output(&output, format)
            .map_err(|why| fail(format!("unusable output: {why}")))?;
        Ok(Kek::new(key, name.clone()))
    }
}

/// Parses a KEK command's output in `format`. The reason never quotes the output.
fn parse_kek_output(output: &[u8], format: KekFormat) -> std::result::Result<Key, String> {
    if format == KekFormat::Raw {
        return match output.len() {
            KEY_LEN => {
                refuse_text_as_raw_key(output)?;
                Key::from_slice(output).ok_or_else(|| "impossible length".to_string())
            }
            n => Err(format!("expected exactly 32 raw bytes, got {n} bytes")),
        };
    }
    let text = output.strip_suffix(b"\n").unwrap_or(output);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
    let parsed = match text.len() {
        64 => super::ring::decode_hex(text, &mut *bytes).is_ok(),
        44 => decode_base64_key(text, &mut bytes),
        _ => false,
    };
    if parsed {
        return Ok(Key::from_mut_bytes(&mut bytes));
    }
    Err(format!(
        "expected 64 hex digits or base64 of 32 bytes (and at most a newline), got {} bytes of \
         something else",
        output.len()
    ))
}

/// Decodes standard base64 of exactly 32 bytes (43 symbols and one `=`; the unused low bits of
/// the last symbol zero, so each key has one spelling). False for anything else.
fn decode_base64_key(text: &[u8], out: &mut [u8; KEY_LEN]) -> bool {
    fn value(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let Some((symbols, b"=")) = text.split_last_chunk::<1>() else {
        return false;
    };
    if symbols.len() != 43 {
        return false;
    }
    let mut acc: u32 = 0;
    let mut bits = 0;
    let mut at = 0;
    for &c in symbols {
        let Some(v) = value(c) else {
            return false;
        };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out[at] = (acc >> bits) as u8;
            at += 1;
            acc &= (1 << bits) - 1;
        }
    }
    at == KEY_LEN && acc == 0
}

/// Waits for `child` until `deadline`; `None` when it is still running then.
fn wait_until(
    child: &mut std::process::Child,
    deadline: Instant,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills a child that has not been reaped and its process group (while the child is
/// unreaped its id, which is the group's, cannot be reused), then reaps it.
fn kill_all(child: &mut std::process::Child) {
    kill_group(child.id());
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends SIGKILL to the process group `id` (a KEK command's, made with `process_group(0)`).
fn kill_group(id: u32) {
    let pid = i32::try_from(id)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// A KEK derived from a passphrase with Argon2id (RFC 9106).
///
/// The salt (16 random bytes) and the cost parameters are not secret: they are part of the KEK
/// id the key store records (`argon2id:m=<KiB>,t=<passes>,p=<lanes>:<salt hex>:<fingerprint>`),
/// so [`PassphraseKek::for_store`] derives the same KEK again from the passphrase alone. The
/// store's security is then the passphrase's: use a long one.
pub struct PassphraseKek;

/// Default Argon2id cost: 64 MiB of memory, 3 passes, 1 lane (RFC 9106's second recommended
/// setting, with one lane).
pub const PASSPHRASE_COST: (u32, u32, u32) = (64 * 1024, 3, 1);

impl PassphraseKek {
    /// A KEK from `passphrase` under a fresh random salt and the default cost, for creating a
    /// store or rotating a store's KEK to a passphrase.
    pub fn with_new_salt(passphrase: &[u8]) -> Result<Kek> {
        Self::with_cost(passphrase, PASSPHRASE_COST)
    }

    /// Like [`PassphraseKek::with_new_salt`] with an explicit cost `(memory KiB, passes, lanes)`.
    pub fn with_cost(passphrase: &[u8], cost: (u32, u32, u32)) -> Result<Kek> {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).map_err(|_| passphrase_error("the OS random source failed"))?;
        derive(passphrase, &salt, cost)
    }

    /// The KEK named by `kek_id`, derived from `passphrase` with the salt and cost the id
    /// records. [`PassphraseKek::for_store`] (with the key store) reads the id from a store.
    pub(super) fn for_kek_id(kek_id: &str, passphrase: &[u8]) -> Result<Kek> {
        let (salt, cost) = parse_passphrase_id(kek_id)
            .ok_or_else(|| passphrase_error("the store's KEK was not derived from a passphrase"))?;
        derive(passphrase, &salt, cost)
    }
}

const PASSPHRASE_NAME: &str = "passphrase (Argon2id)";

fn passphrase_error(reason: &str) -> Error {
    Error::KeyProvider {
        provider: PASSPHRASE_NAME.into(),
        reason: reason.into(),
    }
}

fn derive(passphrase: &[u8], salt: &[u8; 16], (m, t, p): (u32, u32, u32)) -> Result<Kek> {
    let params = argon2::Params::new(m, t, p, Some(KEY_LEN))
        .map_err(|e| passphrase_error(&format!("unusable cost m={m}, t={t}, p={p}: {e}")))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = Zeroizing::new([0u8; KEY_LEN]);
    argon
        .hash_password_into(passphrase, salt, out.as_mut_slice())
        .map_err(|e| passphrase_error(&format!("Argon2id failed: {e}")))?;
    let mut kek = Kek::new(Key::from_mut_bytes(&mut out), PASSPHRASE_NAME);
    kek.id = Some(format!(
        "argon2id:m={m},t={t},p={p}:{}:{}",
        hex_string(salt),
        kek.fingerprint()
    ));
    Ok(kek)
}

/// Salt and cost from `argon2id:m=..,t=..,p=..:<32 hex>:<fingerprint>`.
fn parse_passphrase_id(id: &str) -> Option<([u8; 16], (u32, u32, u32))> {
    let mut parts = id.strip_prefix("argon2id:")?.split(':');
    let (cost, salt_hex) = (parts.next()?, parts.next()?);
    let mut nums = cost
        .split(',')
        .map(|kv| kv.split_once('=').map(|(_, v)| v.parse::<u32>()));
    let (Some(Some(Ok(m))), Some(Some(Ok(t))), Some(Some(Ok(p)))) =
        (nums.next(), nums.next(), nums.next())
    else {
        return None;
    };
    if salt_hex.len() != 32 {
        return None;
    }
    let mut salt = [0u8; 16];
    super::ring::decode_hex(salt_hex.as_bytes(), &mut salt).ok()?;
    Some((salt, (m, t, p)))
}

/// Where a provider's configuration points, for tools: a KEK file or a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderSpec {
    /// A KEK file.
    File(PathBuf),
    /// A program and its arguments, with a timeout.
    Command {
        /// The program (run without a shell).
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// How long it may run.
        timeout: Duration,
    },
}

impl ProviderSpec {
    /// Builds the provider (reads the file or runs the command).
    pub fn provider(&self) -> Result<Kek> {
        match self {
            ProviderSpec::File(path) => KekFile::open(path),
            ProviderSpec::Command {
                program,
                args,
                timeout,
            } => KekCommand::run(program, args, *timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_is_bound_to_kek_and_aad() {
        let kek = Kek::generate("test").unwrap();
        let key = Key::generate().unwrap();
        let wrapped = kek.wrap(&key, b"id 1").unwrap();
        assert_eq!(wrapped.len(), LOCAL_WRAP_LEN);
        let back = kek.unwrap(&wrapped, b"id 1").unwrap();
        assert_eq!(back.bytes(), key.bytes());
        assert!(kek.unwrap(&wrapped, b"id 2").is_err());
        let other = Kek::generate("other").unwrap();
        assert!(other.unwrap(&wrapped, b"id 1").is_err());
        let mut flipped = wrapped.clone();
        flipped[20] ^= 1;
        assert!(kek.unwrap(&flipped, b"id 1").is_err());
    }

    #[test]
    fn a_kek_file_of_printable_text_is_not_taken_for_a_raw_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kek");
        std::fs::write(&path, b"correct horse battery staple 123").unwrap();
        let error = KekFile::open(&path).err().expect("a passphrase is refused");
        assert!(error.to_string().contains("not a random key"), "{error}");
        assert!(!error.to_string().contains("horse"), "{error}");
        // As `echo` writes it: 31 characters and a newline.
        std::fs::write(&path, b"correct horse battery staple 12\n").unwrap();
        let error = KekFile::open(&path)
            .err()
            .expect("a passphrase and its newline");
        assert!(error.to_string().contains("xxd"), "{error}");
        let mut raw = [0u8; 32];
        raw[0] = 0x01; // one byte that is not printable: taken as raw
        raw[1..].copy_from_slice(b"correct horse battery staple 12");
        std::fs::write(&path, raw).unwrap();
        assert!(KekFile::open(&path).is_ok());
    }

    #[test]
    fn a_passphrase_kek_is_derived_again_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let cheap = (64, 1, 1); // fast for a test; real stores use PASSPHRASE_COST
        let kek = PassphraseKek::with_cost(b"correct horse battery staple", cheap).unwrap();
        let id = kek.kek_id().unwrap();
        assert!(id.starts_with("argon2id:m=64,t=1,p=1:"), "{id}");
        let store = crate::KeyStore::create(&path, std::sync::Arc::new(kek)).unwrap();
        let again = PassphraseKek::for_store(&path, b"correct horse battery staple").unwrap();
        let opened = crate::KeyStore::open(&path, std::sync::Arc::new(again)).unwrap();
        assert_eq!(opened.ring().ids(), store.ring().ids());
        let wrong = PassphraseKek::for_store(&path, b"incorrect horse").unwrap();
        let err = crate::KeyStore::open(&path, std::sync::Arc::new(wrong)).unwrap_err();
        assert!(err.to_string().contains("wrong passphrase"), "{err}");
        assert!(!err.to_string().contains("horse"), "{err}");
    }

    #[test]
    fn kek_command_output_forms() {
        let hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
        let b64 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let expected: Vec<u8> = (0..32).collect();
        for text in [
            hex.to_string(),
            format!("{hex}\n"),
            b64.to_string(),
            format!("{b64}\n"),
            format!("{b64}\r\n"),
        ] {
            let key = parse_kek_output(text.as_bytes(), KekFormat::Text).unwrap();
            assert_eq!(key.bytes().as_slice(), expected.as_slice(), "{text:?}");
        }
        for bad in [
            &hex[..32],                                     // 128 bits in hex
            "correct horse battery staple!!!!",             // 32 characters
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=", // unused bits set
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",  // no padding
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh*=", // not base64
        ] {
            let why = parse_kek_output(bad.as_bytes(), KekFormat::Text).unwrap_err();
            assert!(!why.contains(&bad[..8]), "{why}");
        }
        assert!(parse_kek_output(format!("{hex}\n\n").as_bytes(), KekFormat::Text).is_err());
        assert!(parse_kek_output(format!(" {hex}").as_bytes(), KekFormat::Text).is_err());
        assert!(parse_kek_output(&[7u8; 32], KekFormat::Raw).is_ok());
        assert!(parse_kek_output(&[7u8; 33], KekFormat::Raw).is_err());
    }

    #[test]
    fn kek_output_forms() {
        assert!(parse_kek(format!("{}\n", "ab".repeat(32)).as_bytes()).is_ok());
        assert!(parse_kek(&[7u8; 32]).is_ok());
        let err = parse_kek(b"hello world").unwrap_err();
        assert!(!err.contains("hello"), "{err}");
    }
}
