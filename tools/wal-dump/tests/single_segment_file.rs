//! A segment file as PATH shows the records that start in that segment only.

mod support;

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
