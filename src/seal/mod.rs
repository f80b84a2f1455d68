//! Sealing and opening records and pages, for every mode, in one place: the writer seals
//! through [`Seal`], the reader opens through [`open_record`] and [`open_page`], and both take
//! the rules for what a record of a mode looks like (its flags, header length and tag) from
//! [`RecordSeal`], so that what the writer writes and what the reader accepts cannot drift
//! apart.
//!
//! - Records: [`RecordSeal`] is how one record's payload is protected: `Plain` (plaintext and
//!   pagelevel logs, control records), `Ctr` (perrecord, ctr.rs) or `Gcm` (perrecord-gcm and its
//!   sealed segment switch, gcm.rs). The writer picks it from the log's mode
//!   ([`RecordSeal::for_record`]), the reader from the record's flags
//!   ([`RecordSeal::of_flags`]) once [`Seal::check_header`] found them in agreement with the
//!   log's mode.
//! - Compression sits in front: sealing compresses, then seals ([`Seal::compressed`]); opening
//!   opens, then decompresses ([`open_record`]).
//! - Pages: pagelevel encrypts whole page bodies with AES-256-CTR at write-out ([`seal_page`],
//!   [`open_page`]); records inside them are `Plain`.
//!
//! A record is sealed with its place known ([`Seal::seal_record_at`]): the appender reserved
//! its bytes first, so header, stored payload, tag (LSN in the associated data) and checksum
//! (bound to the LSN for the segment's version) are written in one pass into a buffer of
//! exactly [`Seal::stored_len`] bytes. Its IV is drawn by the caller before the reservation
//! ([`SealKey::iv`]), so nothing that can fail for want of randomness comes after it.
//!
//! A new mode: a file here for its cipher, a variant of [`RecordSeal`] (and its arms in this
//! file), its mode and flag codes in `format.rs`.

use crate::Lsn;
use crate::compress;
use crate::config::{Compression, Mode};
use crate::crypto::{IV_LEN, Keys};
use crate::error::{CorruptionKind, Error, Position, Result};
use crate::format::Geometry;
use crate::format::{
    self, AUTHENTICATED_CONTROL_VERSION, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, PageHeader,
    RECORD_FLAG_AUTHENTICATED, RECORD_FLAG_COMPRESSED, RECORD_FLAG_ENCRYPTED, RECORD_FLAG_SWITCH,
    RECORD_FLAGS_CONTROL, RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN, RESUME_PAYLOAD_LEN,
    RecordHeader, TAG_LEN,
};

mod ctr;
mod gcm;

/// How one record's payload is protected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordSeal {
    /// Stored as given: records of plaintext and pagelevel logs, control records.
    Plain,
    /// AES-256-CTR under the IV in the record header (perrecord).
    Ctr,
    /// AES-256-GCM, the tag after the ciphertext (perrecord-gcm; also its segment switch from
    /// format version [`AUTHENTICATED_CONTROL_VERSION`]).
    Gcm,
}

impl RecordSeal {
    /// How a record with `flags` (its kind's flags: control or not, before sealing) is sealed
    /// in a log of `mode`, in a segment of format `version`.
    pub(crate) fn for_record(mode: Mode, version: u32, flags: u8) -> RecordSeal {
        if flags & RECORD_FLAGS_CONTROL != 0 {
            let sealed_switch = flags & RECORD_FLAG_SWITCH != 0
                && mode == Mode::PerRecordGcm
                && version >= AUTHENTICATED_CONTROL_VERSION;
            return if sealed_switch {
                RecordSeal::Gcm
            } else {
                RecordSeal::Plain
            };
        }
        match mode {
            Mode::Plaintext | Mode::PageLevel => RecordSeal::Plain,
            Mode::PerRecord => RecordSeal::Ctr,
            Mode::PerRecordGcm => RecordSeal::Gcm,
        }
    }

