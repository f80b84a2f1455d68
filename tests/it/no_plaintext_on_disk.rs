//! A marker appended in perrecord and pagelevel mode never appears in any file of the log
//! directory; in plaintext mode it does (so the check itself can fail).

use walcrypt::{Config, KeyRing, Mode, SyncMode, Wal};

const MARKER: &[u8] = b"SECRET-MARKER-7f3a9c-do-not-leak";

fn directory_contains(dir: &std::path::Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).unwrap().any(|e| {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        bytes.windows(needle.len()).any(|w| w == needle)
    })
}

#[test]
fn marker_is_only_visible_in_plaintext_mode() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        keys.save(dir.path().join("unrelated-keyring-copy-is-not-the-log"))
            .ok();
        let log = dir.path().join("log");
        let wal = Wal::open(
            &log,
            Config::new(mode).keys(keys.clone()).sync(SyncMode::Durable),
        )
        .unwrap();
        for i in 0..200u32 {
            let mut p = i.to_le_bytes().to_vec();
            p.extend_from_slice(MARKER);
            let lsn = wal.append(1, &p).unwrap();
            if i % 7 == 0 {
                wal.flush(lsn).unwrap();
            }
        }
        // A record that spans several pages, too.
        let big: Vec<u8> = MARKER.iter().copied().cycle().take(40_000).collect();
        let lsn = wal.append(2, &big).unwrap();
        wal.flush(lsn).unwrap();
        wal.close().unwrap();
        assert_eq!(
            directory_contains(&log, MARKER),
            mode == Mode::Plaintext,
            "{mode}"
        );
    }
}
