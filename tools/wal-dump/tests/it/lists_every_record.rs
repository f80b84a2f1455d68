//! The default output lists every record, with and without the key, in every mode.

use crate::support;

use support::*;
use walcrypt::Mode;

fn record_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("lsn: ")).collect()
}

#[test]
fn lists_every_record_with_the_key() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, _, appended) = make_log(tmp.path(), mode, 200);
        let o = wal_dump(&[&"--key-file", &key_file, &"--payload", &"text", &log]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stderr(&o));
        let text = stdout(&o);
        let lines = record_lines(&text);
        assert_eq!(lines.len(), appended.len(), "{mode}");
        for (line, a) in lines.iter().zip(&appended) {
            // The library's LSN format: the tool prints LSNs as `Lsn`'s Display does.
            let want = format!(
                "lsn: {}  len: {}  kind: {}",
                a.lsn,
                a.payload.len() + if mode.is_authenticated() { 16 } else { 0 },
                a.kind
            );
            assert!(line.starts_with(&want), "{mode}: {line} vs {want}");
            assert!(line.ends_with("crc: ok"), "{line}");
            match mode {
                Mode::PerRecord | Mode::PerRecordGcm => {
                    assert!(line.contains("key: 1  iv: "), "{line}")
                }
                Mode::PageLevel => assert!(line.contains("key: 1  iv: page"), "{line}"),
                Mode::Plaintext => assert!(line.contains("key: -  iv: -"), "{line}"),
                other => panic!("a mode this test does not know: {other}"),
            }
        }
        let payloads: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("  payload: "))
            .collect();
        assert_eq!(payloads.len(), appended.len());
        assert_eq!(
            payloads[5],
            format!(
                "  payload: \"{}\"",
                String::from_utf8(appended[5].payload.clone()).unwrap()
            )
        );
    }
}

#[test]
fn perrecord_headers_show_without_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, appended) = make_log(tmp.path(), Mode::PerRecord, 50);
    let o = wal_dump(&[&log]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let lines = record_lines(&text);
    assert_eq!(lines.len(), appended.len());
    for line in lines {
        assert!(line.contains("key: 1  iv: "), "{line}");
        assert!(line.ends_with("crc: ok  payload: encrypted"), "{line}");
    }
    let o = wal_dump(&[&"--payload", &"hex", &log]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("payload: encrypted (pass --key-file to decrypt)"));
    let o = wal_dump(&[&"--payload", &"hex", &"--format", &"json", &log]);
    assert_eq!(o.status.code(), Some(0));
    for line in stdout(&o).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["payload"].is_null() && v["encrypted"] == true, "{line}");
        assert_eq!(v["key_id"].as_u64(), Some(1));
    }
}

#[test]
fn pagelevel_without_the_key_shows_page_headers() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, _) = make_log(tmp.path(), Mode::PageLevel, 50);
    let o = wal_dump(&[&log]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let notes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("need --key-file"))
        .collect();
    assert_eq!(notes.len(), 1, "{text}");
    let pages: Vec<&str> = text.lines().filter(|l| l.starts_with("page: ")).collect();
    assert!(pages.len() > 5, "{text}");
    for p in pages {
        assert!(
            p.contains("key: 1  iv: ") && p.contains("rem_len: ") && p.contains("durable: "),
            "{p}"
        );
    }
}
