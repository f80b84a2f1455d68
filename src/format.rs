//! Byte layouts of segments, pages and records. Pure data: no I/O, no keys.
//!
//! All integers are little-endian. docs/FORMAT.md has the diagrams; the constants here are
//! the single source of the offsets.
//!
//! The log is a sequence of bytes addressed by [`Lsn`]. It is cut into segment files of
//! `segment_size` bytes, named by their start LSN, and each segment into pages of `page_size`
//! bytes, so an LSN maps directly to a file and an offset. Page 0 of each segment holds the
//! segment header and nothing else; every other page starts with a page header followed by the
//! page body. The bodies, concatenated, form the record stream; records may span pages and
//! segments.

use crate::Lsn;
use crate::config::Mode;
use crate::crypto::{IV_LEN, KCV_LEN};
use crate::error::CorruptionKind;

/// Format version written by this build; readers refuse any other. Version 2: data is
/// encrypted under per-log working keys derived from the data keys (HKDF-SHA256 over the data
/// key and the log id), and segment headers list the working keys' check values.
pub const FORMAT_VERSION: u32 = 2;
/// First 8 bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"WALCRYPT";
/// Fixed part of the segment header, before the key check values.
pub const SEGMENT_HEADER_FIXED: usize = 48;
/// One key check value entry: key id (u32) and check value (8 bytes).
pub const KCV_ENTRY: usize = 4 + KCV_LEN;

/// Magic of every page header.
pub const PAGE_MAGIC: u16 = 0xC7A1;
/// Size of a page header, the same in every mode.
pub const PAGE_HEADER_LEN: usize = 48;
/// Page flag: the body is encrypted (pagelevel).
pub const PAGE_FLAG_ENCRYPTED: u8 = 0x01;

/// Record header size without encryption fields (plaintext and pagelevel).
pub const RECORD_HEADER_PLAIN: usize = 12;
/// Record header size with key id and IV (perrecord).
pub const RECORD_HEADER_ENCRYPTED: usize = 32;
/// Record flag: the payload is encrypted with the key id and IV in the header.
pub const RECORD_FLAG_ENCRYPTED: u8 = 0x01;
/// Record flag: a segment switch. It carries no payload; the rest of its segment is unused and
/// the log continues at the first record position of the next segment. Written when a log is
/// reopened with a key its current segment does not list, so every segment header names the
/// keys its data uses.
pub const RECORD_FLAG_SWITCH: u8 = 0x02;
/// Record flag: the log resumes here, at the first body position of a page, after the page
/// before was left partly filled. Its payload is the LSN (u64) where the valid records of that
/// page end; a reader that finds no valid record there continues with this record. pagelevel
/// writers emit one when they reopen a log whose last page is partly filled: that page's
/// keystream may already have covered bytes recovery cut away, so it is never written again.
pub const RECORD_FLAG_RESUME: u8 = 0x10;
/// Payload length of a resume record.
pub const RESUME_PAYLOAD_LEN: usize = 8;
/// Flags of records that steer the reader (switch, resume): never encrypted, never returned.
pub const RECORD_FLAGS_CONTROL: u8 = RECORD_FLAG_SWITCH | RECORD_FLAG_RESUME;
/// Record flag (with [`RECORD_FLAG_ENCRYPTED`]): the payload is AES-256-GCM ciphertext
/// followed by a [`TAG_LEN`]-byte tag, both counted in `len`. The nonce is the IV's first 12
/// bytes (its last 4 are zero) and the associated data is [`auth_aad`].
pub const RECORD_FLAG_AUTHENTICATED: u8 = 0x04;
/// Record flag: the plaintext payload is compressed: a little-endian u32 with the original
/// length, then an LZ4 block. Applied before encryption; removed after decryption.
pub const RECORD_FLAG_COMPRESSED: u8 = 0x08;
/// Every record flag this build knows.
pub const RECORD_FLAGS_KNOWN: u8 = RECORD_FLAG_ENCRYPTED
    | RECORD_FLAGS_CONTROL
    | RECORD_FLAG_AUTHENTICATED
    | RECORD_FLAG_COMPRESSED;
/// Length of the authentication tag after an authenticated record's ciphertext.
pub const TAG_LEN: usize = 16;
/// Length of the associated data an authenticated record's tag covers.
pub const AAD_LEN: usize = 32;
/// Offset of the LSN in the associated data: the whole last 8 bytes, so the writer can bind
/// the position after sealing (see `aead.rs`).
pub const AAD_LSN_AT: usize = 24;
/// Largest payload one record may carry (1 GiB). Bounds every allocation a reader makes.
pub const MAX_PAYLOAD: usize = 1 << 30;

