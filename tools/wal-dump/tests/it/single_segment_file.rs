//! A segment file as PATH shows the records that start in that segment only, and says so when
//! it shows none (a segment prepared ahead of the writer).

use crate::support;

use serde_json::Value;
use support::*;
use walcrypt::Mode;

#[test]
fn single_segment_file() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (log, key_file, _, appended) = make_log(tmp.path(), mode, 150);
        let (path, _) = locate(&log, appended[70].lsn);
        let seg = u64::from(appended[70].lsn) / SEGMENT * SEGMENT;
        let want: Vec<u64> = appended
            .iter()
            .map(|a| u64::from(a.lsn))
            .filter(|l| (seg..seg + SEGMENT).contains(l))
            .collect();
        let o = wal_dump(&[&"--format", &"json", &"--key-file", &key_file, &path]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let got: Vec<u64> = stdout(&o)
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["lsn"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(got, want, "{mode}");
        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &path]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stdout(&o));
    }
}

#[test]
fn an_empty_prepared_segment_says_it_holds_no_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, appended) = make_log(tmp.path(), Mode::PerRecord, 20);
    // A segment prepared ahead: the next segment's header page, and zeros.
    let last = u64::from(appended.last().unwrap().lsn) / SEGMENT * SEGMENT;
    let (path, _) = locate(&log, appended.last().unwrap().lsn);
    let bytes = std::fs::read(&path).unwrap();
    let mut header = walcrypt::inspect::SegmentHeader::decode(&bytes[..PAGE as usize]).unwrap();
    header.start = walcrypt::Lsn(last + SEGMENT);
    let mut next = vec![0u8; SEGMENT as usize];
    header.encode(&mut next);
    let name = walcrypt::inspect::segment_file_name(header.start);
    let next_path = log.join(&name);
    if !next_path.exists() {
        std::fs::write(&next_path, &next).unwrap();
    }

    let o = wal_dump(&[&"--key-file", &key_file, &next_path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(&format!("# no records: segment {name} has no written page")),
        "{text}"
    );
    let o = wal_dump(&[&"--format", &"json", &"--key-file", &key_file, &next_path]);
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), ""));
    assert!(stderr(&o).contains("no records"), "{}", stderr(&o));
    let o = wal_dump(&[&"--kind", &"99", &"--key-file", &key_file, &log]);
    assert!(stdout(&o).contains("# no records match"), "{}", stdout(&o));
}
