//! In a log written without fsync (SyncMode::Buffered) no page carries a durable hint, so the
//! reader takes damage for a torn tail and just ends there. --verify still flags it: valid
//! pages follow the end of the valid log.

use crate::support;

use std::os::unix::fs::FileExt;

use support::*;
use walcrypt::{Mode, SyncMode, Wal};

#[test]
fn verify_damage_without_durable_hints() {
    let tmp = tempfile::tempdir().unwrap();
    let (keys, key_file) = new_key_file(tmp.path());
    let log = tmp.path().join("log");
    let wal = Wal::open(
        &log,
        config(Mode::PerRecord, &keys).sync(SyncMode::Buffered),
    )
    .unwrap();
    let lsns: Vec<_> = (0..150)
        .map(|i| wal.append(1, &payload(i)).unwrap())
        .collect();
    wal.flush(*lsns.last().unwrap()).unwrap();
    // Dropped, not closed: a close syncs, and the last page's header would vouch for it all.
    drop(wal);

    let victim = lsns[70..]
        .iter()
        .copied()
        .find(|l| u64::from(*l) % PAGE < PAGE - 8)
        .unwrap();
    let (path, offset) = locate(&log, victim);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[0xff], offset + 5).unwrap();
    drop(file);

    // The listing ends quietly before the damage: the reader sees a torn tail.
    let o = wal_dump(&[&"--key-file", &key_file, &log]);
    let listed = stdout(&o)
        .lines()
        .filter(|l| l.starts_with("lsn: "))
        .count();
    assert!(listed < 150, "{listed}");

    let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("the valid log ends here"), "{text}");
    assert!(text.contains(&format!("offset {offset} ")), "{text}");
}