/// Smallest and largest page sizes accepted.
pub const MIN_PAGE_SIZE: u32 = 512;
/// Largest page size accepted.
pub const MAX_PAGE_SIZE: u32 = 1 << 20;

/// Name of the segment file that starts at `start`: 16 hex digits and `.wal`.
pub fn segment_file_name(start: Lsn) -> String {
    format!("{:016X}.wal", u64::from(start))
}

/// Parses a segment file name back into its start LSN.
pub fn parse_segment_file_name(name: &str) -> Option<Lsn> {
    let hex = name.strip_suffix(".wal")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().map(Lsn)
}

/// Geometry of a log: sizes that turn LSNs into files, pages and offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Page size in bytes.
    pub page_size: u64,
    /// Segment size in bytes (a multiple of the page size, at least two pages).
    pub segment_size: u64,
}

impl Geometry {
    /// Bytes of record stream a page carries.
    pub fn body_len(&self) -> u64 {
        self.page_size - PAGE_HEADER_LEN as u64
    }

    /// Start of the segment holding `lsn`.
    pub fn segment_start(&self, lsn: u64) -> u64 {
        lsn - lsn % self.segment_size
    }

    /// Start of the page holding `lsn`.
    pub fn page_start(&self, lsn: u64) -> u64 {
        lsn - lsn % self.page_size
    }

    /// True when `page` (a page start) is page 0 of its segment, the segment header page.
    pub fn is_header_page(&self, page: u64) -> bool {
        page.is_multiple_of(self.segment_size)
    }

    /// Moves `lsn` forward past page and segment headers to the first position at or after it
    /// where record bytes may go.
    pub fn skip_headers(&self, lsn: u64) -> u64 {
        let mut lsn = lsn;
        if lsn.is_multiple_of(self.segment_size) {
            lsn += self.page_size;
        }
        if lsn.is_multiple_of(self.page_size) {
            lsn += PAGE_HEADER_LEN as u64;
        }
        lsn
    }

    /// The position `n` record-stream bytes after `lsn` (which must be a body position),
    /// skipping headers on the way. A position exactly at the end of a body is left there.
    pub fn advance(&self, lsn: u64, n: u64) -> u64 {
        let mut pos = lsn;
        let mut left = n;
        while left > 0 {
            pos = self.skip_headers(pos);
            let room = self.page_start(pos) + self.page_size - pos;
            let step = room.min(left);
            pos += step;
            left -= step;
        }
        pos
    }
}

/// The segment header, stored at the start of page 0 of every segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Encryption mode of the whole log.
    pub mode: Mode,
    /// Page and segment sizes.
    pub geometry: Geometry,
    /// Random id drawn when the log was created; every segment of one log carries it.
    pub log_id: u64,
    /// LSN of the segment's first byte (also in the file name).
    pub start: Lsn,
    /// `(key id, key check value)` for each key that pages or records in this segment may use.
    pub key_checks: Vec<(u32, [u8; KCV_LEN])>,
}

impl SegmentHeader {
    /// Encoded length in bytes.
    pub fn encoded_len(&self) -> usize {
        SEGMENT_HEADER_FIXED + self.key_checks.len() * KCV_ENTRY + 4
    }

    /// Whether the header lists `key_id`: records and pages of the segment may use only the
    /// keys it lists.
    pub fn lists_key(&self, key_id: u32) -> bool {
        self.key_checks.iter().any(|(id, _)| *id == key_id)
    }

    /// Largest number of key check values a page of `page_size` can hold.
    pub fn max_keys(page_size: u64) -> usize {
        (page_size as usize - SEGMENT_HEADER_FIXED - 4) / KCV_ENTRY
    }

