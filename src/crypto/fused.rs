//! The perrecord seal in one pass on x86_64: AES-256-CTR keystream, XOR into the destination
//! and CRC32C of the ciphertext in one loop.
//!
//! Why it exists (measured, docs/BENCHMARKS.md, "Cipher"): through `aes` + `ctr` and then the
//! `crc32c` crate, the seal makes three passes over every byte (copy, keystream, CRC32C) and
//! ran at 0.60–0.68× `openssl speed -evp aes-256-ctr`, while the keystream alone ran at
//! 0.9–1.5×. Here each 128-byte chunk is encrypted eight blocks at a time (AES-NI, or VAES-256
//! two blocks per instruction when the CPU has it) and written once into the destination,
//! and the CRC32C of the chunk before it is folded with the `crc32` instruction in the same
//! iteration, so the integer CRC chain runs beside the vector AES rounds. The seal then ran at
//! 1.19–1.34× `openssl speed` from 64 B up with VAES, and 1.01–1.34× with AES-NI alone (the CRC
//! taken from registers right after each chunk instead held AES-NI at 0.84–0.88× from 1 KiB:
//! the extractions compete with `aesenc` for the vector ports). A tail under 128 bytes takes
//! the smallest batch that covers it; its last partial block is masked in general registers,
//! so no keystream beyond the data is ever stored.
//!
//! What it must equal, and the tests that check it (`tests/fused_seal_matches_the_reference.rs`
//! and the unit tests below): the counter blocks of `ctr::flavors::Ctr128BE` (the IV read as
//! one 128-bit big-endian number, plus the block index, wrapping at 2^128), AES-256 as
//! `aes::Aes256` computes it (the key expansion is compared block for block), and
//! `crc32c::crc32c_append`.
//!
//! `Schedule::new` returns `None` when the CPU lacks AES-NI, SSSE3 or SSE4.2 (run-time
//! detection); the caller then keeps the `aes` + `ctr` + `crc32c` path.
//!
//! Safety: the intrinsics are safe to call inside the `#[target_feature]` functions below; the
//! unsafe blocks are the calls into those functions (after run-time detection), the unaligned
//! vector loads and stores (each on a reference of exactly the vector's size), and the output
//! written into a `Vec`'s spare capacity: a chunk read back for its CRC once written, and the
//! length set once every byte is.

#![allow(unsafe_code)]

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use zeroize::{Zeroize, Zeroizing};

/// AES-256 has 14 rounds: 15 round keys.
const ROUND_KEYS: usize = 15;

/// Bytes per loop iteration: eight AES blocks.
const CHUNK: usize = 128;

/// An AES-256 key schedule expanded for the fused kernel, with the kernel chosen at run time.
pub(crate) struct Schedule {
    /// Round keys 0..=14, each 16 bytes as `aesenc` takes them; wiped on drop.
    round_keys: Zeroizing<[[u8; 16]; ROUND_KEYS]>,
    /// VAES-256 (with AVX2) was detected: two blocks per `vaesenc` for records of a chunk
    /// or more.
    vaes: bool,
}

impl Schedule {
    /// Expands `key`, or `None` when this CPU cannot run the kernel.
    pub(crate) fn new(key: &[u8; 32]) -> Option<Schedule> {
        if !(is_x86_feature_detected!("aes")
            && is_x86_feature_detected!("ssse3")
            && is_x86_feature_detected!("sse4.2"))
        {
            return None;
        }
        let vaes = is_x86_feature_detected!("vaes") && is_x86_feature_detected!("avx2");
        let mut round_keys = Zeroizing::new([[0u8; 16]; ROUND_KEYS]);
        // SAFETY: AES-NI and SSE2 were detected above.
        unsafe { expand(key, &mut round_keys) };
        Some(Schedule { round_keys, vaes })
    }