    /// How a stored record with header flags `flags` was sealed.
    pub(crate) fn of_flags(flags: u8) -> RecordSeal {
        if flags & RECORD_FLAG_ENCRYPTED == 0 {
            RecordSeal::Plain
        } else if flags & RECORD_FLAG_AUTHENTICATED != 0 {
            RecordSeal::Gcm
        } else {
            RecordSeal::Ctr
        }
    }

    /// The header flags this sealing adds.
    pub(crate) fn flags(self) -> u8 {
        match self {
            RecordSeal::Plain => 0,
            RecordSeal::Ctr => RECORD_FLAG_ENCRYPTED,
            RecordSeal::Gcm => RECORD_FLAG_ENCRYPTED | RECORD_FLAG_AUTHENTICATED,
        }
    }

    /// Length of the record header (with an IV when encrypted).
    pub(crate) fn header_len(self) -> usize {
        match self {
            RecordSeal::Plain => RECORD_HEADER_PLAIN,
            RecordSeal::Ctr | RecordSeal::Gcm => RECORD_HEADER_ENCRYPTED,
        }
    }

    /// Bytes after the payload (the tag), counted in the header's `len`.
    pub(crate) fn tag_len(self) -> usize {
        match self {
            RecordSeal::Plain | RecordSeal::Ctr => 0,
            RecordSeal::Gcm => TAG_LEN,
        }
    }
}

/// The key a record is sealed under and its IV.
pub(crate) struct SealKey<'a> {
    pub(crate) keys: &'a Keys,
    pub(crate) key_id: u32,
    /// The record's IV (`IvSource::next_iv`), for a record sealed under a key
    /// ([`RecordSeal::Ctr`], [`RecordSeal::Gcm`]); `None` for a [`RecordSeal::Plain`] one.
    pub(crate) iv: Option<[u8; IV_LEN]>,
}

/// Where a record lands: its LSN and the format version of the segment it starts in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct At {
    pub(crate) lsn: Lsn,
    pub(crate) version: u32,
}

/// Why a record's header does not agree with the log's mode ([`Seal::check_header`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Disagreement {
    /// A data record's flags: the record is not valid there (`BadRecordHeader`).
    Header(&'static str),
    /// A control record where the format does not allow it (`BadControlRecord`).
    Control(&'static str),
    /// A control record of a perrecord-gcm log that no writer of the log wrote: unsealed
    /// where a sealed one belongs, or not a switch (`AuthenticationFailed`).
    Unauthenticated,
}

/// Sealing for one log: its mode, its log id (part of an authenticated record's associated
/// data) and whether payloads are compressed first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seal {
    mode: Mode,
    log_id: u64,
    /// The log's geometry, bound into an authenticated record's tag from format version
    /// [`format::GEOMETRY_BOUND_VERSION`] on.
    geo: Geometry,
    compression: Compression,
}

impl Seal {
    /// Sealing for a log of `mode` with id `log_id` and geometry `geo`, without compression.
    pub(crate) fn new(mode: Mode, log_id: u64, geo: Geometry) -> Seal {
        Seal {
            mode,
            log_id,
            geo,
            compression: Compression::Off,
        }
    }

    /// The same, compressing payloads as `compression` says before sealing them.
    pub(crate) fn compressing(self, compression: Compression) -> Seal {
        Seal {
            compression,
            ..self
        }
    }

    /// How a record with `flags` is sealed in a segment of format `version`.
    pub(crate) fn record_seal(&self, version: u32, flags: u8) -> RecordSeal {
        RecordSeal::for_record(self.mode, version, flags)
    }

    /// Whether page bodies are encrypted at write-out (pagelevel).
    pub(crate) fn seals_pages(&self) -> bool {
        self.mode == Mode::PageLevel
    }

    /// Length of the whole stored record (header, stored payload, tag) for a payload of
    /// `payload_len` bytes as it will be stored (compressed or not, see [`Seal::compressed`])
    /// with `flags`, in a segment of format `version`.
    pub(crate) fn stored_len(&self, version: u32, payload_len: usize, flags: u8) -> usize {
        let how = self.record_seal(version, flags);
        how.header_len() + payload_len + how.tag_len()
    }

