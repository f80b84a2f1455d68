//! Headers swapped between two sealed files, a chunk spliced in from another file, and a file
//! sealed under another key with the same id: each is detected (authentication failure at the
//! first chunk, or the wrong key named by its id), never decrypted into garbage.

use crate::support::sealed_problem as problem;
use walcrypt::{CHUNK_TAG_LEN, Key, KeyRing, SEALED_HEADER_LEN, SealedFileProblem, SealedFiles};

const CHUNK: usize = 64;
const STORED: usize = CHUNK + CHUNK_TAG_LEN;

#[test]
fn headers_swapped_between_files_fail_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(CHUNK);
    let (a, b) = (dir.path().join("snapshot-a"), dir.path().join("snapshot-b"));
    files.write(&a, &[0xaa; 3 * CHUNK]).unwrap();
    files.write(&b, &[0xbb; 3 * CHUNK]).unwrap();
    let (fa, fb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    let mut swapped_a = fb[..SEALED_HEADER_LEN].to_vec();
    swapped_a.extend_from_slice(&fa[SEALED_HEADER_LEN..]);
    let mut swapped_b = fa[..SEALED_HEADER_LEN].to_vec();
    swapped_b.extend_from_slice(&fb[SEALED_HEADER_LEN..]);
    std::fs::write(&a, &swapped_a).unwrap();
    std::fs::write(&b, &swapped_b).unwrap();
    for path in [&a, &b] {
        let got = problem(files.read(path).unwrap_err());
        assert_eq!(
            got,
            SealedFileProblem::AuthenticationFailed {
                chunk: 0,
                offset: SEALED_HEADER_LEN as u64,
                key_id: 1
            },
            "{}",
            path.display()
        );
    }

    // One chunk of b spliced into a at the same index.
    let mut spliced = fa.clone();
    let at = SEALED_HEADER_LEN + STORED;
    spliced[at..at + STORED].copy_from_slice(&fb[at..at + STORED]);
    std::fs::write(&a, &spliced).unwrap();
    let got = problem(files.read(&a).unwrap_err());
    assert!(
        matches!(
            got,
            SealedFileProblem::AuthenticationFailed { chunk: 1, .. }
        ),
        "{got:?}"
    );
}

#[test]
fn file_sealed_under_another_key_with_the_same_id_is_a_wrong_key() {
    let dir = tempfile::tempdir().unwrap();
    let ours = KeyRing::generate().unwrap();
    let theirs = KeyRing::generate().unwrap(); // also id 1, other bytes
    let path = dir.path().join("checkpoint");
    walcrypt::seal_file(&path, b"their checkpoint", &theirs).unwrap();
    let err = walcrypt::open_file(&path, &ours).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("wrong key for key id 1"), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert_eq!(problem(err), SealedFileProblem::WrongKey { key_id: 1 });

    // Their header with our check value forged in: the key check passes only with the right
    // key, so it is still refused (here as a wrong key, the check value no longer matching).
    let mut forged = std::fs::read(&path).unwrap();
    let mut ring = KeyRing::empty();
    ring.add(1, Key::from_bytes([3; 32])).unwrap();
    forged[44..52].copy_from_slice(&[0; 8]);
    std::fs::write(&path, &forged).unwrap();
    assert_eq!(
        problem(walcrypt::open_file(&path, &ring).unwrap_err()),
        SealedFileProblem::WrongKey { key_id: 1 }
    );
}