    /// Appends `payload` encrypted with AES-256-CTR from counter block `iv` to `out` and
    /// returns the CRC32C of `out[crc_from..]` afterwards (`crc32c::crc32c` of those bytes).
    ///
    /// A `crc_from` past the end of `out` counts as its end: the checksum is then the
    /// ciphertext's alone.
    pub(crate) fn seal_append(
        &self,
        iv: &[u8; 16],
        payload: &[u8],
        out: &mut Vec<u8>,
        crc_from: usize,
    ) -> u32 {
        let counter = u128::from_be_bytes(*iv);
        // Under one chunk the AES-NI loop is the faster (1.34× against 1.26× `openssl speed`
        // at 64 B, 1.65× against 1.38× at 16 B: the 256-bit lanes cost more to set up than
        // they save on four blocks or fewer); from one chunk up, VAES.
        if self.vaes && payload.len() >= CHUNK {
            // SAFETY: VAES, AVX2, AES-NI, SSSE3 and SSE4.2 were detected in `new`.
            unsafe { seal_vaes(&self.round_keys, counter, payload, out, crc_from) }
        } else {
            // SAFETY: AES-NI, SSSE3 and SSE4.2 were detected in `new`.
            unsafe { seal_aesni(&self.round_keys, counter, payload, out, crc_from) }
        }
    }

    /// Whether the VAES-256 loop is in use (else AES-NI).
    pub(crate) fn uses_vaes(&self) -> bool {
        self.vaes
    }

    /// AES-256 of one block with these round keys (for the tests that compare the expansion).
    #[cfg(test)]
    fn encrypt_block(&self, block: &[u8; 16]) -> [u8; 16] {
        // SAFETY: AES-NI was detected in `new`.
        unsafe { encrypt_one(&self.round_keys, block) }
    }
}

#[inline]
fn load(b: &[u8; 16]) -> __m128i {
    // SAFETY: `b` is 16 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

#[inline]
fn store(b: &mut [MaybeUninit<u8>; 16], v: __m128i) {
    // SAFETY: `b` is 16 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), v) }
}

/// The AES-256 key expansion with `aeskeygenassist` (FIPS 197 §5.2; the sequence of Intel's
/// AES-NI white paper). Checked against `aes::Aes256` by the tests.
#[target_feature(enable = "aes,sse2")]
fn expand(key: &[u8; 32], out: &mut [[u8; 16]; ROUND_KEYS]) {
    #[inline]
    #[target_feature(enable = "aes,sse2")]
    fn mix(mut a: __m128i, t: __m128i) -> __m128i {
        a = _mm_xor_si128(a, _mm_slli_si128::<4>(a));
        a = _mm_xor_si128(a, _mm_slli_si128::<4>(a));
        a = _mm_xor_si128(a, _mm_slli_si128::<4>(a));
        _mm_xor_si128(a, t)
    }
    let (lo, hi) = key.split_at(16);
    let mut k = [_mm_setzero_si128(); ROUND_KEYS];
    k[0] = load(lo.try_into().unwrap_or(&[0; 16]));
    k[1] = load(hi.try_into().unwrap_or(&[0; 16]));
    // Round key `i` (even) from `i - 2` and the rotated, substituted last word of `i - 1`.
    macro_rules! even {
        ($i:expr, $rcon:expr) => {
            let t = _mm_shuffle_epi32::<0xff>(_mm_aeskeygenassist_si128::<$rcon>(k[$i - 1]));
            k[$i] = mix(k[$i - 2], t);
        };
    }
    // Round key `i` (odd) from `i - 2` and the substituted (not rotated) last word of `i - 1`.
    macro_rules! odd {
        ($i:expr) => {
            let t = _mm_shuffle_epi32::<0xaa>(_mm_aeskeygenassist_si128::<0>(k[$i - 1]));
            k[$i] = mix(k[$i - 2], t);
        };
    }
    even!(2, 0x01);
    odd!(3);
    even!(4, 0x02);
    odd!(5);
    even!(6, 0x04);
    odd!(7);
    even!(8, 0x08);
    odd!(9);
    even!(10, 0x10);
    odd!(11);
    even!(12, 0x20);
    odd!(13);
    even!(14, 0x40);
    for (o, v) in out.iter_mut().zip(k) {
        // SAFETY: `o` is 16 writable bytes; `storeu` has no alignment requirement.
        unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), v) };
    }
    // The working copy on the stack holds the schedule too.
    k.zeroize();
}

#[cfg(test)]
#[target_feature(enable = "aes,sse2")]
fn encrypt_one(rk: &[[u8; 16]; ROUND_KEYS], block: &[u8; 16]) -> [u8; 16] {
    let mut b = _mm_xor_si128(load(block), load(&rk[0]));
    for k in &rk[1..ROUND_KEYS - 1] {
        b = _mm_aesenc_si128(b, load(k));
    }
    b = _mm_aesenclast_si128(b, load(&rk[ROUND_KEYS - 1]));
    let mut out = [MaybeUninit::new(0u8); 16];
    store(&mut out, b);
    out.map(|b| {
        // SAFETY: initialized above.
        unsafe { b.assume_init() }
    })
}

