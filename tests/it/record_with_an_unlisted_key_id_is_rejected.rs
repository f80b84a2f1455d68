//! A record (perrecord) or page (pagelevel) whose key id was changed to another key of the
//! ring, with its checksum recomputed, is rejected as damage naming the key id: the segment
//! header does not list that key, and decrypting with it would give garbage.

use std::os::unix::fs::FileExt;

use walcrypt::inspect::{PAGE_HEADER_LEN, PageHeader, record_crc, segment_file_name};
use walcrypt::{Config, CorruptionKind, Error, Key, KeyRing, Lsn, Mode, Reader, Wal};

const PAGE: u64 = 1024;

fn write_log(dir: &std::path::Path, mode: Mode, keys: &KeyRing) {
    let config = Config::new(mode)
        .keys(keys.clone())
        .page_size(PAGE)
        .segment_size(16 * PAGE);
    let wal = Wal::open(dir, config).unwrap();
    for i in 0..40u8 {
        wal.append(1, &[i; 60]).unwrap();
    }
    wal.close().unwrap();
}

fn file_at(dir: &std::path::Path, lsn: u64) -> (std::fs::File, u64) {
    let seg = lsn - lsn % (16 * PAGE);
    let path = dir.join(segment_file_name(Lsn(seg)));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    (file, lsn - seg)
}

fn expect_unlisted(dir: &std::path::Path, ring: &KeyRing) {
    let reader = Reader::open(dir, Some(ring.clone())).unwrap();
    let err = reader
        .records_from(Lsn::default())
        .find_map(Result::err)
        .expect("the altered key id is rejected");
    assert!(
        matches!(
            err,
            Error::Corrupt {
                kind: CorruptionKind::UnlistedKey { key_id: 2 },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("key id 2"), "{err}");
}

#[test]
fn record_with_an_unlisted_key_id_is_rejected() {
    let mut ring = KeyRing::empty();
    ring.add(1, Key::generate().unwrap()).unwrap();
    let mut wider = ring.clone();
    wider.add(2, Key::generate().unwrap()).unwrap();

    // perrecord: the fifth record's header names key 2.
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), Mode::PerRecord, &ring);
    let reader = Reader::open(dir.path(), Some(ring.clone())).unwrap();
    let mut rec = reader
        .raw_records_from(Lsn::default())
        .nth(4)
        .unwrap()
        .unwrap();
    let (_, iv) = rec.header.encryption.unwrap();
    rec.header.encryption = Some((2, iv));
    let mut head = vec![0u8; rec.header.len_bytes()];
    rec.header.encode(&mut head);
    rec.header.crc = record_crc(rec.format_version, rec.lsn, &head, &rec.stored);
    rec.header.encode(&mut head);
    let (file, offset) = file_at(dir.path(), rec.lsn.0);
    assert!(
        offset % PAGE + head.len() as u64 <= PAGE,
        "header within one page"
    );
    file.write_all_at(&head, offset).unwrap();
    expect_unlisted(dir.path(), &wider);
    let reopened = Wal::open(dir.path(), Config::new(Mode::PerRecord).keys(wider.clone()));
    assert!(
        matches!(reopened, Err(Error::Corrupt { .. })),
        "{reopened:?}"
    );

    // pagelevel: the first page's header names key 2.
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), Mode::PageLevel, &ring);
    let reader = Reader::open(dir.path(), Some(ring.clone())).unwrap();
    let (file, offset) = file_at(dir.path(), PAGE);
    let mut bytes = [0u8; PAGE_HEADER_LEN];
    file.read_exact_at(&mut bytes, offset).unwrap();
    let mut header = PageHeader::decode(reader.log_id(), &bytes).unwrap();
    header.key_id = 2;
    header.encode(reader.log_id(), &mut bytes);
    file.write_all_at(&bytes, offset).unwrap();
    expect_unlisted(dir.path(), &wider);
}
