//! The byte layout of a sealed file's header and of its chunks: pure, no I/O, no keys.
//!
//! docs/FORMAT.md ("Sealed files") explains each field. All integers are little-endian, except
//! the chunk counter inside a nonce, which the STREAM construction defines as big-endian (the
//! nonce is never stored).

use crate::crypto::KCV_LEN;

/// The first 8 bytes of every sealed file.
pub const SEALED_MAGIC: [u8; 8] = *b"walcSEAL";
/// The sealed-file format version this build writes and reads.
pub const SEALED_VERSION: u32 = 1;
/// Length of the plaintext header at the start of a sealed file.
pub const SEALED_HEADER_LEN: usize = 52;
/// Default plaintext bytes per chunk: 64 KiB.
pub const DEFAULT_CHUNK_SIZE: usize = 64 << 10;
/// Smallest chunk size a file may use.
pub const MIN_CHUNK_SIZE: usize = 16;
/// Largest chunk size a file may use (16 MiB): a reader allocates one chunk, so a header
/// cannot make it allocate more than this.
pub const MAX_CHUNK_SIZE: usize = 16 << 20;
/// Length of the AES-GCM tag that follows each chunk's ciphertext.
pub const CHUNK_TAG_LEN: usize = 16;
/// Length of the random file id.
pub(crate) const FILE_ID_LEN: usize = 16;
/// Length of the random nonce prefix (STREAM: 12-byte nonce = 7-byte prefix, 4-byte counter,
/// 1-byte last-chunk flag).
pub(crate) const NONCE_PREFIX_LEN: usize = 7;

// Offsets of the header fields; named once, used by `encode` and `decode` only.
const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 8;
const KEY_ID_AT: usize = 12;
const CHUNK_SIZE_AT: usize = 16;
const FILE_ID_AT: usize = 20;
const PREFIX_AT: usize = FILE_ID_AT + FILE_ID_LEN; // 36
const RESERVED_AT: usize = PREFIX_AT + NONCE_PREFIX_LEN; // 43
const KCV_AT: usize = RESERVED_AT + 1; // 44
const _: () = assert!(KCV_AT + KCV_LEN == SEALED_HEADER_LEN);

/// A sealed file's header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub key_id: u32,
    pub chunk_size: u32,
    pub file_id: [u8; FILE_ID_LEN],
    pub nonce_prefix: [u8; NONCE_PREFIX_LEN],
    /// Check value of the file key (never of the data key).
    pub kcv: [u8; KCV_LEN],
}

/// Why a header does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderError {
    Short,
    BadMagic,
    Version(u32),
    Field(&'static str),
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; SEALED_HEADER_LEN] {
        let mut out = [0u8; SEALED_HEADER_LEN];
        out[MAGIC_AT..VERSION_AT].copy_from_slice(&SEALED_MAGIC);
        out[VERSION_AT..KEY_ID_AT].copy_from_slice(&SEALED_VERSION.to_le_bytes());
        out[KEY_ID_AT..CHUNK_SIZE_AT].copy_from_slice(&self.key_id.to_le_bytes());
        out[CHUNK_SIZE_AT..FILE_ID_AT].copy_from_slice(&self.chunk_size.to_le_bytes());
        out[FILE_ID_AT..PREFIX_AT].copy_from_slice(&self.file_id);
        out[PREFIX_AT..RESERVED_AT].copy_from_slice(&self.nonce_prefix);
        out[KCV_AT..].copy_from_slice(&self.kcv);
        out
    }

    /// Decodes the header at the start of `bytes`, checking every field the format constrains.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, HeaderError> {
        if !bytes.starts_with(&SEALED_MAGIC) {
            // A file cut inside the magic is short; anything else is not a sealed file.
            return Err(if SEALED_MAGIC.starts_with(bytes) {
                HeaderError::Short
            } else {
                HeaderError::BadMagic
            });
        }
        let Some(bytes) = bytes.get(..SEALED_HEADER_LEN) else {
            return Err(HeaderError::Short);
        };
        let u32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[at..at + 4]);
            u32::from_le_bytes(b)
        };
        let version = u32_at(VERSION_AT);
        if version != SEALED_VERSION {
            return Err(HeaderError::Version(version));
        }
        let key_id = u32_at(KEY_ID_AT);
        if key_id == 0 {
            return Err(HeaderError::Field(
                "key id 0 (sealed files are always encrypted)",
            ));
        }
        let chunk_size = u32_at(CHUNK_SIZE_AT);
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&(chunk_size as usize)) {
            return Err(HeaderError::Field("chunk size outside 16 B ..= 16 MiB"));
        }
        if bytes[RESERVED_AT] != 0 {
            return Err(HeaderError::Field("reserved byte is not zero"));
        }
        let mut header = Header {
            key_id,
            chunk_size,
            file_id: [0; FILE_ID_LEN],
            nonce_prefix: [0; NONCE_PREFIX_LEN],
            kcv: [0; KCV_LEN],
        };
        header
            .file_id
            .copy_from_slice(&bytes[FILE_ID_AT..PREFIX_AT]);
        header
            .nonce_prefix
            .copy_from_slice(&bytes[PREFIX_AT..RESERVED_AT]);
        header.kcv.copy_from_slice(&bytes[KCV_AT..]);
        Ok(header)
    }
}