    /// Whether a record with `flags` and `payload` is stored compressed if compressing makes
    /// it shorter: compression is on, it is no control record and the payload is long enough.
    pub(crate) fn compresses(&self, flags: u8, payload: &[u8]) -> bool {
        let Compression::Lz4 { min_len } = self.compression else {
            return false;
        };
        flags & RECORD_FLAGS_CONTROL == 0 && payload.len() >= min_len.max(1)
    }

    /// Calls `f` with the flags and the payload as they will be stored: compressed (and
    /// [`RECORD_FLAG_COMPRESSED`] added) when [`Seal::compresses`] says so and compressing
    /// makes it shorter; else as given. The compressed form lives in a per-thread buffer wiped
    /// when `f` returns.
    pub(crate) fn compressed<R>(
        &self,
        flags: u8,
        payload: &[u8],
        f: impl FnOnce(u8, &[u8]) -> R,
    ) -> R {
        if !self.compresses(flags, payload) {
            return f(flags, payload);
        }
        compress::with_compressed(payload, |packed| match packed {
            Some(packed) => f(flags | RECORD_FLAG_COMPRESSED, packed),
            None => f(flags, payload),
        })
    }

    /// Seals a record whose place is known: writes the finished record (header, stored
    /// payload, tag with `at.lsn` in the associated data, checksum bound to `at.lsn` by the
    /// rule of `at.version`) into `out`, which must be exactly
    /// [`Seal::stored_len`]`(at.version, payload.len(), flags)` bytes long. `payload` and
    /// `flags` are as they will be stored (see [`Seal::compressed`]).
    pub(crate) fn seal_record_at(
        &self,
        key: &SealKey<'_>,
        (kind, flags): (u8, u8),
        payload: &[u8],
        at: At,
        out: &mut [u8],
    ) -> Result<()> {
        let len = self.stored_len(at.version, payload.len(), flags);
        if out.len() != len {
            return Err(Error::Config(format!(
                "a record of {len} bytes at lsn {} sealed into a buffer of {} bytes",
                at.lsn,
                out.len()
            )));
        }
        if payload.len() > format::MAX_PAYLOAD {
            return Err(Error::RecordTooLarge {
                len: payload.len(),
                max: format::MAX_PAYLOAD,
            });
        }
        let how = self.record_seal(at.version, flags);
        let hlen = how.header_len();
        let tag_len = how.tag_len();
        out[hlen..hlen + payload.len()].copy_from_slice(payload);
        let mut header = RecordHeader {
            crc: 0,
            len: (payload.len() + tag_len) as u32,
            kind,
            flags: flags | how.flags(),
            encryption: None,
        };
        if how != RecordSeal::Plain {
            let Some(iv) = key.iv else {
                return Err(Error::Config(format!(
                    "a record at lsn {} sealed under a key without an IV",
                    at.lsn
                )));
            };
            header.encryption = Some((key.key_id, iv));
            match how {
                RecordSeal::Plain => {}
                RecordSeal::Ctr => ctr::apply(key.keys, key.key_id, &iv, &mut out[hlen..])?,
                RecordSeal::Gcm => {
                    let aad = format::auth_aad(at.version, self.geo, self.log_id, &header, at.lsn);
                    gcm::seal(key.keys, (key.key_id, &iv), &aad, &mut out[hlen..])?;
                }
            }
        }
        header.encode(&mut out[..hlen]);
        let crc = format::bind_crc_to_lsn(at.version, format::record_crc_whole(out), at.lsn);
        out[..4].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Whether a record's header (decoded, its checksum matched) agrees with the log's mode
    /// in a segment of format `version`: a data record carries the flags its mode seals with
    /// ([`RecordSeal::for_record`]); a control record is one the format allows there. A
    /// resume record must start at the first body position of a page (`at_body_start`).
    pub(crate) fn check_header(
        &self,
        header: &RecordHeader,
        version: u32,
        at_body_start: bool,
    ) -> std::result::Result<(), Disagreement> {
        let control = header.flags & RECORD_FLAGS_CONTROL != 0;
        if control {
            return self.check_control(header, version, at_body_start);
        }
        let expected = self.record_seal(version, header.flags);
        let encrypted = header.encryption.is_some();
        if encrypted != (expected.flags() & RECORD_FLAG_ENCRYPTED != 0) {
            return Err(Disagreement::Header(
                "encryption flag does not match the log's mode",
            ));
        }
        // In a perrecord-gcm log every record carries a tag (a segment switch of a segment
        // older than format version 4 excepted); a record without one is rejected, never read
        // unauthenticated.
        let authenticated = header.flags & RECORD_FLAG_AUTHENTICATED != 0;
        if authenticated != (expected.flags() & RECORD_FLAG_AUTHENTICATED != 0) {
            return Err(Disagreement::Header(
                "authentication flag does not match the log's mode",
            ));
        }
        Ok(())
    }

    /// A control record (switch, resume) against where the format allows it: a resume record
    /// only in pagelevel, at the first body position of a page, with an 8-byte payload; a
    /// switch record with no payload, or, in a perrecord-gcm segment of format version 4 or
    /// later, sealed (a tag and nothing else). In perrecord-gcm anything else is
    /// `Unauthenticated`: no writer of the log wrote it, and it would delete what follows it.
    /// In the other modes it is `Control`.
    fn check_control(
        &self,
        header: &RecordHeader,
        version: u32,
        at_body_start: bool,
    ) -> std::result::Result<(), Disagreement> {
        let len = header.len as usize;
        let switch = header.flags & RECORD_FLAG_SWITCH != 0;
        if self.mode == Mode::PerRecordGcm {
            let how = self.record_seal(version, RECORD_FLAG_SWITCH);
            if header.flags != RECORD_FLAG_SWITCH | how.flags() || len != how.tag_len() {
                return Err(Disagreement::Unauthenticated);
            }
            return Ok(());
        }
        let what = if header.flags & RECORD_FLAG_AUTHENTICATED != 0 {
            Some("sealed switch record outside a perrecord-gcm log")
        } else if switch {
            (len != 0).then_some("switch record with a payload")
        } else if self.mode != Mode::PageLevel {
            Some("resume record outside a pagelevel log")
        } else if len != RESUME_PAYLOAD_LEN {
            Some("resume record whose payload is not 8 bytes")
        } else if !at_body_start {
            Some("resume record away from the start of a page body")
        } else {
            None
        };
        match what {
            Some(what) => Err(Disagreement::Control(what)),
            None => Ok(()),
        }
    }
}

/// Where a stored record was read: what opening it needs besides its bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    /// The log id (part of an authenticated record's associated data).
    pub(crate) log_id: u64,
    /// The log's geometry (part of it too, from format version
    /// [`format::GEOMETRY_BOUND_VERSION`] on).
    pub(crate) geo: Geometry,
    /// Format version of the segment the record starts in.
    pub(crate) version: u32,
    /// Segment, offset and LSN of the record, for errors.
    pub(crate) at: Position,
}

