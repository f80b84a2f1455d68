//! A key store and a checkpoint written by an earlier build (tests/golden_store/v2/, with its
//! public test KEK) keep opening: the store's wrapped key unwraps and its tag checks, the
//! checkpoint's sealed metadata opens to the same bytes, and the perrecord-gcm log under the
//! store's key reads record for record. Altered, they fail: a wrong KEK, a flipped bit in the
//! checkpoint's sealed metadata.

use std::path::Path;
use std::sync::Arc;

use walcrypt::{Checkpoint, Config, Error, Kek, Key, KeyStore, Mode, Reader};

use crate::support;

const META: &[u8] = b"golden checkpoint: snapshot-0020";

fn kek(byte: u8) -> Arc<Kek> {
    Arc::new(Kek::new(Key::from_bytes([byte; 32]), "golden-kek"))
}

fn config(store: Arc<KeyStore>) -> Config {
    Config::new(Mode::PerRecordGcm)
        .page_size(1024)
        .segment_size(4 * 1024)
        .key_store(store)
}

/// A copy of the golden in a temporary directory: opening a key store takes its lock file.
fn golden_copy() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden_store/v2");
    support::copy_dir(&golden, tmp.path());
    support::copy_dir(&golden.join("log"), &tmp.path().join("log"));
    tmp
}

#[test]
fn a_key_store_and_a_checkpoint_of_an_earlier_build_open() {
    let tmp = golden_copy();
    let store = Arc::new(KeyStore::open(tmp.path().join("keys.store"), kek(0x4b)).unwrap());
    let log = tmp.path().join("log");

    let reader = Reader::open_with_key_store(&log, &store).unwrap();
    let records: Vec<_> = reader
        .records_from(reader.first_lsn().unwrap())
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(records.len(), 20);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.kind, 1 + (i % 3) as u8, "record {i}");
        assert_eq!(r.payload, vec![i as u8; 100], "record {i}");
    }

    let cp = Checkpoint::read(&log, &config(store.clone()))
        .unwrap()
        .expect("the golden holds a checkpoint");
    assert_eq!(&cp.meta[..], META);
    assert_eq!(cp.lsn, records.last().unwrap().lsn);
}

#[test]
fn the_golden_key_store_refuses_another_kek_and_its_checkpoint_a_flipped_bit() {
    let tmp = golden_copy();
    let path = tmp.path().join("keys.store");
    assert!(KeyStore::open(&path, kek(0x4c)).is_err(), "a wrong KEK");
    let store = Arc::new(KeyStore::open(&path, kek(0x4b)).unwrap());

    // A bit of the sealed metadata (docs/FORMAT.md, "Control file": it starts at offset 57),
    // with the file's CRC32C made right again, so that only the tag can catch it.
    let control = tmp.path().join("log/walcrypt.control");
    let mut bytes = std::fs::read(&control).unwrap();
    let stored = u32::from_le_bytes(bytes[53..57].try_into().unwrap()) as usize;
    assert_eq!(stored, META.len() + 16, "the metadata and its tag");
    bytes[57 + 3] ^= 0x01;
    let body = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&control, &bytes).unwrap();
    match Checkpoint::read(tmp.path().join("log"), &config(store)) {
        Err(e @ Error::Control { .. }) => {
            assert!(e.to_string().contains("failed authentication"), "{e}")
        }
        other => panic!("a flipped bit in a sealed checkpoint: {other:?}"),
    }
}
