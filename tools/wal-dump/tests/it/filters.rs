//! --start, --end, --limit, --kind (by number or by a name from --kinds) and --key-id select
//! records; LSNs are accepted as HI/LO, 0x or decimal; --kinds names kinds and describes
//! payloads in listings.

use crate::support;

use serde_json::Value;
use support::*;
use walcrypt::Mode;

const KINDS: &str = "# the test's kinds\n1 insert utf8\n2 commit\n0x03 page_ids hex\n";

fn kinds_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kinds");
    std::fs::write(&path, KINDS).unwrap();
    path
}

fn json_lines(o: &std::process::Output) -> Vec<Value> {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn lsns(o: &std::process::Output) -> Vec<u64> {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    stdout(o)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["lsn"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
fn filters_select_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, appended) = make_log(tmp.path(), Mode::PerRecord, 120);
    let all: Vec<u64> = appended.iter().map(|a| u64::from(a.lsn)).collect();
    let start = appended[40].lsn;
    let end = appended[70].lsn;
    let forms = [
        start.to_string(),
        format!("0x{:x}", u64::from(start)),
        u64::from(start).to_string(),
    ];
    for form in &forms {
        let got = lsns(&wal_dump(&[
            &"--format",
            &"json",
            &"--start",
            form,
            &"--end",
            &end.to_string(),
            &log,
        ]));
        assert_eq!(got, all[40..70], "--start {form}");
    }
    // A start inside a record skips to the next record.
    let inside = (u64::from(appended[40].lsn) + 1).to_string();
    assert_eq!(
        lsns(&wal_dump(&[
            &"--format",
            &"json",
            &"--start",
            &inside,
            &"--limit",
            &"3",
            &log
        ])),
        all[41..44]
    );
    // Kinds and limits combine.
    let got = lsns(&wal_dump(&[
        &"--format",
        &"json",
        &"--kind",
        &"2",
        &"--kind",
        &"3",
        &"--limit",
        &"10",
        &"--key-file",
        &key_file,
        &log,
    ]));
    let want: Vec<u64> = appended
        .iter()
        .filter(|a| a.kind == 2 || a.kind == 3)
        .take(10)
        .map(|a| u64::from(a.lsn))
        .collect();
    assert_eq!(got, want);
    // A bad LSN is a usage error on one line.
    assert_fails(&wal_dump(&[&"--start", &"zz", &log]), 2, "LSN");
}

#[test]
fn kind_by_name_from_a_kinds_file_selects_what_its_number_does() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, appended) = make_log(tmp.path(), Mode::PerRecord, 60);
    let kinds = kinds_file(tmp.path());
    let by_name = lsns(&wal_dump(&[
        &"--format",
        &"json",
        &"--kinds",
        &kinds,
        &"--kind",
        &"commit",
        &"--kind",
        &"page_ids",
        &"--key-file",
        &key_file,
        &log,
    ]));
    let by_number = lsns(&wal_dump(&[
        &"--format",
        &"json",
        &"--kind",
        &"2",
        &"--kind",
        &"0x3",
        &log,
    ]));
    let want: Vec<u64> = appended
        .iter()
        .filter(|a| a.kind == 2 || a.kind == 3)
        .map(|a| u64::from(a.lsn))
        .collect();
    assert_eq!(by_name, want);
    assert_eq!(by_number, want);
    // A name the file lacks, a name without a file, a kind past 255: usage errors.
    let unknown = [
        &"--kinds" as &dyn AsRef<std::ffi::OsStr>,
        &kinds,
        &"--kind",
        &"abort",
        &log,
    ];
    assert_fails(
        &wal_dump(&unknown),
        2,
        "no kind of that name in the kinds file",
    );
    assert_fails(
        &wal_dump(&[&"--kind", &"commit", &log]),
        2,
        "needs --kinds FILE",
    );
    assert_fails(
        &wal_dump(&[&"--kind", &"256", &log]),
        2,
        "kinds are 0 to 255",
    );
    // A bad line is named with its file and number.
    let bad = tmp.path().join("bad-kinds");
    std::fs::write(&bad, "1 insert\n2 insert\n").unwrap();
    assert_fails(
        &wal_dump(&[&"--kinds", &bad, &log]),
        2,
        "line 2: name `insert` is used twice",
    );
}

