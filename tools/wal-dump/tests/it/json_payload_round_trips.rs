//! JSON Lines output parses, and its payloads equal what was appended (or, with --raw, the
//! bytes as stored: ciphertext in the encrypted modes).

use crate::support;

use serde_json::Value;
use support::*;
use walcrypt::Mode;

fn objects(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect()
}

#[test]
fn json_payload_round_trips() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, _, appended) = make_log(tmp.path(), mode, 150);
        let o = wal_dump(&[
            &"--key-file",
            &key_file,
            &"--format",
            &"json",
            &"--payload",
            &"hex",
            &log,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let objs = objects(&stdout(&o));
        assert_eq!(objs.len(), appended.len(), "{mode}");
        for (obj, a) in objs.iter().zip(&appended) {
            assert_eq!(obj["lsn"].as_u64(), Some(u64::from(a.lsn)));
            assert_eq!(
                obj["lsn_text"]
                    .as_str()
                    .unwrap()
                    .parse::<walcrypt::Lsn>()
                    .unwrap(),
                a.lsn
            );
            assert_eq!(obj["kind"].as_u64(), Some(a.kind as u64));
            // `len` is the header's stored length: an authenticated record adds its tag.
            let tag = if mode.is_authenticated() { 16 } else { 0 };
            assert_eq!(obj["len"].as_u64(), Some(a.payload.len() as u64 + tag));
            assert_eq!(obj["payload"].as_str(), Some(hex(&a.payload).as_str()));
            assert_eq!(obj["crc_ok"], Value::Bool(true));
            assert_eq!(obj["encrypted"], Value::Bool(mode.is_encrypted()));
            assert!(obj["end_lsn"].as_u64().unwrap() > obj["lsn"].as_u64().unwrap());
            match mode {
                Mode::Plaintext => {
                    assert!(obj["key_id"].is_null() && obj["iv"].is_null());
                }
                Mode::PerRecord | Mode::PerRecordGcm => {
                    assert_eq!(obj["key_id"].as_u64(), Some(1));
                    assert_eq!(obj["iv"].as_str().unwrap().len(), 32);
                }
                Mode::PageLevel => {
                    assert_eq!(obj["key_id"].as_u64(), Some(1));
                    assert!(obj["iv"].is_null());
                }
                other => panic!("a mode this test does not know: {other}"),
            }
        }

        let o = wal_dump(&[
            &"--key-file",
            &key_file,
            &"--format",
            &"json",
            &"--payload",
            &"hex",
            &"--raw",
            &log,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let raw = objects(&stdout(&o));
        assert_eq!(raw.len(), appended.len());
        for (obj, a) in raw.iter().zip(&appended) {
            let stored = obj["payload"].as_str().unwrap();
            let tag = if mode.is_authenticated() { 16 } else { 0 };
            assert_eq!(
                stored.len(),
                2 * (a.payload.len() + tag),
                "{mode}: as stored"
            );
            if mode.is_encrypted() && a.payload.len() >= 8 {
                assert_ne!(stored, hex(&a.payload), "{mode}: --raw shows plaintext");
            } else if !mode.is_encrypted() {
                assert_eq!(stored, hex(&a.payload));
            }
        }
    }
}