/// Byte reversal of a 128-bit lane: the little-endian `(lo, hi)` u64 pair becomes the
/// big-endian counter block.
#[inline]
#[target_feature(enable = "ssse3")]
fn reverse_mask() -> __m128i {
    _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
}

/// Folds the 16 bytes of `v` into the CRC32C state.
#[inline]
#[target_feature(enable = "sse4.1,sse4.2")]
fn crc_block(state: u32, v: __m128i) -> u32 {
    let s = _mm_crc32_u64(u64::from(state), _mm_cvtsi128_si64(v) as u64);
    _mm_crc32_u64(s, _mm_extract_epi64::<1>(v) as u64) as u32
}

/// Folds `bytes` into the CRC32C state with the `crc32` instruction.
#[inline]
#[target_feature(enable = "sse4.2")]
fn crc_bytes(mut state: u32, bytes: &[u8]) -> u32 {
    let (words, rest) = bytes.as_chunks::<8>();
    let mut s = u64::from(state);
    for w in words {
        s = _mm_crc32_u64(s, u64::from_le_bytes(*w));
    }
    state = s as u32;
    let (words, rest) = rest.as_chunks::<4>();
    for w in words {
        state = _mm_crc32_u32(state, u32::from_le_bytes(*w));
    }
    for &b in rest {
        state = _mm_crc32_u8(state, b);
    }
    state
}

/// The `1..16` bytes of `s` as the low bytes of a little-endian `u128`, the rest zero,
/// without a call to `memcpy` (overlapping fixed-size reads).
#[inline]
fn read_partial(s: &[u8]) -> u128 {
    let n = s.len();
    let word = |at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or_default());
    let half = |at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or_default());
    if n >= 8 {
        u128::from(word(0)) | (u128::from(word(n - 8)) << (8 * (n - 8)))
    } else if n >= 4 {
        u128::from(half(0)) | (u128::from(half(n - 4)) << (8 * (n - 4)))
    } else if n > 0 {
        u128::from(s[0])
            | (u128::from(s[n / 2]) << (8 * (n / 2)))
            | (u128::from(s[n - 1]) << (8 * (n - 1)))
    } else {
        0
    }
}

/// Writes the low `d.len() < 16` bytes of `v` (little-endian) into `d`, likewise.
#[inline]
fn write_partial(d: &mut [MaybeUninit<u8>], v: u128) {
    let n = d.len();
    let bytes = v.to_le_bytes();
    let mut put = |at: usize, len: usize| {
        for (d, b) in d[at..at + len].iter_mut().zip(&bytes[at..at + len]) {
            d.write(*b);
        }
    };
    if n >= 8 {
        put(0, 8);
        put(n - 8, 8);
    } else if n >= 4 {
        put(0, 4);
        put(n - 4, 4);
    } else if n > 0 {
        put(0, 1);
        put(n / 2, 1);
        put(n - 1, 1);
    }
}

/// The last `1..16` bytes: `s` XOR the keystream block `ks` into `d`, folded into the CRC32C
/// state. The block is taken to general registers and only its data bytes are written, so no
/// keystream reaches memory.
#[inline]
#[target_feature(enable = "sse4.1,sse4.2")]
fn xor_partial(ks: __m128i, s: &[u8], d: &mut [MaybeUninit<u8>], state: u32) -> u32 {
    let k = u128::from(_mm_cvtsi128_si64(ks) as u64)
        | (u128::from(_mm_extract_epi64::<1>(ks) as u64) << 64);
    let c = (read_partial(s) ^ k) & (u128::MAX >> (8 * (16 - s.len())));
    write_partial(d, c);
    crc_bytes(state, &c.to_le_bytes()[..s.len()])
}

/// The AES-NI lane: one block per `__m128i`.
mod ni {
    use super::*;