#[test]
fn kinds_file_names_kinds_and_describes_payloads_in_listings() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, appended) = make_log(tmp.path(), Mode::PerRecord, 8);
    let kinds = kinds_file(tmp.path());
    let records = json_lines(&wal_dump(&[
        &"--format",
        &"json",
        &"--kinds",
        &kinds,
        &"--key-file",
        &key_file,
        &log,
    ]));
    assert_eq!(records.len(), appended.len());
    for (record, a) in records.iter().zip(&appended) {
        let name = match a.kind {
            1 => Value::from("insert"),
            2 => Value::from("commit"),
            3 => Value::from("page_ids"),
            _ => Value::Null,
        };
        assert_eq!(record["kind_name"], name, "{record}");
        // Descriptions show the first 64 bytes, then how long the payload is.
        let shown = &a.payload[..a.payload.len().min(64)];
        let more = match a.payload.len() {
            0..=64 => String::new(),
            len => format!(" ... ({len} bytes)"),
        };
        let desc = match a.kind {
            1 => Some(format!("\"{}\"{more}", std::str::from_utf8(shown).unwrap())),
            3 => Some(format!("{}{more}", hex(shown))),
            _ => None,
        };
        assert_eq!(record.get("desc").and_then(Value::as_str), desc.as_deref());
    }
    // Text: the name beside the number, the description on a line of its own.
    let o = wal_dump(&[
        &"--kinds",
        &kinds,
        &"--key-file",
        &key_file,
        &"--kind",
        &"1",
        &log,
    ]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(text.contains("kind: 1 (insert)"), "{text}");
    assert!(text.contains("  desc: \"record "), "{text}");
    // Without the key a perrecord payload cannot be described; the name is still shown.
    let records = json_lines(&wal_dump(&[&"--format", &"json", &"--kinds", &kinds, &log]));
    assert!(
        records.iter().all(|r| r.get("desc").is_none()),
        "{records:?}"
    );
    assert_eq!(records[0]["kind_name"], "insert");
    // Without --kinds no field is added.
    let records = json_lines(&wal_dump(&[&"--format", &"json", &log]));
    assert!(records.iter().all(|r| r.get("kind_name").is_none()));
}

#[test]
fn key_id_selects_the_records_of_one_key_in_perrecord_and_pagelevel() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, mut keys, first) = make_log(tmp.path(), mode, 30);
        let rotated: u32 = keys.rotate().unwrap();
        std::fs::remove_file(&key_file).unwrap();
        keys.save(&key_file).unwrap();
        let second = append(&log, mode, &keys, 30, 30);
        let listed = |id: &str| {
            lsns(&wal_dump(&[
                &"--format",
                &"json",
                &"--key-id",
                &id,
                &"--key-file",
                &key_file,
                &log,
            ]))
        };
        let lsns_of =
            |a: &[support::Appended]| -> Vec<u64> { a.iter().map(|a| u64::from(a.lsn)).collect() };
        assert_eq!(listed("1"), lsns_of(&first), "{mode}");
        assert_eq!(listed(&rotated.to_string()), lsns_of(&second), "{mode}");
        // --stats counts the same records.
        let o = wal_dump(&[
            &"--stats",
            &"--format",
            &"json",
            &"--key-id",
            &"1",
            &"--key-file",
            &key_file,
            &log,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let stats: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(stats["records"], first.len(), "{mode}: {stats}");
    }
    // A plaintext log has no key ids: nothing matches, and the listing says so.
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _, _) = make_log(tmp.path(), Mode::Plaintext, 5);
    let o = wal_dump(&[&"--key-id", &"1", &log]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("no records match"), "{}", stdout(&o));
}
