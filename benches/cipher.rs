//! AES-256-CTR throughput by record size: the key schedule shared (what the log does), expanded
//! per record (the pitfall), and the whole perrecord seal path (IV, copy, keystream, CRC32C),
//! beside the perrecord-gcm seal path (AES-256-GCM instead of CTR).

mod common;

use std::hint::black_box;
use std::time::Duration;

use aes::Aes256;
use aes_gcm::aead::AeadInOut;
use cipher::{InnerIvInit, KeyInit, StreamCipher};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use walcrypt::inspect::RECORD_HEADER_ENCRYPTED as HLEN;
use walcrypt::inspect::ctr_apply_keystream;
use walcrypt::{IV_LEN, Key};

type CtrCore<'a> = ctr::CtrCore<&'a Aes256, ctr::flavors::Ctr128BE>;

const SIZES: [usize; 7] = [16, 64, 256, 1024, 4096, 8192, 16384];

fn shared(aes: &Aes256, iv: &[u8; IV_LEN], data: &mut [u8]) {
    let core = CtrCore::inner_iv_init(aes, iv.into());
    cipher::StreamCipherCoreWrapper::from_core(core).apply_keystream(data);
}

fn iv(n: u64) -> [u8; IV_LEN] {
    let mut iv = [0u8; IV_LEN];
    iv[..8].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_be_bytes());
    iv[8..12].copy_from_slice(&(n as u32).to_be_bytes());
    iv
}

fn cipher(c: &mut Criterion) {
    let bytes = common::random_key_bytes();
    let aes = Aes256::new((&*bytes).into());
    let key = Key::from_bytes(*bytes);
    let gcm = aes_gcm::Aes256Gcm::from(aes.clone());
    let mut group = c.benchmark_group("aes256ctr");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let mut buf = common::payload(size);
        let mut n = 0u64;
        group.bench_with_input(BenchmarkId::new("shared_schedule", size), &size, |b, _| {
            b.iter(|| {
                n += 1;
                shared(&aes, &iv(n), black_box(&mut buf));
            })
        });
        group.bench_with_input(
            BenchmarkId::new("expanded_per_record", size),
            &size,
            |b, _| {
                b.iter(|| {
                    n += 1;
                    ctr_apply_keystream(&key, &iv(n), black_box(&mut buf));
                })
            },
        );
        // What `append` does in perrecord mode before the insert lock: a fresh buffer with
        // room for the header, the payload copied in, encrypted, and checksummed.
        let payload = common::payload(size);
        group.bench_with_input(BenchmarkId::new("perrecord_seal", size), &size, |b, _| {
            b.iter(|| {
                n += 1;
                let mut sealed = vec![0u8; HLEN + size];
                sealed[HLEN..].copy_from_slice(black_box(&payload));
                shared(&aes, &iv(n), &mut sealed[HLEN..]);
                let crc = crc32c::crc32c(&sealed);
                black_box((sealed, crc))
            })
        });
        // The same for perrecord-gcm: AES-256-GCM over the payload with 32 B of associated
        // data, the tag appended, the CRC32C over all of it. (The LSN is bound into the tag
        // inside the insert lock: one GHASH block, measured by walbench's lock hold times.)
        let aad = [7u8; 32];
        group.bench_with_input(
            BenchmarkId::new("perrecord_gcm_seal", size),
            &size,
            |b, _| {
                b.iter(|| {
                    n += 1;
                    let mut sealed = vec![0u8; HLEN + size + 16];
                    sealed[HLEN..HLEN + size].copy_from_slice(black_box(&payload));
                    let nonce: [u8; 12] = iv(n)[..12].try_into().unwrap_or_default();
                    let (body, tag) = sealed[HLEN..].split_at_mut(size);
                    if let Ok(t) = gcm.encrypt_inout_detached(&nonce.into(), &aad, body.into()) {
                        tag.copy_from_slice(&t);
                    }
                    let crc = crc32c::crc32c(&sealed);
                    black_box((sealed, crc))
                })
            },
        );
    }
    group.finish();

    // What perrecord-gcm adds inside the insert lock per record: one GHASH block (the LSN's
    // share of the tag, with GHASH keyed by H^(c+2) before the lock) and the CRC32C over the
    // 16 tag bytes. The clone stands in for the move of the pre-keyed hasher.
    let mut h = ghash::Key::default();
    h[0] = 0x5a;
    let keyed = ghash::GHash::new(&h);
    let mut group = c.benchmark_group("gcm_lsn_bind");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let mut lsn = 0u64;
    let mut tag = [0u8; 16];
    group.bench_function("in_insert_lock", |b| {
        b.iter(|| {
            use ghash::universal_hash::UniversalHash;
            lsn += 4096;
            let mut block = ghash::Block::default();
            block[8..].copy_from_slice(&lsn.to_le_bytes());
            let mut hash = keyed.clone();
            hash.update(&[block]);
            for (t, s) in tag.iter_mut().zip(hash.finalize().iter()) {
                *t ^= *s;
            }
            black_box(crc32c::crc32c_append(7, &tag))
        })
    });
    group.finish();
}

