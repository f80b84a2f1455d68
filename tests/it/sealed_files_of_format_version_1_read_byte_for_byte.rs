//! Sealed files written by format version 1 (kept in `tests/golden_sealed/v1/`, with their
//! public test keys) keep opening to the same bytes: an empty file, one byte, exactly one
//! chunk, many chunks with a partial last one, and a file under a key that is no longer the
//! active one. `WALCRYPT_WRITE_SEALED_GOLDEN=1` writes them afresh (only while version 1 may
//! still change, before the first release).

use std::path::{Path, PathBuf};

use walcrypt::{KeyRing, SealedFiles, open_file, sealed_key_id};

/// `(file name, plaintext length, key id, chunk size)`.
const FILES: &[(&str, usize, u32, usize)] = &[
    ("empty.sealed", 0, 2, 64),
    ("one-byte.sealed", 1, 2, 64),
    ("one-chunk.sealed", 64, 2, 64),
    ("many-chunks.sealed", 5 * 64 + 17, 2, 64),
    ("old-key.sealed", 300, 1, 128),
    ("default-chunks.sealed", 70_000, 2, 64 << 10),
];

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden_sealed/v1")
}

fn plaintext(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn write_goldens(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut ring = KeyRing::generate().unwrap();
    let old_only = ring.clone();
    ring.rotate().unwrap();
    ring.save(dir.join("keys")).unwrap();
    for &(name, len, key_id, chunk) in FILES {
        let keys = if key_id == 1 { &old_only } else { &ring };
        SealedFiles::new(keys)
            .chunk_size(chunk)
            .write(dir.join(name), &plaintext(len))
            .unwrap();
    }
}

#[test]
fn sealed_files_of_format_version_1_read_byte_for_byte() {
    let dir = golden();
    if std::env::var_os("WALCRYPT_WRITE_SEALED_GOLDEN").is_some() {
        write_goldens(&dir);
    }
    let keys = KeyRing::load(dir.join("keys")).unwrap();
    assert_eq!(keys.active_id(), Some(2));
    for &(name, len, key_id, chunk) in FILES {
        let path = dir.join(name);
        assert_eq!(sealed_key_id(&path).unwrap(), key_id, "{name}");
        assert_eq!(open_file(&path, &keys).unwrap(), plaintext(len), "{name}");
        let bytes = std::fs::read(&path).unwrap();
        let chunk_field = u32::from_le_bytes(bytes[16..20].try_into().unwrap());
        assert_eq!(chunk_field as usize, chunk, "{name}");
    }
}