/// Opens a record as stored (its header agreed with the log's mode, its checksum matched):
/// checks an authenticated record's tag and decrypts the payload in place (the header then
/// says it is no longer encrypted), then decompresses it if it was stored compressed. After
/// this `stored` is the payload as appended. A failed tag leaves no plaintext.
pub(crate) fn open_record(
    keys: Option<&Keys>,
    found: Found,
    header: &mut RecordHeader,
    stored: &mut Vec<u8>,
) -> Result<()> {
    if let Some((key_id, iv)) = header.encryption {
        let keys = keys.ok_or(Error::missing_key(key_id).located(found.at))?;
        match RecordSeal::of_flags(header.flags) {
            RecordSeal::Gcm => match open_authenticated(keys, found, header, stored)? {
                Some(plain) => stored.truncate(plain),
                None => {
                    return Err(Error::AuthenticationFailed {
                        at: found.at,
                        key_id,
                    });
                }
            },
            RecordSeal::Ctr | RecordSeal::Plain => {
                open_ctr(keys, (key_id, &iv), stored).map_err(|e| e.located(found.at))?
            }
        }
        header.encryption = None;
    }
    if header.flags & RECORD_FLAG_COMPRESSED != 0 {
        let decompressed = compress::decompress(stored);
        if header.flags & RECORD_FLAG_ENCRYPTED != 0 {
            // The compressed plaintext is wiped before it is freed, whatever decompression
            // said (docs/SECURITY.md, "Keystream and plaintext in memory").
            zeroize::Zeroize::zeroize(stored);
        }
        *stored = decompressed.map_err(|what| Error::Corrupt {
            at: found.at,
            kind: CorruptionKind::BadCompressedPayload(what),
        })?;
        header.flags &= !RECORD_FLAG_COMPRESSED;
    }
    Ok(())
}