/// An 8 KiB page image with rows of repeating structure and some entropy (like walbench's fpw
/// images: LZ4 stores it in about half its size).
fn page_like(seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut page = Vec::with_capacity(8192);
    while page.len() < 8192 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let row = page.len() as u32 / 80;
        page.extend_from_slice(&[0x17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 5, 0, 2, 9]);
        page.extend_from_slice(&row.to_le_bytes());
        page.extend_from_slice(&(x % 100_000).to_le_bytes());
        page.extend_from_slice(format!("name-{:<10}", x % 977).as_bytes());
        page.extend_from_slice(&(1_700_000_000 + u64::from(row) * 61).to_le_bytes());
        page.extend_from_slice(&x.to_le_bytes());
        page.extend_from_slice(&x.rotate_left(17).to_le_bytes());
        page.extend_from_slice(&[0; 8]);
    }
    page.truncate(8192);
    page
}

/// Sealing one 8 KiB page image with and without LZ4 first (what `Compression::Lz4` adds in
/// the appending thread), for CTR and GCM: the CPU cost of compression against the bytes it
/// saves.
fn compress_then_seal(c: &mut Criterion) {
    let bytes = common::random_key_bytes();
    let aes = Aes256::new((&*bytes).into());
    let gcm = aes_gcm::Aes256Gcm::from(aes.clone());
    let page = page_like(0x5eed);
    let packed_len = lz4_flex::block::compress(&page).len();
    let mut group = c.benchmark_group("seal_page_image");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Bytes(page.len() as u64));
    eprintln!("page image: {} B, LZ4 block {packed_len} B", page.len());
    let mut n = 0u64;
    for lz4 in [false, true] {
        for gcm_mode in [false, true] {
            let name = match (lz4, gcm_mode) {
                (false, false) => "ctr",
                (true, false) => "lz4_ctr",
                (false, true) => "gcm",
                (true, true) => "lz4_gcm",
            };
            group.bench_function(name, |b| {
                b.iter(|| {
                    n += 1;
                    let body = if lz4 {
                        lz4_flex::block::compress(black_box(&page))
                    } else {
                        black_box(&page).clone()
                    };
                    let mut sealed = vec![0u8; HLEN + body.len() + 16];
                    sealed[HLEN..HLEN + body.len()].copy_from_slice(&body);
                    let (payload, tag) = sealed[HLEN..].split_at_mut(body.len());
                    if gcm_mode {
                        let nonce: [u8; 12] = iv(n)[..12].try_into().unwrap_or_default();
                        if let Ok(t) =
                            gcm.encrypt_inout_detached(&nonce.into(), &[0; 32], payload.into())
                        {
                            tag.copy_from_slice(&t);
                        }
                    } else {
                        shared(&aes, &iv(n), payload);
                    }
                    black_box(crc32c::crc32c(&sealed))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, cipher, compress_then_seal);
criterion_main!(benches);
