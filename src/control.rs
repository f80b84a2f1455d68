//! The control file (`walcrypt.control` in the log directory): the engine's last checkpoint
//! and the log's retention holds, in one small file that is only ever replaced whole (temp
//! file, fdatasync, rename, directory sync), as PostgreSQL keeps its checkpoint in pg_control
//! and its replication slots beside the WAL.
//!
//! The checkpoint's metadata is the engine's own (where its snapshot is, what it covers): in
//! an encrypted log it is sealed with AES-256-GCM under a key of its own, derived from the
//! active data key (HKDF-SHA256, salt `walcrypt control key v1`, info = log id || key id), so no
//! control key equals a log's working key. Positions and hold names stay in the clear: a tool
//! reads them without the key, like page headers. docs/FORMAT.md has the bytes.

use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::Lsn;
use crate::aead::GcmKey;
use crate::error::{Error, Result};
use crate::keys::{Key, KeyRing};
use crate::storage::Storage;

/// Name of the control file in the log directory.
pub const CONTROL_FILE: &str = "walcrypt.control";
/// Name of the control file while it is being replaced.
const CONTROL_TMP: &str = "walcrypt.control.tmp";
const MAGIC: &[u8; 8] = b"WALCTRL\0";
const VERSION: u32 = 1;
/// The most metadata a checkpoint carries: it names a snapshot, it is not one.
pub const MAX_CHECKPOINT_META: usize = 64 << 10;
/// The longest hold name, in bytes.
pub const MAX_HOLD_NAME: usize = 64;
/// The most holds a log keeps.
pub const MAX_HOLDS: usize = 256;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const CONTROL_KEY_SALT: &[u8] = b"walcrypt control key v1";

/// The engine's last checkpoint, as recorded by [`crate::Wal::checkpoint`]: replaying from
/// `lsn` after loading the state `meta` describes restores the engine.
#[derive(Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Where replay starts: every record the engine's state did not include starts here or
    /// later.
    pub lsn: Lsn,
    /// The engine's own bytes (for example the name of its snapshot file), decrypted.
    pub meta: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("lsn", &self.lsn)
            .field("meta_len", &self.meta.len())
            .finish()
    }
}

/// A named retention hold (a replication slot): [`crate::Wal::purge_before`] keeps every
/// segment from the one holding `lsn` on, unless the hold fell more than
/// [`crate::Config::max_hold_bytes`] behind the end of the log and was given up (`lost`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The hold's name (1 to 64 bytes of ASCII letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// The oldest position the holder still needs.
    pub lsn: Lsn,
    /// Whether the hold was given up for falling too far behind: it retains nothing, and
    /// its holder must be rebuilt from a snapshot.
    pub lost: bool,
}

/// What the control file holds, as the writer keeps it.
#[derive(Debug, Default)]
pub(crate) struct Control {
    pub(crate) generation: u64,
    pub(crate) checkpoint: Option<Checkpoint>,
    /// The key id the checkpoint's metadata is sealed under (0: stored in the clear).
    pub(crate) checkpoint_key: u32,
    /// The format version of the segment that held the checkpoint's LSN when it was taken,
    /// sealed into the metadata's associated data (`meta_aad`); `None` for metadata in the
    /// clear and for a checkpoint sealed by a build before 2026-12-03, without it.
    pub(crate) checkpoint_version: Option<u32>,
    pub(crate) holds: Vec<Hold>,
    /// The oldest checkpoint position the file on disk may hold (not stored): a control file
    /// write that failed after its rename may still become durable with the next directory
    /// sync, so purges keep what that checkpoint needs too, until a write succeeds.
    pub(crate) purge_floor: Option<Lsn>,
    /// The holds as the control file last written (or read, given up where their position
    /// was purged) holds them (not stored), and, after writes that failed since (each may
    /// have reached the disk after all), as each of those held them too: a hold's name may
    /// appear more than once. A hold moved since ([`Control::holds_unsaved`]) is where it was
    /// on disk: a purge saves it first, so that it never removes what a saved position needs
    /// (a restart brings the hold back there), and while that save fails it keeps what the
    /// lowest of the positions needs; a move behind the furthest is saved at once.
    pub(crate) saved_holds: Vec<Hold>,
}

fn control_error(path: &Path, reason: impl Into<String>) -> Error {
    Error::Control {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Checks a hold name: 1 to [`MAX_HOLD_NAME`] bytes of ASCII letters, digits, `-`, `_`, `.`.
pub(crate) fn check_hold_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_HOLD_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op: "hold",
            reason: format!(
                "hold name {name:?}: 1 to {MAX_HOLD_NAME} ASCII letters, digits, '-', '_' or '.'"
            ),
        })
    }
}