/// Checks the tag of an authenticated record's stored payload (`stored`, wholly read, its
/// checksum matched) and decrypts the ciphertext in place, as [`open_record`] would: for the
/// read-ahead. Returns the plaintext's length (the tag's bytes after it stay as they were), or
/// `None` when the tag does not match (the ciphertext zeroed, nothing decrypted handed on):
/// the cursor then reads the record itself and reports the failure where it finds it.
pub(crate) fn open_authenticated(
    keys: &Keys,
    found: Found,
    header: &RecordHeader,
    stored: &mut [u8],
) -> Result<Option<usize>> {
    let Some((key_id, iv)) = header.encryption else {
        return Ok(None);
    };
    let aad = format::auth_aad(found.version, found.geo, found.log_id, header, found.at.lsn);
    gcm::open_in_place(keys, (key_id, &iv), &aad, stored).map_err(|e| e.located(found.at))
}

/// Decrypts (or, over zeros, makes the keystream of) a perrecord record's stored payload in
/// place: for the read-ahead, which checks the checksum itself.
pub(crate) fn open_ctr(
    keys: &Keys,
    (key_id, iv): (u32, &[u8; IV_LEN]),
    data: &mut [u8],
) -> Result<()> {
    ctr::apply(keys, key_id, iv, data)
}

/// Seals the body of a page image (`image`, header room included) under `cipher` (pagelevel:
/// the page's key id and IV) and fills in `header`'s encryption fields; without `cipher` the
/// body stays as it is. Only the first `valid` bytes of the image are encrypted: the zeros
/// after them stay zeros.
pub(crate) fn seal_page(
    keys: &Keys,
    cipher: Option<(u32, [u8; IV_LEN])>,
    header: &mut PageHeader,
    image: &mut [u8],
    valid: usize,
) -> Result<()> {
    let Some((key_id, iv)) = cipher else {
        return Ok(());
    };
    ctr::apply(keys, key_id, &iv, &mut image[PAGE_HEADER_LEN..valid])?;
    header.flags = PAGE_FLAG_ENCRYPTED;
    header.key_id = key_id;
    header.iv = iv;
    Ok(())
}

/// Opens the body of a page `image` whose header (checked) is `header`, in place; a body not
/// encrypted is left as it is.
pub(crate) fn open_page(keys: Option<&Keys>, header: &PageHeader, image: &mut [u8]) -> Result<()> {
    if header.flags & PAGE_FLAG_ENCRYPTED == 0 {
        return Ok(());
    }
    let keys = keys.ok_or(Error::missing_key(header.key_id))?;
    ctr::apply(
        keys,
        header.key_id,
        &header.iv,
        &mut image[PAGE_HEADER_LEN..],
    )
}

#[cfg(test)]
mod tests;
