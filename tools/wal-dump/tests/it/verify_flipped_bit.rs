//! --verify flags a flipped bit in the middle of the log (exit 1) with its position, and keeps
//! checking the records after it; the plain listing stops there with one line on stderr.

use crate::support;

use support::*;
use walcrypt::Mode;

#[test]
fn verify_flags_a_flipped_bit() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, _, appended) = make_log(tmp.path(), mode, 150);
        let hlen = if mode.is_per_record() { 32 } else { 12 };
        let victim = appended[60..]
            .iter()
            .find(|a| {
                let lsn = u64::from(a.lsn);
                !a.payload.is_empty() && lsn / PAGE == (lsn + hlen) / PAGE
            })
            .unwrap();
        let (path, offset) = locate(&log, victim.lsn);
        flip_bits(&path, offset + hlen, 0x10);

        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {text}");
        let seg_name = path.file_name().unwrap().to_str().unwrap();
        let line = text
            .lines()
            .find(|l| l.contains("record checksum mismatch"))
            .unwrap_or_else(|| panic!("{mode}: {text}"));
        assert!(
            line.contains(seg_name) && line.contains(&format!("offset {offset}")),
            "{line}"
        );
        assert!(text.contains("resumed reading records"), "{mode}: {text}");

        let o = wal_dump(&[&"--key-file", &key_file, &log]);
        assert_fails(&o, 1, seg_name);
        let listed = stdout(&o)
            .lines()
            .filter(|l| l.starts_with("lsn: "))
            .count();
        let before = appended.iter().filter(|a| a.lsn < victim.lsn).count();
        assert_eq!(
            listed, before,
            "{mode}: the records before the damage are listed"
        );
    }
}
