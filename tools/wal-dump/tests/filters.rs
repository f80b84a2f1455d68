//! --start, --end, --limit and --kind select records; LSNs are accepted as HI/LO, 0x or decimal.

mod support;

use serde_json::Value;
use support::*;
use walcrypt::Mode;

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
