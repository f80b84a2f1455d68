//! --verify passes a clean log in every mode, with and without the key, including after a key
//! rotation and a reopen.

mod support;

use support::*;
use walcrypt::Mode;

#[test]
fn verify_clean_log() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, mut keys, _) = make_log(tmp.path(), mode, 150);
        if mode.is_encrypted() {
            keys.rotate().unwrap();
            keys.save(&key_file).unwrap();
        }
        append(&log, mode, &keys, 150, 100);
        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{mode}: {text}{}", stderr(&o));
        assert!(
            text.contains("250 records checked: clean"),
            "{mode}: {text}"
        );
        let o = wal_dump(&[&"--verify", &log]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stdout(&o));
    }
}
