//! A sealed file cut at any length fails to open: at every chunk boundary (the last chunk
//! left is authentic but not marked final: `Truncated`), inside a chunk, inside the header;
//! a streaming reader never reports a cut file's end as the end of the file; and a writer
//! dropped without `finish` leaves a file that fails as truncated.

use std::io::{Read, Write};

use crate::support::sealed_problem as problem;
use walcrypt::{CHUNK_TAG_LEN, Error, KeyRing, SEALED_HEADER_LEN, SealedFileProblem, SealedFiles};

const CHUNK: usize = 64;
const STORED: usize = CHUNK + CHUNK_TAG_LEN;

#[test]
fn cut_at_every_length_fails_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(CHUNK);
    // A partial last chunk and an exactly full one.
    for len in [5 * CHUNK - 10, 4 * CHUNK] {
        let path = dir.path().join(format!("file-{len}"));
        let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
        files.write(&path, &data).unwrap();
        let full = std::fs::read(&path).unwrap();
        let cut_path = dir.path().join("cut");
        for cut in 0..full.len() {
            std::fs::write(&cut_path, &full[..cut]).unwrap();
            let err = files.read(&cut_path).unwrap_err();
            let text = err.to_string();
            let named = format!("sealed file {}", cut_path.display());
            assert!(text.starts_with(&named), "cut at {cut}: {text}");
            let got = problem(err);
            if cut < SEALED_HEADER_LEN {
                assert_eq!(
                    got,
                    SealedFileProblem::TruncatedHeader { len: cut as u64 },
                    "cut at {cut}"
                );
            } else if (cut - SEALED_HEADER_LEN).is_multiple_of(STORED) {
                let chunks = ((cut - SEALED_HEADER_LEN) / STORED) as u64;
                let offset = cut as u64;
                assert_eq!(
                    got,
                    SealedFileProblem::Truncated { chunks, offset },
                    "cut at {cut}"
                );
            } else {
                let chunk = ((cut - SEALED_HEADER_LEN) / STORED) as u64;
                let offset = (SEALED_HEADER_LEN + chunk as usize * STORED) as u64;
                assert!(
                    got == SealedFileProblem::ShortChunk { chunk, offset }
                        || got
                            == SealedFileProblem::AuthenticationFailed {
                                chunk,
                                offset,
                                key_id: 1
                            },
                    "cut at {cut}: {got:?}"
                );
            }
        }
    }
}

#[test]
fn streaming_reader_of_a_file_cut_at_a_chunk_boundary_fails_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(CHUNK);
    let path = dir.path().join("snapshot");
    let data = vec![7u8; 6 * CHUNK];
    files.write(&path, &data).unwrap();
    let full = std::fs::read(&path).unwrap();
    std::fs::write(&path, &full[..SEALED_HEADER_LEN + 3 * STORED]).unwrap();
    let mut reader = files.open(&path).unwrap();
    let mut out = Vec::new();
    let err = reader.read_to_end(&mut out).unwrap_err();
    // What came before the error is authentic; the end of the file is never faked.
    assert_eq!(
        out,
        &data[..2 * CHUNK],
        "chunks 0 and 1 were checked and returned"
    );
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let inner = err.into_inner().unwrap().downcast::<Error>().unwrap();
    assert_eq!(
        problem(*inner),
        SealedFileProblem::Truncated {
            chunks: 3,
            offset: (SEALED_HEADER_LEN + 3 * STORED) as u64
        }
    );
}

#[test]
fn writer_dropped_without_finish_leaves_a_truncated_file() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let files = SealedFiles::new(&keys).chunk_size(CHUNK);
    for len in [0, 10, CHUNK, 3 * CHUNK + 5] {
        let path = dir.path().join(format!("unfinished-{len}"));
        let mut writer = files.create(&path).unwrap();
        writer.write_all(&vec![1u8; len]).unwrap();
        drop(writer);
        let got = problem(files.read(&path).unwrap_err());
        assert!(
            matches!(got, SealedFileProblem::Truncated { .. }),
            "len {len}: {got:?}"
        );
    }
    // A dropped replace leaves the old file and no temporary file.
    let path = dir.path().join("manifest");
    files.write(&path, b"old manifest").unwrap();
    let mut writer = files.replace(&path).unwrap();
    writer.write_all(&[2u8; 1000]).unwrap();
    drop(writer);
    assert_eq!(files.read(&path).unwrap(), b"old manifest");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
