//! `--stats` summarizes a log in each mode (run with --nocapture to see the output).

mod support;

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
