//! AES-256-CTR throughput by record size: the key schedule shared (what the log does), the same
//! through `cipher`'s `StreamCipherCoreWrapper` (what it did before), expanded per record (the
//! pitfall), and the whole perrecord seal path (IV, copy, keystream, CRC32C), beside the perrecord-gcm seal path
//! (AES-256-GCM instead of CTR, AWS-LC's as the log uses it). `gcm_open` puts the check and
//! decryption of a record (what a perrecord-gcm replay does per record) by AWS-LC beside
//! RustCrypto's `aes-gcm`, which the log used before: the reason for the switch.
//!
//! After the criterion groups, a side-by-side table puts the keystream and the seal beside
//! `openssl speed -evp aes-256-ctr -bytes N` at the same sizes, measured in the same run, one
//! size at a time (OpenSSL, then walcrypt), so drifting machine load hits both alike. Without
//! the `openssl` command on the PATH the table says so and shows walcrypt's figures alone.
//! `openssl speed` keeps one context and never resets the IV; the seal starts a new IV for every
//! record (docs/BENCHMARKS.md, "Cipher", has both comparisons).

mod common;

use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use aes::Aes256;
use aes_gcm::aead::AeadInOut;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use cipher::{InnerIvInit, KeyInit, StreamCipher, StreamCipherCore};
use criterion::{BenchmarkId, Criterion, Throughput};
use walcrypt::inspect::{
    FORMAT_VERSION, RECORD_HEADER_ENCRYPTED as HLEN, bind_crc_to_lsn, ctr_apply_keystream,
    record_crc_whole,
};
use walcrypt::{IV_LEN, Key, Lsn};

type CtrCore<'a> = ctr::CtrCore<&'a Aes256, ctr::flavors::Ctr128BE>;

const SIZES: [usize; 7] = [16, 64, 256, 1024, 4096, 8192, 16384];

/// The log's keystream (`crypto::apply_keystream`): the CTR core over a shared key schedule.
fn shared(aes: &Aes256, iv: &[u8; IV_LEN], data: &mut [u8]) {
    CtrCore::inner_iv_init(aes, iv.into()).apply_keystream_partial(data.into());
}

/// The same through `StreamCipherCoreWrapper`, as the log did before: a keystream buffer set
/// up and wiped on every call.
fn wrapped(aes: &Aes256, iv: &[u8; IV_LEN], data: &mut [u8]) {
    let core = CtrCore::inner_iv_init(aes, iv.into());
    cipher::StreamCipherCoreWrapper::from_core(core).apply_keystream(data);
}

/// The log's AES-256-GCM state for `key` (AWS-LC's, as `src/aead.rs` builds it).
fn aws_lc_gcm(key: &[u8; 32]) -> LessSafeKey {
    match UnboundKey::new(&AES_256_GCM, key) {
        Ok(k) => LessSafeKey::new(k),
        Err(_) => panic!("AWS-LC could not set up an AES-256-GCM key"),
    }
}

/// A record's GCM nonce: the first 12 bytes of its IV.
fn nonce(n: u64) -> Nonce {
    let mut nonce = [0u8; 12];
    nonce.copy_from_slice(&iv(n)[..12]);
    Nonce::assume_unique_for_key(nonce)
}

fn iv(n: u64) -> [u8; IV_LEN] {
    let mut iv = [0u8; IV_LEN];
    iv[..8].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_be_bytes());
    iv[8..12].copy_from_slice(&(n as u32).to_be_bytes());
    iv
}

/// What `append` does in perrecord mode before the insert lock, into a buffer reused from call
/// to call (the writer keeps one per thread): header room, the payload copied in, encrypted
/// in place with a new IV, and the record checksum over header and ciphertext.
fn seal(aes: &Aes256, n: u64, payload: &[u8], sealed: &mut Vec<u8>) -> u32 {
    sealed.clear();
    sealed.resize(HLEN, 0);
    sealed.extend_from_slice(payload);
    sealed[16..HLEN].copy_from_slice(&iv(n));
    shared(aes, &iv(n), &mut sealed[HLEN..]);
    record_crc_whole(sealed)
}