    /// Writes the header into `page` (at least `encoded_len` bytes; the rest is left alone).
    pub fn encode(&self, page: &mut [u8]) {
        let n = self.key_checks.len();
        page[0..8].copy_from_slice(&SEGMENT_MAGIC);
        page[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        page[12] = self.mode.code();
        page[13] = 0;
        page[14..16].copy_from_slice(&(n as u16).to_le_bytes());
        page[16..20].copy_from_slice(&(self.geometry.page_size as u32).to_le_bytes());
        page[20..24].copy_from_slice(&0u32.to_le_bytes());
        page[24..32].copy_from_slice(&self.geometry.segment_size.to_le_bytes());
        page[32..40].copy_from_slice(&self.log_id.to_le_bytes());
        page[40..48].copy_from_slice(&u64::from(self.start).to_le_bytes());
        let mut at = SEGMENT_HEADER_FIXED;
        for (id, kcv) in &self.key_checks {
            page[at..at + 4].copy_from_slice(&id.to_le_bytes());
            page[at + 4..at + KCV_ENTRY].copy_from_slice(kcv);
            at += KCV_ENTRY;
        }
        let crc = crc32c::crc32c(&page[..at]);
        page[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Parses a segment header from the first bytes of a segment file.
    ///
    /// Returns `Err(Version(found))` for a version this build does not read, so the caller can
    /// report both versions.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderError> {
        use CorruptionKind::*;
        if bytes.len() < SEGMENT_HEADER_FIXED + 4 || bytes[0..8] != SEGMENT_MAGIC {
            return Err(HeaderError::Corrupt(BadMagic));
        }
        let version = le_u32(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(HeaderError::Version(version));
        }
        let n = le_u16(bytes, 14) as usize;
        let end = SEGMENT_HEADER_FIXED + n * KCV_ENTRY;
        if end + 4 > bytes.len() {
            return Err(HeaderError::Corrupt(SegmentHeaderField("key count")));
        }
        let expected = le_u32(bytes, end);
        let got = crc32c::crc32c(&bytes[..end]);
        if expected != got {
            return Err(HeaderError::Corrupt(SegmentHeaderChecksum {
                expected,
                got,
            }));
        }
        let mode =
            Mode::from_code(bytes[12]).ok_or(HeaderError::Corrupt(SegmentHeaderField("mode")))?;
        let page_size = le_u32(bytes, 16) as u64;
        let segment_size = le_u64(bytes, 24);
        let geometry = Geometry {
            page_size,
            segment_size,
        };
        validate_geometry(geometry)
            .map_err(|what| HeaderError::Corrupt(SegmentHeaderField(what)))?;
        let key_checks = (0..n)
            .map(|i| {
                let at = SEGMENT_HEADER_FIXED + i * KCV_ENTRY;
                let mut kcv = [0u8; KCV_LEN];
                kcv.copy_from_slice(&bytes[at + 4..at + KCV_ENTRY]);
                (le_u32(bytes, at), kcv)
            })
            .collect();
        Ok(SegmentHeader {
            mode,
            geometry,
            log_id: le_u64(bytes, 32),
            start: Lsn(le_u64(bytes, 40)),
            key_checks,
        })
    }
}

/// Why a segment header could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Damaged or not a walcrypt segment.
    Corrupt(CorruptionKind),
    /// A format version this build does not read.
    Version(u32),
}

/// Checks page and segment sizes; returns what is wrong.
pub fn validate_geometry(g: Geometry) -> Result<(), &'static str> {
    if !(MIN_PAGE_SIZE as u64..=MAX_PAGE_SIZE as u64).contains(&g.page_size)
        || !g.page_size.is_power_of_two()
    {
        return Err("page size must be a power of two from 512 B to 1 MiB");
    }
    if g.segment_size < 2 * g.page_size || !g.segment_size.is_multiple_of(g.page_size) {
        return Err("segment size must be a multiple of the page size, at least two pages");
    }
    if g.segment_size > 1 << 40 {
        return Err("segment size must be at most 1 TiB");
    }
    Ok(())
}

/// Segments end at or before this LSN (2^63, 8 EiB of log): position arithmetic (a segment's
/// end, a record of up to 1 GiB past it) then never overflows a `u64`.
pub const LSN_LIMIT: u64 = 1 << 63;

/// Checks a segment's start LSN against the geometry; returns what is wrong.
pub fn validate_segment_start(g: Geometry, start: u64) -> Result<(), &'static str> {
    if !start.is_multiple_of(g.segment_size) {
        return Err("start is not a multiple of the segment size");
    }
    if start > LSN_LIMIT - g.segment_size {
        return Err("start lies beyond the LSN range (segments must end by 2^63)");
    }
    Ok(())
}

/// The plaintext header at the start of every page but a segment's first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    /// [`PAGE_FLAG_ENCRYPTED`] or 0.
    pub flags: u8,
    /// Key that encrypted the body (pagelevel), 0 when the body is plaintext.
    pub key_id: u32,
    /// The page's own address, binding its content to its position.
    pub page_lsn: Lsn,
    /// Bytes of a record begun on an earlier page that still follow at the body's start
    /// (they may run past this page).
    pub rem_len: u32,
    /// The log was durable through this LSN before this page was written. A damaged record
    /// below the highest such mark is corruption, never a torn tail.
    pub durable_hint: Lsn,
    /// IV of the body's keystream (pagelevel), zero otherwise.
    pub iv: [u8; IV_LEN],
}