    /// Counter blocks `counter + 0..P` (mod 2^128), big-endian.
    #[inline]
    #[target_feature(enable = "ssse3,sse4.1")]
    pub(super) fn counters<const P: usize>(counter: u128) -> [__m128i; P] {
        let (lo, hi) = (counter as u64, (counter >> 64) as u64);
        let rev = reverse_mask();
        if lo <= u64::MAX - (P as u64 - 1) {
            // No carry into the high half within these blocks: vector adds on the low lane.
            let base = _mm_set_epi64x(hi as i64, lo as i64);
            std::array::from_fn(|i| {
                _mm_shuffle_epi8(_mm_add_epi64(base, _mm_set_epi64x(0, i as i64)), rev)
            })
        } else {
            std::array::from_fn(|i| {
                let c = counter.wrapping_add(i as u128);
                _mm_shuffle_epi8(_mm_set_epi64x((c >> 64) as i64, c as u64 as i64), rev)
            })
        }
    }

    /// AES-256 of `P` blocks.
    #[inline]
    #[target_feature(enable = "aes,sse2")]
    pub(super) fn aes<const P: usize>(
        rk: &[[u8; 16]; ROUND_KEYS],
        blocks: [__m128i; P],
    ) -> [__m128i; P] {
        let k0 = load(&rk[0]);
        let mut b = blocks.map(|x| _mm_xor_si128(x, k0));
        for k in &rk[1..ROUND_KEYS - 1] {
            let k = load(k);
            b = b.map(|x| _mm_aesenc_si128(x, k));
        }
        let k = load(&rk[ROUND_KEYS - 1]);
        b.map(|x| _mm_aesenclast_si128(x, k))
    }

    /// `s` XOR keystream `ks` into `d`, folded into the CRC32C state.
    #[inline]
    #[target_feature(enable = "sse4.1,sse4.2")]
    pub(super) fn xor(ks: __m128i, s: &[u8; 16], d: &mut [MaybeUninit<u8>; 16], state: u32) -> u32 {
        let c = _mm_xor_si128(ks, load(s));
        store(d, c);
        crc_block(state, c)
    }

    /// `s` XOR keystream `ks` into `d`.
    #[inline]
    #[target_feature(enable = "sse2")]
    pub(super) fn xor_only(ks: __m128i, s: &[u8; 16], d: &mut [MaybeUninit<u8>; 16]) {
        store(d, _mm_xor_si128(ks, load(s)));
    }

    /// The last `src.len() <= 16 * P` bytes from `counter`.
    #[inline]
    #[target_feature(enable = "aes,ssse3,sse4.1,sse4.2")]
    pub(super) fn tail<const P: usize>(
        rk: &[[u8; 16]; ROUND_KEYS],
        counter: u128,
        src: &[u8],
        dst: &mut [MaybeUninit<u8>],
        mut state: u32,
    ) -> u32 {
        let ks = aes::<P>(rk, counters::<P>(counter));
        let (s, s_rest) = src.as_chunks::<16>();
        let (d, d_rest) = dst.as_chunks_mut::<16>();
        for ((k, s), d) in ks.iter().zip(s).zip(d.iter_mut()) {
            state = xor(*k, s, d, state);
        }
        match ks.get(s.len()) {
            Some(k) if !s_rest.is_empty() => xor_partial(*k, s_rest, d_rest, state),
            _ => state,
        }
    }
}

/// The VAES-256 lane: two blocks per `__m256i`.
mod vaes {
    use super::*;

