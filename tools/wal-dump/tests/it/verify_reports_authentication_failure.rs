//! --verify on a perrecord-gcm log reports a record whose ciphertext was altered and whose
//! CRC32C was recomputed as an authentication failure with its position (exit 1), never as a
//! checksum mismatch, and never prints its payload; the listing stops there.

use crate::support;

use std::os::unix::fs::FileExt;

use support::*;
use walcrypt::Mode;

#[test]
fn verify_reports_an_authentication_failure_with_its_position() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, appended) = make_log(tmp.path(), Mode::PerRecordGcm, 120);
    let victim = appended[40..]
        .iter()
        .find(|a| {
            let lsn = u64::from(a.lsn);
            let len = 32 + a.payload.len() as u64 + 16;
            a.payload.len() > 4 && lsn / PAGE == (lsn + len - 1) / PAGE
        })
        .unwrap();
    let (path, offset) = locate(&log, victim.lsn);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let len = 32 + victim.payload.len() + 16;
    let mut record = vec![0u8; len];
    file.read_exact_at(&mut record, offset).unwrap();
    record[32 + 2] ^= 0x01;
    let (header, stored) = record.split_at(32);
    let version = walcrypt::inspect::FORMAT_VERSION;
    let crc = walcrypt::inspect::record_crc(version, victim.lsn, header, stored);
    record[..4].copy_from_slice(&crc.to_le_bytes());
    file.write_all_at(&record, offset).unwrap();
    drop(file);

    let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    let seg_name = path.file_name().unwrap().to_str().unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("failed authentication"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(seg_name) && line.contains(&format!("offset {offset}")),
        "{line}"
    );
    assert!(!text.contains("checksum mismatch"), "{text}");

    let o = wal_dump(&[&"--key-file", &key_file, &log]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("failed authentication"),
        "{}",
        stderr(&o)
    );
    let shown = hex(&victim.payload);
    assert!(
        !stdout(&o).contains(&shown),
        "the altered record's payload is never shown"
    );
}
