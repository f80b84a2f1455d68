//! Chunks of a sealed file swapped, duplicated over another, inserted twice, removed from the
//! middle, or the final chunk repeated after itself: each is detected, naming the first chunk
//! that is out of place, and no byte of it is returned.

use walcrypt::{CHUNK_TAG_LEN, Error, KeyRing, SEALED_HEADER_LEN, SealedFileProblem, SealedFiles};

const CHUNK: usize = 64;
const STORED: usize = CHUNK + CHUNK_TAG_LEN;

fn chunks(file: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let header = file[..SEALED_HEADER_LEN].to_vec();
    let body = file[SEALED_HEADER_LEN..]
        .chunks(STORED)
        .map(<[u8]>::to_vec)
        .collect();
    (header, body)
}

fn assemble(header: &[u8], body: &[Vec<u8>]) -> Vec<u8> {
    let mut out = header.to_vec();
    for c in body {
        out.extend_from_slice(c);
    }
    out
}

fn failed_chunk(err: Error) -> u64 {
    match err {
        Error::SealedFile {
            problem:
                SealedFileProblem::AuthenticationFailed {
                    chunk,
                    offset,
                    key_id,
                },
            ..
        } => {
            assert_eq!(offset, (SEALED_HEADER_LEN as u64) + chunk * STORED as u64);
            assert_eq!(key_id, 1);
            chunk
        }
        other => panic!("expected an authentication failure, got {other}"),
    }
}

#[test]
fn reordered_or_duplicated_chunks_fail_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(CHUNK);
    let path = dir.path().join("checkpoint");
    // Six chunks, the last one partial; every chunk's plaintext differs.
    let data: Vec<u8> = (0..5 * CHUNK + 20).map(|i| (i / CHUNK) as u8 + 1).collect();
    files.write(&path, &data).unwrap();
    let (header, body) = chunks(&std::fs::read(&path).unwrap());
    assert_eq!(body.len(), 6);
    let tampered = dir.path().join("tampered");
    let check = |body: Vec<Vec<u8>>, first_bad: u64, what: &str| {
        std::fs::write(&tampered, assemble(&header, &body)).unwrap();
        let err = files.read(&tampered).unwrap_err();
        assert!(
            err.to_string().contains("failed authentication"),
            "{what}: {err}"
        );
        assert_eq!(failed_chunk(err), first_bad, "{what}");
    };

    let mut swapped = body.clone();
    swapped.swap(1, 2);
    check(swapped, 1, "chunks 1 and 2 swapped");

    let mut copied = body.clone();
    copied[3] = body[2].clone();
    check(copied, 3, "chunk 2 copied over chunk 3");

    let mut inserted = body.clone();
    inserted.insert(2, body[1].clone());
    check(inserted, 2, "chunk 1 inserted again after itself");

    let mut removed = body.clone();
    removed.remove(2);
    check(removed, 2, "chunk 2 removed");

    let mut final_twice = body.clone();
    final_twice.push(body[5].clone());
    check(final_twice, 5, "the final chunk repeated after itself");

    let mut final_moved = body.clone();
    final_moved.remove(4);
    check(final_moved, 4, "the final chunk moved one place forward");

    let mut rotated = body.clone();
    rotated.rotate_left(1);
    check(rotated, 0, "every chunk one place forward");

    // The untouched file still opens.
    assert_eq!(files.read(&path).unwrap(), data);
}
