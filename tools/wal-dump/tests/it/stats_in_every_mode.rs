//! `--stats` summarizes a log in each mode (run with --nocapture to see the output), as text or
//! JSON, and on a damaged log counts what lies before the damage and says where it is (without
//! the key, a pagelevel log's damaged page headers); with --kinds its table names the kinds.

use crate::support;

use support::*;
use walcrypt::Mode;

#[test]
fn stats_in_every_mode() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, _, appended) = make_log(tmp.path(), mode, 300);
        let o = wal_dump(&[&"--stats", &"--key-file", &key_file, &log]);
        let text = stdout(&o);
        println!("=== {mode}\n{text}");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            text.contains(&format!("mode:               {mode}")),
            "{text}"
        );
        let segments = std::fs::read_dir(&log)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("wal".as_ref()))
            .count();
        assert!(
            text.contains(&format!(
                "format versions:    {} ({segments} segment",
                walcrypt::inspect::FORMAT_VERSION
            )),
            "{text}"
        );
        let total = text
            .lines()
            .find(|l| l.trim_start().starts_with("total"))
            .unwrap();
        assert!(total.contains(&format!(" {} ", appended.len())), "{total}");
        let overhead = text
            .lines()
            .find(|l| l.starts_with("encryption header overhead"))
            .unwrap();
        if mode.is_per_record() {
            // 20 more header bytes per record, and a 16-byte tag when authenticated.
            let per_record = if mode.is_authenticated() { 36 } else { 20 };
            assert!(
                overhead.contains(&format!("{} B", per_record * appended.len())),
                "{overhead}"
            );
        } else {
            assert!(overhead.contains(": 0 B"), "{overhead}");
        }
    }
}

