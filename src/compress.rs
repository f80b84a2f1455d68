//! Optional compression of record payloads before they are sealed: the LZ4 block format from
//! `lz4_flex` (pure Rust, no `unsafe` with the features chosen). Off by default, because the
//! length of a compressed record tells an observer something about its plaintext
//! (docs/SECURITY.md).
//!
//! A compressed payload is `original length (u32, little-endian) || LZ4 block`, stored only
//! when that is shorter than the payload itself, and marked with
//! [`RECORD_FLAG_COMPRESSED`](crate::format::RECORD_FLAG_COMPRESSED).

use std::cell::Cell;

use zeroize::Zeroize;

use crate::format::MAX_PAYLOAD;

/// Bytes of the original-length prefix.
pub(crate) const LEN_PREFIX: usize = 4;

/// An LZ4 block cannot produce more than about 255 bytes per input byte (a length byte of
/// 255 extends a match by 255); a prefix claiming more is damage, and the bound keeps the
/// allocation proportional to the bytes actually read.
const MAX_RATIO: usize = 255;

/// Compressed payloads of up to this size reuse a per-thread buffer.
const BUFFER_KEEP: usize = 256 << 10;

thread_local! {
    /// Zeroized after every use: between records it holds no plaintext (compressed plaintext
    /// is plaintext to anyone who can read memory).
    static BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Compresses `payload` into this thread's buffer and calls `f` with the compressed form, or
/// with `None` when compressing does not make it shorter. The buffer is zeroized before this
/// returns, also when `f` fails.
pub(crate) fn with_compressed<R>(payload: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> R {
    BUFFER.with(|buffer| {
        let mut packed = Wiped(buffer.take());
        let result = if compress(payload, &mut packed.0) {
            f(Some(&packed.0))
        } else {
            f(None)
        };
        let mut packed = std::mem::take(&mut packed.0);
        // compress leaves zeros beyond the length it returns; only the length needs wiping.
        // The length stays (the next compress clears it) so that a test can see the zeros.
        packed.as_mut_slice().zeroize();
        if packed.capacity() <= BUFFER_KEEP {
            buffer.set(packed);
        }
        result
    })
}

/// Zeroizes the whole buffer if `f` panics (the normal path wipes and keeps it).
struct Wiped(Vec<u8>);

impl Drop for Wiped {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// The compressed payloads of a batch, each in an allocation of its own (made at its final
/// size before any byte goes in), wiped when dropped.
#[derive(Default)]
pub(crate) struct Packed {
    pieces: Vec<zeroize::Zeroizing<Vec<u8>>>,
}

impl Packed {
    /// Compresses `payload` and keeps it; returns its index, or `None` when compressing does
    /// not make it shorter (what was tried is wiped).
    pub(crate) fn push(&mut self, payload: &[u8]) -> Option<usize> {
        let mut piece = zeroize::Zeroizing::new(Vec::new());
        if !compress(payload, &mut piece) {
            return None;
        }
        self.pieces.push(piece);
        Some(self.pieces.len() - 1)
    }

    /// The compressed payload `push` returned `index` for.
    pub(crate) fn piece(&self, index: usize) -> &[u8] {
        self.pieces.get(index).map_or(&[], |piece| piece.as_slice())
    }
}

/// Compresses `payload` into `out`. Returns false, with `out` unspecified, when the result
/// would not be shorter than the payload. On success every byte of `out` past its new length
/// (up to its old one) is zero: nothing of the payload lies beyond the length.
pub(crate) fn compress(payload: &[u8], out: &mut Vec<u8>) -> bool {
    let bound = lz4_flex::block::get_maximum_output_size(payload.len());
    out.clear();
    out.resize(LEN_PREFIX + bound, 0);
    out[..LEN_PREFIX].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    match lz4_flex::block::compress_into(payload, &mut out[LEN_PREFIX..]) {
        Ok(n) if LEN_PREFIX + n < payload.len() => {
            out[LEN_PREFIX + n..].zeroize();
            out.truncate(LEN_PREFIX + n);
            true
        }
        _ => false,
    }
}

/// Decompresses a stored compressed payload. The error says what is wrong with it; nothing
/// here panics or allocates more than [`MAX_RATIO`] times the stored length.
pub(crate) fn decompress(stored: &[u8]) -> Result<Vec<u8>, &'static str> {
    let Some((len, block)) = stored.split_first_chunk::<LEN_PREFIX>() else {
        return Err("shorter than its length prefix");
    };
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_PAYLOAD {
        return Err("original length beyond the 1 GiB limit");
    }
    if len > block.len().saturating_mul(MAX_RATIO) {
        return Err("original length impossible for the compressed size");
    }
    let mut out = vec![0u8; len];
    match lz4_flex::block::decompress_into(block, &mut out) {
        Ok(n) if n == len => Ok(out),
        Ok(_) => Err("stream ends before the length its prefix gives"),
        Err(_) => Err("damaged LZ4 stream"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_buffer_holds_no_plaintext_after_use() {
        let text: Vec<u8> = b"secret=swordfish; ".repeat(100);
        let mut seen = Vec::new();
        let out = with_compressed(&text, |packed| {
            seen = packed.unwrap().to_vec();
            7
        });
        assert_eq!(out, 7);
        assert_eq!(decompress(&seen).unwrap(), text);
        let kept = BUFFER.with(|b| b.take());
        assert_eq!(kept.len(), seen.len(), "the buffer is kept for reuse");
        assert!(
            kept.iter().all(|&b| b == 0),
            "the compressed plaintext was left"
        );
        BUFFER.with(|b| b.set(kept));
        // A failure inside the callback wipes it too.
        let failed: Result<(), ()> = with_compressed(&text, |_| Err(()));
        assert!(failed.is_err());
        assert!(BUFFER.with(|b| b.take()).iter().all(|&b| b == 0));
    }

    #[test]
    fn round_trips_and_keeps_only_what_saves_space() {
        let text: Vec<u8> = b"tuple 0042 name=alice balance=100;".repeat(200);
        let mut out = Vec::new();
        assert!(compress(&text, &mut out));
        assert!(out.len() < text.len() / 4);
        assert_eq!(decompress(&out).unwrap(), text);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        assert!(
            !compress(&noise, &mut out),
            "incompressible data stays as it is"
        );
    }

    #[test]
    fn the_most_compressible_input_is_within_the_ratio_bound() {
        let zeros = vec![0u8; 1 << 20];
        let mut out = Vec::new();
        assert!(compress(&zeros, &mut out));
        assert_eq!(decompress(&out).unwrap(), zeros);
    }

    #[test]
    fn hostile_prefixes_and_streams_are_errors() {
        assert!(decompress(&[1, 2]).is_err());
        let mut huge = u32::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(&[0x10, b'a']);
        assert!(decompress(&huge).is_err());
        let mut claims_more = 5000u32.to_le_bytes().to_vec();
        claims_more.extend_from_slice(&[0x50, b'a', b'b', b'c', b'd', b'e']);
        assert!(decompress(&claims_more).is_err());
        let mut text = Vec::new();
        assert!(compress(&b"abcabcabcabc".repeat(50), &mut text));
        for i in LEN_PREFIX..text.len() {
            let mut bad = text.clone();
            bad[i] ^= 0xff;
            // Either an error or some bytes of the stated length: never a panic.
            if let Ok(out) = decompress(&bad) {
                assert_eq!(out.len(), 600);
            }
        }
    }
}