fn control_cipher(key: &Key, log_id: u64, key_id: u32) -> Result<GcmKey> {
    let mut info = [0u8; 12];
    info[..8].copy_from_slice(&log_id.to_le_bytes());
    info[8..].copy_from_slice(&key_id.to_le_bytes());
    let okm = crate::crypto::derive_key(CONTROL_KEY_SALT, key, &info);
    GcmKey::new(&okm, || {
        format!("the checkpoint metadata key of log {log_id:016x} under key id {key_id}")
    })
}

/// Associated data of a checkpoint's sealed metadata: it binds the metadata to its log, its
/// position, its key and (`WALCKPT2`) the format version of the segment that held the
/// position when the checkpoint was taken. `WALCKPT1`, without the version, is how builds
/// before 2026-12-03 sealed it; such metadata is still opened, and sealed again the same way.
fn meta_aad(log_id: u64, lsn: Lsn, key_id: u32, version: Option<u32>) -> Vec<u8> {
    let mut aad = Vec::with_capacity(32);
    aad.extend_from_slice(match version {
        Some(_) => b"WALCKPT2",
        None => b"WALCKPT1",
    });
    aad.extend_from_slice(&log_id.to_le_bytes());
    aad.extend_from_slice(&u64::from(lsn).to_le_bytes());
    aad.extend_from_slice(&key_id.to_le_bytes());
    if let Some(version) = version {
        aad.extend_from_slice(&version.to_le_bytes());
    }
    aad
}

/// The segment format versions a sealed checkpoint may name, newest first, then none (a
/// checkpoint sealed without one): what [`open_meta`] tries.
fn sealed_versions() -> impl Iterator<Item = Option<u32>> {
    (crate::format::OLDEST_READ_VERSION..=crate::format::FORMAT_VERSION)
        .rev()
        .map(Some)
        .chain([None])
}

impl Control {
    /// Whether a hold changed since the control file was last written or read.
    pub(crate) fn holds_unsaved(&self) -> bool {
        self.holds != self.saved_holds
    }

