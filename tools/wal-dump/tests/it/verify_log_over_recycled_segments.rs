//! --verify on a log whose newest segment is a reused file, left as the writer left it (closed,
//! not reopened): in the encrypted modes reuse does not wipe, so past the end of the log the
//! file still holds its earlier life, pages full of old records with their old page headers and
//! durable hints. That is no damage: the log is clean, with a note counting those pages (a
//! plaintext log wipes the files it reuses: zeros, and no note). A page of that earlier life
//! put back before the end of the log (a lost write) is damage, named at its position.

use crate::support;

use support::*;
use walcrypt::inspect::segment_file_name;
use walcrypt::{Lsn, Mode, Wal};

#[test]
fn verify_log_over_recycled_segments() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let (keys, key_file) = new_key_file(tmp.path());
        let log = tmp.path().join("log");
        let wal = Wal::open(
            &log,
            config(mode, &keys)
                .prepare_segments(false)
                .recycle_segments(4),
        )
        .unwrap();
        let mut i = 0;
        let mut append_to = |to: u64| {
            while u64::from(wal.end_lsn()) < to {
                let lsn = wal.append(1, &payload(i)).unwrap();
                wal.flush(lsn).unwrap();
                i += 1;
            }
        };
        append_to(4 * SEGMENT + PAGE);
        assert_eq!(wal.purge_before(Lsn(4 * SEGMENT)).unwrap(), 4);
        // Segment 3's file becomes segment 5, the first one made after the purge.
        let old = std::fs::read(log.join(format!("{}.free", segment_file_name(Lsn(3 * SEGMENT)))))
            .unwrap();
        append_to(5 * SEGMENT + 3 * PAGE + 100);
        wal.close().unwrap();
        let reused = log.join(segment_file_name(Lsn(5 * SEGMENT)));
        let now = std::fs::read(&reused).unwrap();
        let at = (5 * PAGE) as usize;
        assert_ne!(
            old[at..at + PAGE as usize],
            [0u8; PAGE as usize],
            "{mode}: old page"
        );
        let wiped = mode == Mode::Plaintext;
        match wiped {
            true => assert!(
                now[at..].iter().all(|&b| b == 0),
                "{mode}: the reused file's pages after the end are wiped"
            ),
            false => assert!(
                now[at..] == old[at..],
                "{mode}: the reused file's pages after the end keep its earlier life"
            ),
        }

        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{mode}: {text}{}", stderr(&o));
        assert!(text.contains("clean"), "{mode}: {text}");
        assert_eq!(
            text.contains("4 pages past the end of the log in reused segment files"),
            !wiped,
            "{mode}: {text}"
        );

        // Page 2 of the reused segment as the earlier life left it, before pages written
        // later: a lost write.
        let mut lost = now.clone();
        let at = (2 * PAGE) as usize;
        lost[at..at + PAGE as usize].copy_from_slice(&old[at..at + PAGE as usize]);
        std::fs::write(&reused, &lost).unwrap();
        let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {text}{}", stderr(&o));
        assert!(
            text.contains("page header carries address 0/3400, expected 0/5400"),
            "{mode}: {text}"
        );
    }
}