impl PageHeader {
    /// Encodes into `out[..PAGE_HEADER_LEN]`; the checksum is seeded with the log id so a page
    /// from another log never validates.
    pub fn encode(&self, log_id: u64, out: &mut [u8]) {
        out[0..2].copy_from_slice(&PAGE_MAGIC.to_le_bytes());
        out[2] = self.flags;
        out[3] = 0;
        out[4..8].copy_from_slice(&self.key_id.to_le_bytes());
        out[8..16].copy_from_slice(&u64::from(self.page_lsn).to_le_bytes());
        out[16..20].copy_from_slice(&self.rem_len.to_le_bytes());
        out[24..32].copy_from_slice(&u64::from(self.durable_hint).to_le_bytes());
        out[32..48].copy_from_slice(&self.iv);
        let crc = page_header_crc(log_id, out);
        out[20..24].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes and checks a page header. `None` means the bytes are not a valid page header
    /// of this log (never written, torn, garbage, or from another log).
    pub fn decode(log_id: u64, bytes: &[u8]) -> Option<PageHeader> {
        if bytes.len() < PAGE_HEADER_LEN || le_u16(bytes, 0) != PAGE_MAGIC || bytes[3] != 0 {
            return None;
        }
        if le_u32(bytes, 20) != page_header_crc(log_id, bytes) {
            return None;
        }
        let flags = bytes[2];
        if flags & !PAGE_FLAG_ENCRYPTED != 0 {
            return None;
        }
        let mut iv = [0u8; IV_LEN];
        iv.copy_from_slice(&bytes[32..48]);
        Some(PageHeader {
            flags,
            key_id: le_u32(bytes, 4),
            page_lsn: Lsn(le_u64(bytes, 8)),
            rem_len: le_u32(bytes, 16),
            durable_hint: Lsn(le_u64(bytes, 24)),
            iv,
        })
    }
}

fn page_header_crc(log_id: u64, header: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&log_id.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &header[0..20]);
    crc32c::crc32c_append(crc, &header[24..PAGE_HEADER_LEN])
}

/// A record header. The checksum covers the header after the checksum field and the payload
/// as stored (ciphertext in perrecord).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// CRC32C over header bytes 4.. and the stored payload.
    pub crc: u32,
    /// Payload length in bytes.
    pub len: u32,
    /// The embedder's record type.
    pub kind: u8,
    /// [`RECORD_FLAG_ENCRYPTED`] or 0.
    pub flags: u8,
    /// Key id and IV when the payload is encrypted (perrecord).
    pub encryption: Option<(u32, [u8; IV_LEN])>,
}

impl RecordHeader {
    /// Header length in bytes.
    pub fn len_bytes(&self) -> usize {
        header_len_for_flags(self.flags)
    }

    /// Encodes the header into `out[..self.len_bytes()]`, with the checksum field as stored.
    pub fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.crc.to_le_bytes());
        out[4..8].copy_from_slice(&self.len.to_le_bytes());
        out[8] = self.kind;
        out[9] = self.flags;
        out[10..12].copy_from_slice(&0u16.to_le_bytes());
        if let Some((key_id, iv)) = &self.encryption {
            out[12..16].copy_from_slice(&key_id.to_le_bytes());
            out[16..32].copy_from_slice(iv);
        }
    }

    /// Decodes the first [`RECORD_HEADER_PLAIN`] bytes plus, when flagged, the encryption
    /// fields. `bytes` must hold `header_len_for_flags(bytes[9])` bytes.
    pub fn decode(bytes: &[u8]) -> Result<RecordHeader, &'static str> {
        let flags = bytes[9];
        if flags & !RECORD_FLAGS_KNOWN != 0 {
            return Err("unknown flags");
        }
        let authenticated = flags & RECORD_FLAG_AUTHENTICATED != 0;
        if authenticated && flags & RECORD_FLAG_ENCRYPTED == 0 {
            return Err("authenticated flag without the encrypted flag");
        }
        if flags & RECORD_FLAG_SWITCH != 0 && flags != RECORD_FLAG_SWITCH {
            return Err("segment switch with other flags");
        }
        if flags & RECORD_FLAG_RESUME != 0 && flags != RECORD_FLAG_RESUME {
            return Err("resume record with other flags");
        }
        if le_u16(bytes, 10) != 0 {
            return Err("reserved bytes are not zero");
        }
        let len = le_u32(bytes, 4);
        let tag = if authenticated { TAG_LEN } else { 0 };
        if len as usize > MAX_PAYLOAD + tag {
            return Err("payload length beyond the 1 GiB limit");
        }
        if (len as usize) < tag {
            return Err("authenticated record shorter than its tag");
        }
        if authenticated && le_u32(bytes, 28) != 0 {
            return Err("nonce block counter is not zero");
        }
        let encryption = (flags & RECORD_FLAG_ENCRYPTED != 0).then(|| {
            let mut iv = [0u8; IV_LEN];
            iv.copy_from_slice(&bytes[16..32]);
            (le_u32(bytes, 12), iv)
        });
        Ok(RecordHeader {
            crc: le_u32(bytes, 0),
            len,
            kind: bytes[8],
            flags,
            encryption,
        })
    }
}