fn cipher(c: &mut Criterion) {
    let bytes = common::random_key_bytes();
    let aes = Aes256::new((&*bytes).into());
    let key = Key::from_bytes(*bytes);
    let gcm = aws_lc_gcm(&bytes);
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
        group.bench_with_input(BenchmarkId::new("wrapper", size), &size, |b, _| {
            b.iter(|| {
                n += 1;
                wrapped(&aes, &iv(n), black_box(&mut buf));
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
        let payload = common::payload(size);
        let mut sealed = Vec::with_capacity(HLEN + size);
        group.bench_with_input(BenchmarkId::new("perrecord_seal", size), &size, |b, _| {
            b.iter(|| {
                n += 1;
                black_box(seal(&aes, n, black_box(&payload), &mut sealed))
            })
        });
        // The same for perrecord-gcm: AES-256-GCM over the payload with 32 B of associated
        // data (the LSN in it), the tag appended, the CRC32C over all of it.
        let aad = [7u8; 32];
        group.bench_with_input(
            BenchmarkId::new("perrecord_gcm_seal", size),
            &size,
            |b, _| {
                b.iter(|| {
                    n += 1;
                    let mut sealed = vec![0u8; HLEN + size + 16];
                    sealed[HLEN..HLEN + size].copy_from_slice(black_box(&payload));
                    let (body, tag) = sealed[HLEN..].split_at_mut(size);
                    if let Ok(t) = gcm.seal_in_place_separate_tag(nonce(n), Aad::from(aad), body) {
                        tag.copy_from_slice(t.as_ref());
                    }
                    let crc = crc32c::crc32c(&sealed);
                    black_box((sealed, crc))
                })
            },
        );
    }
    group.finish();

    // What a perrecord-gcm replay does per record: check the tag over 32 B of associated
    // data and the ciphertext, and decrypt it. AWS-LC (the log's) beside RustCrypto's
    // `aes-gcm` 0.11 (what the log used before). The ciphertext is copied back in each time
    // (both sides pay the copy).
    let rustcrypto = aes_gcm::Aes256Gcm::from(aes.clone());
    let mut group = c.benchmark_group("gcm_open");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let aad = [7u8; 32];
    for size in [100, 1024, 8192] {
        group.throughput(Throughput::Bytes(size as u64));
        let mut sealed = common::payload(size);
        let tag = gcm
            .seal_in_place_separate_tag(nonce(1), Aad::from(aad), &mut sealed)
            .map(|t| <[u8; 16]>::try_from(t.as_ref()).unwrap_or_default())
            .unwrap_or_default();
        let mut buf = sealed.clone();
        group.bench_with_input(BenchmarkId::new("aws_lc", size), &size, |b, _| {
            b.iter(|| {
                buf.copy_from_slice(&sealed);
                let ok = gcm.open_in_place_separate_tag(nonce(1), Aad::from(aad), &tag, &mut buf);
                assert!(ok.is_ok(), "a record sealed by AWS-LC opens");
                black_box(&buf);
            })
        });
        let n1: [u8; 12] = iv(1)[..12].try_into().unwrap_or_default();
        group.bench_with_input(BenchmarkId::new("rustcrypto", size), &size, |b, _| {
            b.iter(|| {
                buf.copy_from_slice(&sealed);
                let ok = rustcrypto.decrypt_inout_detached(
                    &n1.into(),
                    &aad,
                    buf.as_mut_slice().into(),
                    &tag.into(),
                );
                assert!(ok.is_ok(), "the same record opens with aes-gcm");
                black_box(&buf);
            })
        });
    }
    group.finish();

    // What every other record gets inside the insert lock (format version 3): the checksum
    // extended over the LSN's 4 low bytes and stored in the header.
    let mut group = c.benchmark_group("crc_lsn_bind");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let mut header = [0u8; HLEN];
    let mut lsn = 0u64;
    group.bench_function("in_insert_lock", |b| {
        b.iter(|| {
            lsn += 4096;
            let crc = bind_crc_to_lsn(FORMAT_VERSION, black_box(0x1c2f_0a11), Lsn(lsn));
            header[..4].copy_from_slice(&crc.to_le_bytes());
            black_box(&header);
        })
    });
    group.finish();
}

/// Sealing one 8 KiB page image with and without LZ4 first (what `Compression::Lz4` adds in
/// the appending thread), for CTR and GCM: the CPU cost of compression against the bytes it
/// saves.
fn compress_then_seal(c: &mut Criterion) {
    let bytes = common::random_key_bytes();
    let aes = Aes256::new((&*bytes).into());
    let gcm = aws_lc_gcm(&bytes);
    let page = common::page_like(0x5eed);
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
                        if let Ok(t) =
                            gcm.seal_in_place_separate_tag(nonce(n), Aad::from([0; 32]), payload)
                        {
                            tag.copy_from_slice(t.as_ref());
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

/// This thread's CPU time in seconds (`/proc/thread-self/schedstat`), or wall time where
/// that file is missing. `openssl speed` divides by CPU time too (unless `-elapsed`), so on a
/// loaded machine both sides count only the time they ran.
fn thread_seconds(wall: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or_else(|| wall.elapsed().as_secs_f64(), |ns| ns as f64 * 1e-9)
}

/// Bytes per CPU second of `op` over about `budget`: the median of five timed slices.
fn rate(size: usize, budget: Duration, mut op: impl FnMut(u64)) -> f64 {
    let slice = budget / 5;
    let origin = Instant::now();
    let mut n = 0u64;
    let mut rates = Vec::with_capacity(5);
    for _ in 0..5 {
        let start = Instant::now();
        let cpu0 = thread_seconds(origin);
        let mut ops = 0u64;
        while start.elapsed() < slice {
            for _ in 0..64 {
                n += 1;
                op(n);
            }
            ops += 64;
        }
        let cpu = (thread_seconds(origin) - cpu0).max(1e-9);
        rates.push(ops as f64 * size as f64 / cpu);
    }
    rates.sort_by(f64::total_cmp);
    rates[2]
}

/// `openssl speed -evp aes-256-ctr -bytes SIZE` in bytes per second, or why not.
fn openssl_speed(size: usize) -> Result<f64, String> {
    let out = Command::new("openssl")
        .args(["speed", "-evp", "aes-256-ctr", "-seconds", "1", "-bytes"])
        .arg(size.to_string())
        .output()
        .map_err(|e| format!("openssl not run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // The last line: `AES-256-CTR    8189104.55k` (thousands of bytes per second).
    let last = text
        .lines()
        .rev()
        .find(|l| {
            l.trim_start()
                .to_ascii_uppercase()
                .starts_with("AES-256-CTR")
        })
        .ok_or("openssl speed printed no AES-256-CTR line")?;
    let field = last.split_whitespace().last().unwrap_or("");
    let k: f64 = field
        .trim_end_matches('k')
        .parse()
        .map_err(|_| format!("cannot read `{field}` from openssl speed"))?;
    Ok(k * 1000.0)
}

fn openssl_side_by_side() {
    let bytes = common::random_key_bytes();
    let aes = Aes256::new((&*bytes).into());
    println!();
    println!(
        "SIDE BY SIDE: walcrypt (aes {}; portable unless built with target-cpu) vs `openssl speed -evp aes-256-ctr -bytes N -seconds 1`, same run, GB per CPU second (both sides)",
        aes_version()
    );
    println!(
        "{:>6} {:>9} {:>10} {:>6} {:>10} {:>6} {:>10} {:>6}",
        "bytes", "openssl", "keystream", "x_ossl", "seal", "x_ossl", "wrapper", "x_ossl"
    );
    let mut missing = None;
    for size in [16usize, 64, 256, 1024, 8192, 16384] {
        let ossl = match openssl_speed(size) {
            Ok(r) => Some(r),
            Err(e) => {
                missing.get_or_insert(e);
                None
            }
        };
        let mut buf = common::payload(size);
        let ks = rate(size, Duration::from_millis(600), |n| {
            shared(&aes, &iv(n), black_box(&mut buf))
        });
        let wr = rate(size, Duration::from_millis(600), |n| {
            wrapped(&aes, &iv(n), black_box(&mut buf))
        });
        let payload = common::payload(size);
        let mut sealed = Vec::with_capacity(HLEN + size);
        let sl = rate(size, Duration::from_millis(600), |n| {
            black_box(seal(&aes, n, black_box(&payload), &mut sealed));
        });
        let gb = |r: f64| format!("{:.2}", r / 1e9);
        let ratio = |r: f64| ossl.map_or("-".into(), |o| format!("{:.2}", r / o));
        println!(
            "{size:>6} {:>9} {:>10} {:>6} {:>10} {:>6} {:>10} {:>6}",
            ossl.map_or("-".into(), gb),
            gb(ks),
            ratio(ks),
            gb(sl),
            ratio(sl),
            gb(wr),
            ratio(wr)
        );
    }
    if let Some(why) = missing {
        println!("no OpenSSL figure: {why}");
    }
}

/// The `aes` version this bench was built against, from the lock file next to it.
fn aes_version() -> String {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"));
    lock.ok()
        .and_then(|l| {
            l.split("[[package]]")
                .find(|p| p.contains("name = \"aes\"\n"))
                .and_then(|p| p.lines().find_map(|x| x.strip_prefix("version = ")))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    cipher(&mut c);
    compress_then_seal(&mut c);
    c.final_summary();
    // `cargo test --benches` runs each bench once as a test: no side-by-side table then.
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--test" || a == "--list") {
        openssl_side_by_side();
    }
}
