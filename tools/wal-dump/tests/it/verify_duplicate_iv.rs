//! --verify reports an IV used twice in a perrecord log, naming both records, even when every
//! checksum is valid.

use crate::support;

use std::os::unix::fs::FileExt;

use support::*;
use walcrypt::Mode;
use walcrypt::inspect::{
    FORMAT_VERSION, REC_CRC_AT, REC_IV_AT, RECORD_HEADER_ENCRYPTED, record_crc,
};

/// Records whose header and payload lie in one page, so the test can rewrite them in place.
fn within_one_page(a: &Appended) -> bool {
    let lsn = u64::from(a.lsn);
    !a.payload.is_empty() && lsn / PAGE == (lsn + 32 + a.payload.len() as u64 - 1) / PAGE
}

#[test]
fn verify_flags_a_duplicate_iv() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, appended) = make_log(tmp.path(), Mode::PerRecord, 150);
    let mut fitting = appended.iter().filter(|a| within_one_page(a));
    let first = fitting.next().unwrap();
    let second = fitting.nth(20).unwrap();

    let (path_a, off_a) = locate(&log, first.lsn);
    let mut iv = [0u8; walcrypt::IV_LEN];
    std::fs::File::open(&path_a)
        .unwrap()
        .read_exact_at(&mut iv, off_a + REC_IV_AT as u64)
        .unwrap();

    let (path_b, off_b) = locate(&log, second.lsn);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path_b)
        .unwrap();
    let mut record = vec![0u8; RECORD_HEADER_ENCRYPTED + second.payload.len()];
    file.read_exact_at(&mut record, off_b).unwrap();
    record[REC_IV_AT..RECORD_HEADER_ENCRYPTED].copy_from_slice(&iv);
    let (header, stored) = record.split_at(RECORD_HEADER_ENCRYPTED);
    let crc = record_crc(FORMAT_VERSION, second.lsn, header, stored);
    record[REC_CRC_AT..REC_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    file.write_all_at(&record, off_b).unwrap();
    drop(file);

    let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    let damage: Vec<&str> = text.lines().filter(|l| l.starts_with("damage: ")).collect();
    assert_eq!(damage.len(), 1, "only the IV check catches it: {text}");
    let line = damage[0];
    assert!(
        line.contains(&format!("IV {} reused under key id 1", hex(&iv))),
        "{line}"
    );
    assert!(
        line.contains(&format!("offset {off_a} ")) && line.contains(&format!("offset {off_b} ")),
        "{line}"
    );
    // Without the key the IV check still runs: headers are plaintext.
    let o = wal_dump(&[&"--verify", &log]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}
