//! A sealed file with any one byte flipped, in the header or in any chunk's ciphertext or tag,
//! fails to open with an error that names the damage (a body byte: its chunk and offset), and
//! a streaming reader returns nothing of the damaged chunk.

use std::io::Read;

use crate::support::sealed_problem as problem;
use walcrypt::{CHUNK_TAG_LEN, KeyRing, SEALED_HEADER_LEN, SealedFileProblem, SealedFiles};

const CHUNK: usize = 64;
const STORED: usize = CHUNK + CHUNK_TAG_LEN;

#[test]
fn every_flipped_byte_fails_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(CHUNK);
    let path = dir.path().join("snapshot");
    let data: Vec<u8> = (0..2 * CHUNK + 30).map(|i| i as u8).collect();
    files.write(&path, &data).unwrap();
    let good = std::fs::read(&path).unwrap();
    let flipped = dir.path().join("flipped");
    for at in 0..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = good.clone();
            bad[at] ^= bit;
            std::fs::write(&flipped, &bad).unwrap();
            let err = files.read(&flipped).unwrap_err();
            let text = err.to_string();
            let named = format!("sealed file {}", flipped.display());
            assert!(text.starts_with(&named), "byte {at}: {text}");
            let got = problem(err);
            if at < SEALED_HEADER_LEN {
                // Header fields: each is refused by its check, by the key check value, or by
                // the tag of the first chunk (the header is every chunk's associated data).
                assert!(
                    matches!(
                        got,
                        SealedFileProblem::NotSealed
                            | SealedFileProblem::UnsupportedVersion { .. }
                            | SealedFileProblem::HeaderField(_)
                            | SealedFileProblem::MissingKey { .. }
                            | SealedFileProblem::WrongKey { .. }
                            | SealedFileProblem::ShortChunk { .. }
                            | SealedFileProblem::AuthenticationFailed { .. }
                    ),
                    "header byte {at}: {got:?}"
                );
            } else {
                let chunk = ((at - SEALED_HEADER_LEN) / STORED) as u64;
                let offset = (SEALED_HEADER_LEN + chunk as usize * STORED) as u64;
                assert_eq!(
                    got,
                    SealedFileProblem::AuthenticationFailed {
                        chunk,
                        offset,
                        key_id: 1
                    },
                    "body byte {at}"
                );
            }
        }
    }
}

#[test]
fn header_bytes_the_key_check_cannot_see_still_fail_the_first_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(CHUNK);
    let path = dir.path().join("manifest");
    files.write(&path, &[9u8; 3 * CHUNK]).unwrap();
    let mut bad = std::fs::read(&path).unwrap();
    // The chunk size (bytes 16..20) is not an input of the file key: 64 -> 80 keeps the key
    // and its check value, and still fails, at chunk 0, by the header in the associated data.
    bad[16] = 80;
    std::fs::write(&path, &bad).unwrap();
    let got = problem(files.read(&path).unwrap_err());
    assert!(
        matches!(
            got,
            SealedFileProblem::AuthenticationFailed { chunk: 0, .. }
        ),
        "{got:?}"
    );
}

#[test]
fn streaming_reader_returns_nothing_of_a_damaged_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(CHUNK);
    let path = dir.path().join("snapshot");
    let data = vec![0x5au8; 4 * CHUNK];
    files.write(&path, &data).unwrap();
    let mut bad = std::fs::read(&path).unwrap();
    bad[SEALED_HEADER_LEN + 2 * STORED + 10] ^= 4; // inside chunk 2
    std::fs::write(&path, &bad).unwrap();
    let mut reader = files.open(&path).unwrap();
    let mut out = Vec::new();
    let err = reader.read_to_end(&mut out).unwrap_err();
    assert_eq!(out.len(), 2 * CHUNK, "only chunks 0 and 1");
    assert!(err.to_string().contains("chunk 2"), "{err}");
    // Reading again fails again; it never skips the damaged chunk.
    let mut more = [0u8; 16];
    assert!(reader.read(&mut more).is_err());
}