    /// The control file's bytes. `keys` seals the checkpoint's metadata under its active key
    /// (no key: in the clear).
    pub(crate) fn encode(&mut self, log_id: u64, keys: Option<&KeyRing>) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&log_id.to_le_bytes());
        out.extend_from_slice(&self.generation.to_le_bytes());
        match &self.checkpoint {
            None => {
                // No metadata length without a checkpoint (docs/FORMAT.md, "Control file").
                out.push(0);
                out.extend_from_slice(&[0u8; 8 + 4 + NONCE_LEN]);
            }
            Some(cp) => {
                out.push(1);
                out.extend_from_slice(&u64::from(cp.lsn).to_le_bytes());
                let (key_id, nonce, stored) = seal_meta(keys, log_id, cp, self.checkpoint_version)?;
                self.checkpoint_key = key_id;
                out.extend_from_slice(&key_id.to_le_bytes());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
                out.extend_from_slice(&stored);
            }
        }
        out.extend_from_slice(&(self.holds.len() as u16).to_le_bytes());
        for hold in &self.holds {
            out.push(hold.name.len() as u8);
            out.extend_from_slice(hold.name.as_bytes());
            out.extend_from_slice(&u64::from(hold.lsn).to_le_bytes());
            out.push(u8::from(hold.lost));
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Decodes a control file of log `log_id`; `keys` opens the checkpoint's metadata (without
    /// them a sealed checkpoint is an error naming its key id). In an `encrypted` log (every
    /// mode but plaintext) a checkpoint's metadata is always sealed, so one stored in the clear
    /// (key id 0) is refused: only someone who wrote the file without the key makes one, and it
    /// would choose where replay starts and what the engine restores.
    pub(crate) fn decode(
        path: &Path,
        bytes: &[u8],
        log_id: u64,
        keys: Option<&KeyRing>,
        encrypted: bool,
    ) -> Result<Control> {
        let bad = |why: &str| control_error(path, why);
        if bytes.len() < 4 {
            return Err(bad("truncated"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err(bad("checksum mismatch"));
        }
        let mut r = Fields { bytes: body, at: 0 };
        if r.take(8).ok_or_else(|| bad("truncated"))? != MAGIC {
            return Err(bad("not a walcrypt control file (bad magic)"));
        }
        let version = r.u32().ok_or_else(|| bad("truncated"))?;
        if version != VERSION {
            return Err(bad(&format!(
                "format version {version}, this build reads {VERSION}"
            )));
        }
        let file_log = r.u64().ok_or_else(|| bad("truncated"))?;
        if file_log != log_id {
            return Err(bad(&format!(
                "belongs to log {file_log:016x}, the segments to log {log_id:016x}"
            )));
        }
        let generation = r.u64().ok_or_else(|| bad("truncated"))?;
        let present = r.take(1).ok_or_else(|| bad("truncated"))?[0];
        let lsn = Lsn(r.u64().ok_or_else(|| bad("truncated"))?);
        let key_id = r.u32().ok_or_else(|| bad("truncated"))?;
        let nonce: [u8; NONCE_LEN] = r
            .take(NONCE_LEN)
            .and_then(|n| n.try_into().ok())
            .ok_or_else(|| bad("truncated"))?;
        let mut control = Control {
            generation,
            ..Control::default()
        };
        match present {
            0 => {
                // Builds before 2026-12-03 wrote a zero metadata length here too, which the
                // format does not have: such a file (holds without a checkpoint) is read as
                // what it says rather than refused, so its log opens.
                let at = r.at;
                match read_holds(&mut r, &bad) {
                    Ok(holds) => control.holds = holds,
                    Err(e) if body.get(at..at + 4) == Some(&[0u8; 4][..]) => {
                        r.at = at + 4;
                        control.holds = read_holds(&mut r, &bad).map_err(|_| e)?;
                    }
                    Err(e) => return Err(e),
                }
                return Ok(control);
            }
            1 => {
                let len = r.u32().ok_or_else(|| bad("truncated"))? as usize;
                if len > MAX_CHECKPOINT_META + TAG_LEN {
                    return Err(bad("checkpoint metadata longer than the format allows"));
                }
                let stored = r.take(len).ok_or_else(|| bad("truncated"))?;
                if encrypted && key_id == 0 {
                    return Err(bad(&format!(
                        "checkpoint at lsn {lsn} stored in the clear (key id 0) in an encrypted \
                         log, whose writers always seal it: written without the key"
                    )));
                }
                let (meta, version) = open_meta(path, keys, log_id, lsn, key_id, &nonce, stored)?;
                control.checkpoint = Some(Checkpoint { lsn, meta });
                control.checkpoint_key = key_id;
                control.checkpoint_version = version;
            }
            _ => return Err(bad("bad checkpoint flag")),
        }
        control.holds = read_holds(&mut r, &bad)?;
        Ok(control)
    }
}

/// The holds at `r` to the end of the control file's body (its CRC32C already taken off).
fn read_holds(r: &mut Fields<'_>, bad: &dyn Fn(&str) -> Error) -> Result<Vec<Hold>> {
    let holds = r.u16().ok_or_else(|| bad("truncated"))? as usize;
    if holds > MAX_HOLDS {
        return Err(bad("more holds than the format allows"));
    }
    let mut out = Vec::with_capacity(holds);
    for _ in 0..holds {
        let len = r.take(1).ok_or_else(|| bad("truncated"))?[0] as usize;
        let name = r.take(len).ok_or_else(|| bad("truncated"))?;
        let name = std::str::from_utf8(name)
            .ok()
            .filter(|n| check_hold_name(n).is_ok())
            .ok_or_else(|| bad("bad hold name"))?;
        let lsn = Lsn(r.u64().ok_or_else(|| bad("truncated"))?);
        let lost = match r.take(1).ok_or_else(|| bad("truncated"))?[0] {
            0 => false,
            1 => true,
            _ => return Err(bad("bad hold flag")),
        };
        out.push(Hold {
            name: name.to_string(),
            lsn,
            lost,
        });
    }
    if r.at != r.bytes.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(out)
}

fn seal_meta(
    keys: Option<&KeyRing>,
    log_id: u64,
    cp: &Checkpoint,
    version: Option<u32>,
) -> Result<(u32, [u8; NONCE_LEN], Vec<u8>)> {
    let Some((key_id, key)) =
        keys.and_then(|k| k.active_id().and_then(|id| Some((id, k.get(id)?))))
    else {
        return Ok((0, [0; NONCE_LEN], cp.meta.to_vec()));
    };
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| Error::RandomSource {
        what: "a checkpoint nonce",
        reason: e.to_string(),
    })?;
    let aad = meta_aad(log_id, cp.lsn, key_id, version);
    let mut sealed = Zeroizing::new(cp.meta.to_vec());
    let tag = control_cipher(key, log_id, key_id)?
        .seal(&nonce, &aad, sealed.as_mut_slice())
        .ok_or_else(|| Error::Config("checkpoint metadata could not be sealed".into()))?;
    let mut sealed = std::mem::take(&mut *sealed);
    sealed.extend_from_slice(&tag);
    Ok((key_id, nonce, sealed))
}

fn open_meta(
    path: &Path,
    keys: Option<&KeyRing>,
    log_id: u64,
    lsn: Lsn,
    key_id: u32,
    nonce: &[u8; NONCE_LEN],
    stored: &[u8],
) -> Result<(Zeroizing<Vec<u8>>, Option<u32>)> {
    if key_id == 0 {
        return Ok((Zeroizing::new(stored.to_vec()), None));
    }
    let key = keys
        .and_then(|k| k.get(key_id))
        .ok_or(Error::missing_key(key_id))?;
    let failed = || {
        control_error(
            path,
            format!(
                "checkpoint at lsn {lsn} failed authentication under key id {key_id} \
                 (altered, moved or from another log)"
            ),
        )
    };
    let Some(split) = stored.len().checked_sub(TAG_LEN) else {
        return Err(failed());
    };
    let (body, tag) = stored.split_at(split);
    let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| failed())?;
    let cipher = control_cipher(key, log_id, key_id)?;
    // The version is not stored beside the metadata: each one the build reads is tried (a tag
    // check each, at most four), and the one whose tag matches is the one sealed. A file
    // rewritten to another version's layout cannot carry a matching tag without the key.
    for version in sealed_versions() {
        let aad = meta_aad(log_id, lsn, key_id, version);
        let mut meta = Zeroizing::new(body.to_vec());
        if cipher.open(nonce, &aad, meta.as_mut_slice(), &tag) {
            return Ok((meta, version));
        }
    }
    Err(failed())
}

struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The control file's path in `dir`.
pub(crate) fn control_path(dir: &Path) -> PathBuf {
    dir.join(CONTROL_FILE)
}

/// Reads the control file of log `log_id` in `dir`; `None` when there is none. `encrypted`:
/// the log's mode is not plaintext ([`Control::decode`]).
pub(crate) fn read(
    storage: &dyn Storage,
    dir: &Path,
    log_id: u64,
    keys: Option<&KeyRing>,
    encrypted: bool,
) -> Result<Option<Control>> {
    let path = control_path(dir);
    let file = match storage.open(&path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open control file", &path, e)),
    };
    let len = file
        .file_len()
        .map_err(|e| Error::io("read control file", &path, e))?;
    let max = (MAX_CHECKPOINT_META + MAX_HOLDS * (MAX_HOLD_NAME + 10) + 256) as u64;
    if len > max {
        return Err(control_error(&path, "larger than the format allows"));
    }
    let mut bytes = vec![0u8; len as usize];
    let n = crate::storage::read_full(file.as_ref(), &mut bytes, 0)
        .map_err(|e| Error::io("read control file", &path, e))?;
    bytes.truncate(n);
    Control::decode(&path, &bytes, log_id, keys, encrypted).map(Some)
}

/// Replaces the control file in `dir` with `bytes`: temp file, fdatasync, rename, directory
/// sync. A crash leaves the old file or the new one, never a mix.
pub(crate) fn write(storage: &dyn Storage, dir: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(CONTROL_TMP);
    let path = control_path(dir);
    match storage.remove(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove stale control file", &tmp, e)),
    }
    let file = storage
        .create_private(&tmp)
        .map_err(|e| Error::io("create control file", &tmp, e))?;
    file.write_all_at(bytes, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| Error::io("write control file", &tmp, e))?;
    drop(file);
    storage
        .rename(&tmp, &path)
        .map_err(|e| Error::io("rename control file", &path, e))?;
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("sync directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Control {
        Control {
            generation: 7,
            checkpoint: Some(Checkpoint {
                lsn: Lsn(0x1234),
                meta: Zeroizing::new(b"snapshot-0007".to_vec()),
            }),
            checkpoint_key: 0,
            checkpoint_version: Some(crate::format::FORMAT_VERSION),
            holds: vec![Hold {
                name: "replica-1".into(),
                lsn: Lsn(0x1000),
                lost: false,
            }],
            purge_floor: None,
            saved_holds: Vec::new(),
        }
    }

    #[test]
    fn a_control_file_round_trips_sealed_and_in_the_clear() {
        let ring = KeyRing::generate().unwrap();
        for keys in [None, Some(&ring)] {
            let mut control = sample();
            let bytes = control.encode(42, keys).unwrap();
            let back = Control::decode(Path::new("c"), &bytes, 42, keys, keys.is_some()).unwrap();
            assert_eq!(back.generation, 7);
            assert_eq!(back.checkpoint, control.checkpoint);
            assert_eq!(back.holds, control.holds);
            // The version is sealed with the metadata: in the clear there is none.
            let version = keys.map(|_| crate::format::FORMAT_VERSION);
            assert_eq!(back.checkpoint_version, version);
            // Sealed without one, as builds before 2026-12-03 did: it opens, naming none.
            let mut earlier = Control {
                checkpoint_version: None,
                ..sample()
            };
            let bytes = earlier.encode(42, keys).unwrap();
            let back = Control::decode(Path::new("c"), &bytes, 42, keys, keys.is_some()).unwrap();
            assert_eq!(
                (back.checkpoint, back.checkpoint_version),
                (earlier.checkpoint, None)
            );
            // Sealed naming version 3: read back as 3, never as the current version.
            let mut three = Control {
                checkpoint_version: Some(3),
                ..sample()
            };
            let bytes = three.encode(42, keys).unwrap();
            let back = Control::decode(Path::new("c"), &bytes, 42, keys, keys.is_some()).unwrap();
            assert_eq!(back.checkpoint_version, keys.map(|_| 3));
            if keys.is_some() {
                assert!(
                    !bytes.windows(13).any(|w| w == b"snapshot-0007"),
                    "sealed metadata is not in the clear"
                );
            }
        }
    }

    /// Holds without a checkpoint (a replica's hold taken before the first checkpoint): the
    /// file is laid out as docs/FORMAT.md says, with no metadata length, and reads back. The
    /// form earlier builds wrote (a zero length the format does not have) reads back too.
    /// Before, every such file failed with "trailing bytes", and its log did not open.
    #[test]
    fn holds_without_a_checkpoint_round_trip() {
        let ring = KeyRing::generate().unwrap();
        for keys in [None, Some(&ring)] {
            let mut control = Control {
                checkpoint: None,
                ..sample()
            };
            let bytes = control.encode(42, keys).unwrap();
            assert_eq!(
                bytes.len(),
                53 + 2 + 1 + 9 + 8 + 1 + 4,
                "the documented layout"
            );
            let back = Control::decode(Path::new("c"), &bytes, 42, keys, keys.is_some()).unwrap();
            assert_eq!((back.checkpoint, &back.holds), (None, &control.holds));

            let mut earlier = bytes[..53].to_vec();
            earlier.extend_from_slice(&[0u8; 4]);
            earlier.extend_from_slice(&bytes[53..bytes.len() - 4]);
            let crc = crc32c::crc32c(&earlier);
            earlier.extend_from_slice(&crc.to_le_bytes());
            let back = Control::decode(Path::new("c"), &earlier, 42, keys, keys.is_some()).unwrap();
            assert_eq!((back.checkpoint, &back.holds), (None, &control.holds));

            // Anything else after the nonce is still refused.
            let mut other = bytes[..53].to_vec();
            other.extend_from_slice(&[0u8, 0, 0, 1]);
            other.extend_from_slice(&bytes[53..bytes.len() - 4]);
            let crc = crc32c::crc32c(&other);
            other.extend_from_slice(&crc.to_le_bytes());
            assert!(Control::decode(Path::new("c"), &other, 42, keys, keys.is_some()).is_err());
        }
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_an_error() {
        let ring = KeyRing::generate().unwrap();
        let bytes = sample().encode(42, Some(&ring)).unwrap();
        for len in 0..bytes.len() {
            assert!(Control::decode(Path::new("c"), &bytes[..len], 42, Some(&ring), true).is_err());
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(
                Control::decode(Path::new("c"), &b, 42, Some(&ring), true).is_err(),
                "byte {i} flipped"
            );
        }
    }

    #[test]
    fn metadata_moved_to_another_position_fails_authentication() {
        let ring = KeyRing::generate().unwrap();
        let mut bytes = sample().encode(42, Some(&ring)).unwrap();
        // The checkpoint LSN field, rewritten with the checksum recomputed.
        bytes[29..37].copy_from_slice(&0x9999u64.to_le_bytes());
        let n = bytes.len() - 4;
        let crc = crc32c::crc32c(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
        let err = Control::decode(Path::new("c"), &bytes, 42, Some(&ring), true).unwrap_err();
        assert!(err.to_string().contains("authentication"), "{err}");
    }

    #[test]
    fn a_control_file_of_another_log_is_refused() {
        let bytes = sample().encode(42, None).unwrap();
        let err = Control::decode(Path::new("c"), &bytes, 43, None, false).unwrap_err();
        assert!(err.to_string().contains("belongs to log"), "{err}");
    }
}