#[test]
fn stats_as_json_in_every_mode_with_and_without_the_key() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, _, appended) = make_log(tmp.path(), mode, 300);
        let o = wal_dump(&[
            &"--stats",
            &"--format",
            &"json",
            &"--key-file",
            &key_file,
            &log,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let stats: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
        assert_eq!(stats["mode"], mode.to_string(), "{stats}");
        assert_eq!(stats["records"], appended.len(), "{stats}");
        assert_eq!(stats["total"]["count"], appended.len(), "{stats}");
        let payload: usize = appended.iter().map(|a| a.payload.len()).sum();
        if !mode.is_authenticated() {
            assert_eq!(stats["total"]["payload_bytes"], payload, "{stats}");
        }
        let per_kind: u64 = stats["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["count"].as_u64().unwrap())
            .sum();
        assert_eq!(per_kind, appended.len() as u64, "{stats}");
        assert_eq!(stats["first_lsn"], u64::from(appended[0].lsn), "{stats}");
        assert!(stats["bytes"]["log_bytes"].as_u64().unwrap() > payload as u64);
        assert!(stats["damage"].is_null(), "{stats}");
        for field in [
            "segments",
            "page_size",
            "segment_size",
            "format_versions",
            "key_ids_listed",
            "key_ids_in_use",
            "end_lsn_text",
        ] {
            assert!(stats.get(field).is_some(), "{field} missing: {stats}");
        }

        let o = wal_dump(&[&"--stats", &"--format", &"json", &log]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let stats: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
        if mode == Mode::PageLevel {
            assert!(stats["records"].is_null(), "{stats}");
            assert!(!stats["key_ids_in_pages"].as_array().unwrap().is_empty());
        } else {
            assert_eq!(stats["records"], appended.len(), "{stats}");
        }
    }
}

/// `--stats` of a damaged log, which must exit 1: its text and its `damage:` line.
fn stats_of_a_damaged_log(log: &std::path::Path) -> (String, String) {
    let o = wal_dump(&[&"--stats", &log]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}{}", stderr(&o));
    let damage = text
        .lines()
        .find(|l| l.starts_with("damage: "))
        .expect(&text)
        .to_string();
    (text, damage)
}

#[test]
fn stats_on_a_damaged_log_counts_what_lies_before_the_damage_and_names_where_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, appended) = make_log(tmp.path(), Mode::Plaintext, 300);
    let victim = (150..300)
        .find(|&i| {
            let lsn = u64::from(appended[i].lsn);
            !appended[i].payload.is_empty() && lsn / PAGE == (lsn + 12) / PAGE
        })
        .unwrap();
    let (path, offset) = locate(&log, appended[victim].lsn);
    flip_bits(&path, offset + 12, 0x10);

    let (text, damage) = stats_of_a_damaged_log(&log);
    assert!(
        text.contains(&format!("records:            {victim}\n")),
        "{text}"
    );
    let segment = path.file_name().unwrap().to_str().unwrap();
    assert!(
        damage.contains(segment) && damage.contains(&appended[victim].lsn.to_string()),
        "{damage}"
    );
    assert!(
        text.contains("counted: the records before the damage only"),
        "{text}"
    );

    let o = wal_dump(&[&"--stats", &"--format", &"json", &log]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let stats: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
    assert_eq!(stats["records"], victim, "{stats}");
    assert!(
        stats["damage"].as_str().unwrap().contains(segment),
        "{stats}"
    );
}

/// Without the key a pagelevel log's records cannot be counted, but its page headers are
/// plaintext: a damaged one in the middle of the log is damage (exit 1, named where it is), as
/// `--verify` reports it, not a clean summary.
#[test]
fn stats_without_the_key_report_a_damaged_page_header_of_a_pagelevel_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, appended) = make_log(tmp.path(), Mode::PageLevel, 300);
    let o = wal_dump(&[&"--stats", &log]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(!stdout(&o).contains("damage"), "{}", stdout(&o));

    // The header of the page holding record 150: later pages of the segment were written.
    let lsn = u64::from(appended[150].lsn);
    let page = walcrypt::Lsn(lsn - lsn % PAGE);
    let (path, offset) = locate(&log, page);
    assert!(
        offset >= 2 * PAGE,
        "a page after the segment's first: {offset}"
    );
    flip_bits(&path, offset + 8, 0x40);

    let (text, damage) = stats_of_a_damaged_log(&log);
    let segment = path.file_name().unwrap().to_str().unwrap();
    assert!(
        damage.contains(segment) && damage.contains(&format!("offset {offset}")),
        "{damage}"
    );
    assert!(text.contains("pass --key-file to count records"), "{text}");

    let o = wal_dump(&[&"--stats", &"--format", &"json", &log]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let stats: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
    assert!(stats["records"].is_null(), "{stats}");
    assert!(
        stats["damage"].as_str().unwrap().contains(segment),
        "{stats}"
    );
}

#[test]
fn stats_name_the_kinds_a_kinds_file_names() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, _) = make_log(tmp.path(), Mode::Plaintext, 40);
    let kinds = tmp.path().join("kinds");
    std::fs::write(&kinds, "1 insert utf8\n2 commit\n").unwrap();
    let o = wal_dump(&[&"--stats", &"--kinds", &kinds, &log]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let row = |kind: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(kind))
            .unwrap_or_else(|| panic!("no row for kind {kind}: {text}"))
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    };
    assert_eq!(row("kind"), "name", "{text}");
    assert_eq!(row("1"), "insert", "{text}");
    assert_eq!(row("2"), "commit", "{text}");
    assert_eq!(row("3"), "-", "{text}");

    let o = wal_dump(&[
        &"--stats",
        &"--format",
        &"json",
        &"--kinds",
        &kinds,
        &"--kind",
        &"commit",
        &log,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let stats: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one object");
    assert_eq!(stats["kinds"].as_array().unwrap().len(), 1, "{stats}");
    assert_eq!(stats["kinds"][0]["kind"], 2, "{stats}");
    assert_eq!(stats["kinds"][0]["name"], "commit", "{stats}");
    assert_eq!(stats["records"], 10, "{stats}");
}