    /// Counter blocks `counter + 0..2P` (mod 2^128), big-endian, two to a lane.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn counters<const P: usize>(counter: u128) -> [__m256i; P] {
        let (lo, hi) = (counter as u64, (counter >> 64) as u64);
        let rev = _mm256_broadcastsi128_si256(reverse_mask());
        if lo <= u64::MAX - (2 * P as u64 - 1) {
            let base = _mm256_set_epi64x(hi as i64, (lo + 1) as i64, hi as i64, lo as i64);
            std::array::from_fn(|i| {
                let step = 2 * i as i64;
                _mm256_shuffle_epi8(
                    _mm256_add_epi64(base, _mm256_set_epi64x(0, step, 0, step)),
                    rev,
                )
            })
        } else {
            std::array::from_fn(|i| {
                let c0 = counter.wrapping_add(2 * i as u128);
                let c1 = c0.wrapping_add(1);
                let v = _mm256_set_epi64x(
                    (c1 >> 64) as i64,
                    c1 as u64 as i64,
                    (c0 >> 64) as i64,
                    c0 as u64 as i64,
                );
                _mm256_shuffle_epi8(v, rev)
            })
        }
    }

    /// AES-256 of `2P` blocks.
    #[inline]
    #[target_feature(enable = "vaes,avx2")]
    pub(super) fn aes<const P: usize>(
        rk: &[[u8; 16]; ROUND_KEYS],
        blocks: [__m256i; P],
    ) -> [__m256i; P] {
        let key = |k: &[u8; 16]| _mm256_broadcastsi128_si256(load(k));
        let k0 = key(&rk[0]);
        let mut b = blocks.map(|x| _mm256_xor_si256(x, k0));
        for k in &rk[1..ROUND_KEYS - 1] {
            let k = key(k);
            b = b.map(|x| _mm256_aesenc_epi128(x, k));
        }
        let k = key(&rk[ROUND_KEYS - 1]);
        b.map(|x| _mm256_aesenclast_epi128(x, k))
    }

    /// `s` XOR keystream `ks` into `d`, folded into the CRC32C state.
    #[inline]
    #[target_feature(enable = "avx2,sse4.1,sse4.2")]
    pub(super) fn xor(ks: __m256i, s: &[u8; 32], d: &mut [MaybeUninit<u8>; 32], state: u32) -> u32 {
        // SAFETY: `s` is 32 readable bytes; `loadu` has no alignment requirement.
        let c = _mm256_xor_si256(ks, unsafe { _mm256_loadu_si256(s.as_ptr().cast()) });
        // SAFETY: `d` is 32 writable bytes; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), c) };
        let state = crc_block(state, _mm256_castsi256_si128(c));
        crc_block(state, _mm256_extracti128_si256::<1>(c))
    }

    /// `s` XOR keystream `ks` into `d`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn xor_only(ks: __m256i, s: &[u8; 32], d: &mut [MaybeUninit<u8>; 32]) {
        // SAFETY: `s` is 32 readable bytes; `loadu` has no alignment requirement.
        let c = _mm256_xor_si256(ks, unsafe { _mm256_loadu_si256(s.as_ptr().cast()) });
        // SAFETY: `d` is 32 writable bytes; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), c) };
    }

    /// The last `src.len() <= 32 * P` bytes from `counter`.
    #[inline]
    #[target_feature(enable = "vaes,avx2,ssse3,sse4.1,sse4.2")]
    pub(super) fn tail<const P: usize>(
        rk: &[[u8; 16]; ROUND_KEYS],
        counter: u128,
        src: &[u8],
        dst: &mut [MaybeUninit<u8>],
        mut state: u32,
    ) -> u32 {
        let ks = aes::<P>(rk, counters::<P>(counter));
        let (s, s_rest) = src.as_chunks::<32>();
        let (d, d_rest) = dst.as_chunks_mut::<32>();
        for ((k, s), d) in ks.iter().zip(s).zip(d.iter_mut()) {
            state = xor(*k, s, d, state);
        }
        let Some(k) = ks.get(s.len()) else {
            return state;
        };
        // Under 32 bytes left: a whole block from the low half, then a partial one.
        let (lo, hi) = (
            _mm256_castsi256_si128(*k),
            _mm256_extracti128_si256::<1>(*k),
        );
        let (s1, s_rest) = s_rest.as_chunks::<16>();
        let (d1, d_rest) = d_rest.as_chunks_mut::<16>();
        let mut next = lo;
        if let (Some(s), Some(d)) = (s1.first(), d1.first_mut()) {
            state = ni::xor(lo, s, d, state);
            next = hi;
        }
        if s_rest.is_empty() {
            state
        } else {
            xor_partial(next, s_rest, d_rest, state)
        }
    }
}

/// The kernel: `out` gets `src` encrypted from `counter`, eight blocks (128 bytes) per
/// iteration and the rest in the smallest batch that holds it; returns the CRC32C of
/// `out[crc_from..]` afterwards. One body, two lanes.
/// Folds a chunk the loop wrote in its previous iteration into the CRC32C state.
#[inline]
#[target_feature(enable = "sse4.2")]
fn crc_chunk(state: u32, chunk: &[MaybeUninit<u8>; CHUNK]) -> u32 {
    // SAFETY: the loop wrote every byte of `chunk` before passing it here, and
    // `[MaybeUninit<u8>; N]` has the layout of `[u8; N]`.
    let bytes: &[u8; CHUNK] = unsafe { &*(chunk as *const [MaybeUninit<u8>; CHUNK]).cast() };
    crc_bytes(state, bytes)
}