/// Header length implied by a record's flags byte.
pub fn header_len_for_flags(flags: u8) -> usize {
    if flags & RECORD_FLAG_ENCRYPTED != 0 {
        RECORD_HEADER_ENCRYPTED
    } else {
        RECORD_HEADER_PLAIN
    }
}

/// The associated data of an authenticated record at `lsn`: what the tag binds besides the
/// ciphertext. Layout (little-endian): log id (8), key id (4), stored length with the tag
/// (4), kind (1), flags (1), zero (6), LSN (8).
pub fn auth_aad(log_id: u64, header: &RecordHeader, lsn: u64) -> [u8; AAD_LEN] {
    let mut aad = [0u8; AAD_LEN];
    let key_id = header.encryption.map_or(0, |(id, _)| id);
    aad[0..8].copy_from_slice(&log_id.to_le_bytes());
    aad[8..12].copy_from_slice(&key_id.to_le_bytes());
    aad[12..16].copy_from_slice(&header.len.to_le_bytes());
    aad[16] = header.kind;
    aad[17] = header.flags;
    aad[AAD_LSN_AT..].copy_from_slice(&lsn.to_le_bytes());
    aad
}

/// The record checksum over an encoded header and the stored payload.
pub fn record_crc(header: &[u8], stored_payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&header[4..]);
    crc32c::crc32c_append(crc, stored_payload)
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Geometry = Geometry {
        page_size: 512,
        segment_size: 2048,
    };

    #[test]
    fn advance_skips_page_and_segment_headers() {
        let start = G.skip_headers(0);
        assert_eq!(start, 512 + 48);
        // Fill the rest of page 1 exactly: stays at the end of the body.
        assert_eq!(G.advance(start, 464), 1024);
        // One more byte lands after page 2's header.
        assert_eq!(G.advance(start, 465), 1024 + 48 + 1);
        // Crossing the segment boundary skips page 0 of the next segment.
        let end_of_segment = G.advance(start, 3 * 464);
        assert_eq!(end_of_segment, 2048);
        assert_eq!(G.advance(start, 3 * 464 + 1), 2048 + 512 + 48 + 1);
    }

    #[test]
    fn page_header_round_trips_and_binds_log_id() {
        let h = PageHeader {
            flags: PAGE_FLAG_ENCRYPTED,
            key_id: 3,
            page_lsn: Lsn(8192),
            rem_len: 17,
            durable_hint: Lsn(100),
            iv: [7; 16],
        };
        let mut buf = [0u8; PAGE_HEADER_LEN];
        h.encode(42, &mut buf);
        assert_eq!(PageHeader::decode(42, &buf), Some(h));
        assert_eq!(PageHeader::decode(43, &buf), None);
        assert_eq!(PageHeader::decode(42, &[0u8; PAGE_HEADER_LEN]), None);
    }

    #[test]
    fn segment_header_round_trips_and_rejects_other_versions() {
        let h = SegmentHeader {
            mode: Mode::PerRecord,
            geometry: Geometry {
                page_size: 8192,
                segment_size: 1 << 24,
            },
            log_id: 9,
            start: Lsn(1 << 24),
            key_checks: vec![(1, [1; 8]), (2, [2; 8])],
        };
        let mut page = vec![0u8; 8192];
        h.encode(&mut page);
        assert_eq!(SegmentHeader::decode(&page), Ok(h));
        // Version 1 (data under the raw data keys) is another format.
        page[8] = 1;
        assert_eq!(SegmentHeader::decode(&page), Err(HeaderError::Version(1)));
    }

    #[test]
    fn segment_names_round_trip() {
        let name = segment_file_name(Lsn(0x1_0000_0000));
        assert_eq!(name, "0000000100000000.wal");
        assert_eq!(parse_segment_file_name(&name), Some(Lsn(0x1_0000_0000)));
        assert_eq!(parse_segment_file_name("x.wal"), None);
    }
}