/// The STREAM nonce of chunk `index`: prefix (7) || index (u32 big-endian) || last flag (1).
pub(crate) fn chunk_nonce(prefix: &[u8; NONCE_PREFIX_LEN], index: u32, last: bool) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[..NONCE_PREFIX_LEN].copy_from_slice(prefix);
    nonce[NONCE_PREFIX_LEN..11].copy_from_slice(&index.to_be_bytes());
    nonce[11] = u8::from(last);
    nonce
}

/// Where the chunks of a file whose body (the bytes after the header) is `body_len` long lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkPlan {
    /// Number of chunks (at least 1 for a body that is not empty).
    pub chunks: u64,
    /// Stored length (ciphertext and tag) of the last chunk.
    pub last_len: u64,
}

impl ChunkPlan {
    /// `None` for an empty body (no chunk at all).
    pub(crate) fn of(body_len: u64, chunk_size: u32) -> Option<ChunkPlan> {
        if body_len == 0 {
            return None;
        }
        let stored = chunk_size as u64 + CHUNK_TAG_LEN as u64;
        let chunks = body_len.div_ceil(stored);
        Some(ChunkPlan {
            chunks,
            last_len: body_len - (chunks - 1) * stored,
        })
    }

    /// File offset of chunk `index`.
    pub(crate) fn offset(index: u64, chunk_size: u32) -> u64 {
        SEALED_HEADER_LEN as u64 + index * (chunk_size as u64 + CHUNK_TAG_LEN as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            key_id: 7,
            chunk_size: 4096,
            file_id: [3; FILE_ID_LEN],
            nonce_prefix: [5; NONCE_PREFIX_LEN],
            kcv: [9; KCV_LEN],
        }
    }

    #[test]
    fn header_round_trips_and_refuses_what_the_format_forbids() {
        let bytes = header().encode();
        assert_eq!(Header::decode(&bytes), Ok(header()));
        assert_eq!(Header::decode(&bytes[..20]), Err(HeaderError::Short));
        assert_eq!(Header::decode(&bytes[..3]), Err(HeaderError::Short));
        assert_eq!(Header::decode(b"xyz"), Err(HeaderError::BadMagic));
        let mut future = bytes;
        future[VERSION_AT] = 2;
        assert_eq!(Header::decode(&future), Err(HeaderError::Version(2)));
        let mut reserved = bytes;
        reserved[RESERVED_AT] = 1;
        assert!(matches!(
            Header::decode(&reserved),
            Err(HeaderError::Field(_))
        ));
        let mut huge = bytes;
        huge[CHUNK_SIZE_AT..CHUNK_SIZE_AT + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Header::decode(&huge), Err(HeaderError::Field(_))));
    }

    #[test]
    fn chunk_plan_puts_a_full_last_chunk_last() {
        let stored = 16 + CHUNK_TAG_LEN as u64;
        assert_eq!(ChunkPlan::of(0, 16), None);
        let one = ChunkPlan::of(stored, 16);
        assert_eq!(
            one,
            Some(ChunkPlan {
                chunks: 1,
                last_len: stored
            })
        );
        let two = ChunkPlan::of(stored + 16, 16);
        assert_eq!(
            two,
            Some(ChunkPlan {
                chunks: 2,
                last_len: 16
            })
        );
    }

    #[test]
    fn nonce_is_prefix_big_endian_counter_and_flag() {
        let n = chunk_nonce(&[1, 2, 3, 4, 5, 6, 7], 0x0102_0304, true);
        assert_eq!(n, [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 1]);
    }
}