macro_rules! kernel {
    ($(#[$attr:meta])* $name:ident, $features:literal, $lane:ident, $width:literal) => {
        $(#[$attr])*
        #[target_feature(enable = $features)]
        fn $name(
            rk: &[[u8; 16]; ROUND_KEYS],
            mut counter: u128,
            src: &[u8],
            out: &mut Vec<u8>,
            crc_from: usize,
        ) -> u32 {
            const LANES: usize = CHUNK / $width;
            let start = out.len();
            let mut state = crc_bytes(!0, &out[crc_from.min(start)..]);
            out.reserve(src.len());
            let dst = &mut out.spare_capacity_mut()[..src.len()];
            let (src_chunks, src_tail) = src.as_chunks::<CHUNK>();
            let (dst_chunks, dst_tail) = dst.as_chunks_mut::<CHUNK>();
            // The CRC32C of each chunk is folded one iteration later, from memory, so its
            // integer chain runs beside the next chunk's AES rounds.
            let mut prev: Option<&[MaybeUninit<u8>; CHUNK]> = None;
            for (s, d) in src_chunks.iter().zip(dst_chunks) {
                let ks = $lane::aes::<LANES>(rk, $lane::counters::<LANES>(counter));
                counter = counter.wrapping_add(8);
                if let Some(p) = prev {
                    state = crc_chunk(state, p);
                }
                let (sl, _) = s.as_chunks::<$width>();
                let (dl, _) = d.as_chunks_mut::<$width>();
                for ((k, s), d) in ks.iter().zip(sl).zip(dl.iter_mut()) {
                    $lane::xor_only(*k, s, d);
                }
                prev = Some(d);
            }
            if let Some(p) = prev {
                state = crc_chunk(state, p);
            }
            let (s, d) = (src_tail, dst_tail);
            state = match src_tail.len().div_ceil($width) {
                0 => state,
                1 => $lane::tail::<1>(rk, counter, s, d, state),
                2 => $lane::tail::<2>(rk, counter, s, d, state),
                3 | 4 => $lane::tail::<4>(rk, counter, s, d, state),
                _ => $lane::tail::<LANES>(rk, counter, s, d, state),
            };
            // SAFETY: the loops above wrote every byte of `dst`, the `src.len()` bytes of
            // spare capacity after `start` (reserved above).
            unsafe { out.set_len(start + src.len()) };
            !state
        }
    };
}

kernel!(
    /// The kernel with AES-NI.
    seal_aesni,
    "aes,ssse3,sse4.1,sse4.2",
    ni,
    16
);
kernel!(
    /// The kernel with VAES-256: two blocks per instruction.
    seal_vaes,
    "vaes,avx2,aes,ssse3,sse4.1,sse4.2",
    vaes,
    32
);

#[cfg(test)]
mod tests {
    use super::*;
    use aes::Aes256;
    use cipher::{BlockCipherEncrypt, KeyInit};

    fn key(seed: u8) -> [u8; 32] {
        // Structured keys beside the random ones below.
        std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ seed)
    }

    type Ref<'a> = ctr::CtrCore<&'a Aes256, ctr::flavors::Ctr128BE>;

    /// The reference seal: `aes` + `ctr`, then the `crc32c` crate.
    fn reference(
        key: &[u8; 32],
        iv: &[u8; 16],
        payload: &[u8],
        out: &mut Vec<u8>,
        from: usize,
    ) -> u32 {
        use cipher::{InnerIvInit, StreamCipherCore};
        let aes = Aes256::new(key.into());
        let start = out.len();
        out.extend_from_slice(payload);
        Ref::inner_iv_init(&aes, iv.into()).apply_keystream_partial((&mut out[start..]).into());
        crc32c::crc32c(&out[from.min(start)..])
    }

    /// The kernels this CPU can run: AES-NI always (when `new` succeeds), VAES when detected.
    fn kernels(key: &[u8; 32]) -> Vec<Schedule> {
        let Some(detected) = Schedule::new(key) else {
            return Vec::new();
        };
        let mut all = vec![Schedule {
            round_keys: detected.round_keys.clone(),
            vaes: false,
        }];
        if detected.vaes {
            all.push(detected);
        }
        all
    }

    fn random<const N: usize>() -> [u8; N] {
        let mut b = [0u8; N];
        getrandom::fill(&mut b).unwrap();
        b
    }

    /// IVs: random, and counters whose low 32 or 64 bits (or all 128) are about to carry.
    fn ivs() -> Vec<[u8; 16]> {
        let r = u128::from_be_bytes(random::<16>());
        vec![
            r.to_be_bytes(),
            ((r & !0xffff_ffff) | 0xffff_fffd).to_be_bytes(),
            ((r & !u128::from(u64::MAX)) | u128::from(u64::MAX - 2)).to_be_bytes(),
            ((r & !u128::from(u64::MAX)) | u128::from(u64::MAX - 9)).to_be_bytes(),
            (u128::MAX - 4).to_be_bytes(),
        ]
    }

    fn check(
        k: &Schedule,
        key: &[u8; 32],
        iv: &[u8; 16],
        payload: &[u8],
        head: &[u8],
        from: usize,
    ) {
        let mut want = head.to_vec();
        let want_crc = reference(key, iv, payload, &mut want, from);
        let mut got = head.to_vec();
        let got_crc = k.seal_append(iv, payload, &mut got, from);
        assert_eq!(
            got,
            want,
            "vaes {} len {} iv {iv:02x?}",
            k.vaes,
            payload.len()
        );
        assert_eq!(got_crc, want_crc, "vaes {} len {}", k.vaes, payload.len());
    }

    #[test]
    fn every_length_to_2_kib_and_counters_about_to_carry_match_the_reference() {
        let key = random::<32>();
        let data: Vec<u8> = (0..2048 + 15).map(|i| (i * 7 + 3) as u8).collect();
        let head = random::<32>();
        for k in kernels(&key) {
            for iv in ivs() {
                for len in 0..=2048 {
                    // Unaligned source and a 32-byte header before the output.
                    let at = len % 15;
                    check(&k, &key, &iv, &data[at..at + len], &head, 4);
                }
            }
        }
    }

    #[test]
    fn large_records_odd_headers_and_checksum_starts_match_the_reference() {
        let key = random::<32>();
        let data: Vec<u8> = (0..(1 << 20) + 100).map(|i| (i * 13 + 1) as u8).collect();
        for k in kernels(&key) {
            for iv in ivs() {
                for len in [8192, 8192 + 5, 65536 + 3, 1 << 20] {
                    check(&k, &key, &iv, &data[1..1 + len], &[], 0);
                }
                for (head, from) in [(&[][..], 0), (&[9u8; 7][..], 3), (&[5u8; 12][..], 40)] {
                    for len in [1, 17, 300] {
                        check(&k, &key, &iv, &data[3..3 + len], head, from);
                    }
                }
            }
        }
    }

    #[test]
    fn key_expansion_encrypts_like_the_aes_crate() {
        let Some(_) = Schedule::new(&key(0)) else {
            return; // no AES-NI: the kernel is never used on this CPU
        };
        let random_keys = (0..8).map(|_| random::<32>());
        for k in [0u8, 1, 0x5a, 0xff].map(key).into_iter().chain(random_keys) {
            let schedule = Schedule::new(&k).unwrap();
            let aes = Aes256::new(&k.into());
            for b in [[0u8; 16], [0xff; 16], *b"walcrypt key kcv"] {
                let mut want = b.into();
                aes.encrypt_block(&mut want);
                assert_eq!(schedule.encrypt_block(&b), <[u8; 16]>::from(want));
            }
        }
    }

    #[test]
    fn fips_197_aes256_example_vector() {
        // FIPS 197 Appendix C.3.
        let k: [u8; 32] = std::array::from_fn(|i| i as u8);
        let Some(schedule) = Schedule::new(&k) else {
            return;
        };
        let pt: [u8; 16] = std::array::from_fn(|i| (i as u8) * 0x11);
        let want = [
            0x8e, 0xa2, 0xb7, 0xca, 0x51, 0x67, 0x45, 0xbf, 0xea, 0xfc, 0x49, 0x90, 0x4b, 0x49,
            0x60, 0x89,
        ];
        assert_eq!(schedule.encrypt_block(&pt), want);
    }
}
