//! --verify passes a clean log in every mode, with and without the key, including after a key
//! rotation and a reopen; without the key it says what it could not check, and a pagelevel log
//! whose records it could not read is not called clean.

use crate::support;

use support::*;
use walcrypt::Mode;

#[test]
fn verify_clean_log() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, mut keys, _) = make_log(tmp.path(), mode, 150);
        // The reopen with a rotated ring writes a segment switch (pagelevel: after a resume
        // record on a fresh page) under a key the old segment lists.
        if mode != Mode::Plaintext {
            keys.rotate().unwrap();
            keys.save(&key_file).unwrap();
        }
        append(&log, mode, &keys, 150, 100);
        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{mode}: {text}{}", stderr(&o));
        // No progress line when stderr is not a terminal.
        assert_eq!(stderr(&o), "", "{mode}");
        assert!(
            text.contains("250 records checked: clean"),
            "{mode}: {text}"
        );
        let o = wal_dump(&[&"--verify", &log]);
        let expected = if mode == Mode::PageLevel { 3 } else { 0 };
        assert_eq!(o.status.code(), Some(expected), "{mode}: {}", stdout(&o));
    }
}

#[test]
fn verify_without_the_key_names_what_it_did_not_check_and_never_calls_unread_pages_clean() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, _, _, _) = make_log(tmp.path(), mode, 150);
        let o = wal_dump(&[&"--verify", &log]);
        let text = stdout(&o);
        let summary = text.lines().last().unwrap_or_default();
        match mode {
            Mode::Plaintext => {
                assert_eq!(o.status.code(), Some(0), "{text}");
                assert!(summary.ends_with("150 records checked: clean"), "{text}");
                assert!(!text.contains("not checked:"), "{text}");
            }
            Mode::PageLevel => {
                assert_eq!(o.status.code(), Some(3), "{text}");
                assert!(!text.contains("clean"), "{text}");
                assert!(
                    summary.contains("0 records checked: not verified"),
                    "{text}"
                );
                assert!(
                    text.contains("not checked: pages' payloads not decrypted: no --key-file"),
                    "{text}"
                );
            }
            _ => {
                assert_eq!(o.status.code(), Some(0), "{mode}: {text}");
                assert!(
                    summary.ends_with(
                        "150 records checked: clean as far as checked (see \"not checked\")"
                    ),
                    "{mode}: {text}"
                );
                assert!(
                    text.contains("not checked: payloads not decrypted: no --key-file"),
                    "{mode}: {text}"
                );
                assert_eq!(
                    text.contains("authentication tags not checked"),
                    mode.is_authenticated(),
                    "{mode}: {text}"
                );
            }
        }
        let o = wal_dump(&[&"--verify", &"--format", &"json", &log]);
        let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
        assert_eq!(report["exit_code"], o.status.code().unwrap(), "{report}");
        let (result, records) = match mode {
            Mode::PageLevel => ("not_checked", 0),
            _ => ("clean", 150),
        };
        assert_eq!(report["result"], result, "{mode}: {report}");
        assert_eq!(report["records"], records, "{mode}: {report}");
        assert!(report["pages"].as_u64().unwrap() > 0, "{report}");
        assert_eq!(
            report["not_checked"].as_array().unwrap().is_empty(),
            mode == Mode::Plaintext,
            "{report}"
        );
        for field in ["segments", "damage", "key_problems", "notes"] {
            assert!(report.get(field).is_some(), "{field} missing: {report}");
        }
    }
}
