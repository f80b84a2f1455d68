//! Sealed files hold exactly what was written, at every size around the chunk boundaries
//! (empty, one byte, exactly one chunk, one more, many chunks), written in one call or in odd
//! pieces through `io::Write`, read whole or through `io::Read` in small pieces; the file
//! is private, shows none of its plaintext, and its size follows the documented layout.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

use walcrypt::{
    CHUNK_TAG_LEN, DEFAULT_CHUNK_SIZE, KeyRing, SEALED_HEADER_LEN, SEALED_MAGIC, SealedFiles,
    SealedReader, open_file, seal_file, sealed_key_id,
};

fn payload(len: usize) -> Vec<u8> {
    // Text-like and repetitive, so a plaintext fragment on disk would be easy to spot.
    (0..len)
        .map(|i| b"secret-row-"[i % 11] ^ (i / 11) as u8)
        .collect()
}

fn stored_len(len: usize, chunk: usize) -> u64 {
    let chunks = if len == 0 { 1 } else { len.div_ceil(chunk) };
    (SEALED_HEADER_LEN + len + chunks * CHUNK_TAG_LEN) as u64
}

#[test]
fn sealed_files_round_trip_at_every_size() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let chunk = 64;
    let files = SealedFiles::new(&keys).chunk_size(chunk);
    for len in [
        0,
        1,
        15,
        63,
        64,
        65,
        127,
        128,
        129,
        64 * 10,
        64 * 10 + 1,
        1000,
    ] {
        let data = payload(len);

        // Whole, atomically.
        let path = dir.path().join(format!("whole-{len}"));
        files.write(&path, &data).unwrap();
        assert_eq!(files.read(&path).unwrap(), data, "len {len}");
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len() as u64, stored_len(len, chunk), "len {len}");
        assert_eq!(&on_disk[..8], &SEALED_MAGIC);
        if len >= 11 {
            assert!(
                !on_disk.windows(11).any(|w| w == &data[..11]),
                "len {len}: plaintext on disk"
            );
        }
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "len {len}");

        // In odd pieces through io::Write, read back 7 bytes at a time through io::Read.
        let path = dir.path().join(format!("pieces-{len}"));
        let mut writer = files.create(&path).unwrap();
        for piece in data.chunks(13) {
            writer.write_all(piece).unwrap();
        }
        writer.finish().unwrap();
        let mut reader = files.open(&path).unwrap();
        assert_eq!(reader.len_hint(), len as u64);
        let mut back = Vec::new();
        let mut small = [0u8; 7];
        loop {
            let n = reader.read(&mut small).unwrap();
            if n == 0 {
                break;
            }
            back.extend_from_slice(&small[..n]);
        }
        assert_eq!(back, data, "len {len}");
        assert_eq!(reader.read(&mut small).unwrap(), 0, "end stays the end");
    }
}

#[test]
fn default_chunk_size_and_the_convenience_functions_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    for len in [
        0,
        1,
        DEFAULT_CHUNK_SIZE,
        DEFAULT_CHUNK_SIZE + 1,
        3 * DEFAULT_CHUNK_SIZE + 77,
    ] {
        let path = dir.path().join(format!("snapshot-{len}"));
        let data = payload(len);
        seal_file(&path, &data, &keys).unwrap();
        assert_eq!(open_file(&path, &keys).unwrap(), data, "len {len}");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            stored_len(len, DEFAULT_CHUNK_SIZE)
        );
        assert_eq!(sealed_key_id(&path).unwrap(), 1);
        let mut all = Vec::new();
        SealedReader::open(&path, &keys)
            .unwrap()
            .read_to_end(&mut all)
            .unwrap();
        assert_eq!(all, data, "len {len}");
    }
    // Replacing a file keeps no temporary file behind.
    let path = dir.path().join("manifest");
    seal_file(&path, b"one", &keys).unwrap();
    seal_file(&path, b"two", &keys).unwrap();
    assert_eq!(open_file(&path, &keys).unwrap(), b"two");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn two_seals_of_the_same_bytes_share_no_ciphertext() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(64);
    let data = payload(640);
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    files.write(&a, &data).unwrap();
    files.write(&b, &data).unwrap();
    let (a, b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    // Random file id and nonce prefix, hence another file key: no 16-byte block in common.
    let body = |f: &[u8]| {
        f[SEALED_HEADER_LEN..]
            .chunks(16)
            .map(<[u8]>::to_vec)
            .collect::<Vec<_>>()
    };
    let (ba, bb) = (body(&a), body(&b));
    assert!(ba.iter().all(|block| !bb.contains(block)));
}

#[test]
fn create_refuses_an_existing_file_and_bad_chunk_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let path = dir.path().join("exists");
    std::fs::write(&path, b"engine data").unwrap();
    let err = SealedFiles::new(&keys).create(&path).unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"engine data");
    for bad in [0, 15, (16 << 20) + 1] {
        let err = SealedFiles::new(&keys)
            .chunk_size(bad)
            .write(dir.path().join("x"), b"")
            .unwrap_err();
        assert!(err.to_string().contains("chunk size"), "{err}");
    }
    let err = seal_file(dir.path().join("y"), b"", KeyRing::empty()).unwrap_err();
    assert!(err.to_string().contains("needs a key"), "{err}");
}
