//! Records appended before a data-key rotation and made durable by it (the rotation's segment
//! switch writes and fdatasyncs everything before its switch record) reach a follower of the
//! files while the writer then stays idle, in every encrypted mode and both sync modes: the
//! last page of the segment left carries the new durable hint in its header.
//!
//! Before, the follower stopped at the last flush before the rotation, and a `flush` after it
//! changed nothing (nothing was left to write or sync): the records came only with the next
//! page written or `close`. Found by an outside probe, also at random in an engine's run.

use std::time::Duration;

use walcrypt::{Config, Follower, Key, KeyRing, Lsn, Mode, SyncMode, Wal};

#[test]
fn follower_of_an_idle_writer_sees_what_a_key_rotation_made_durable() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        for sync in [SyncMode::Durable, SyncMode::Buffered] {
            let dir = tempfile::tempdir().unwrap();
            let mut keys = KeyRing::generate().unwrap();
            let config = Config::new(mode)
                .keys(keys.clone())
                .sync(sync)
                .page_size(1024)
                .segment_size(16 * 1024);
            let wal = Wal::open(dir.path(), config).unwrap();
            for i in 0..10u8 {
                let lsn = wal.append(1, &[i; 100]).unwrap();
                wal.flush(lsn).unwrap();
            }
            if sync == SyncMode::Buffered {
                wal.sync().unwrap();
            }
            for i in 10..13u8 {
                wal.append(1, &[i; 100]).unwrap();
            }
            keys.add(2, Key::generate().unwrap()).unwrap();
            wal.activate_key(2, keys.get(2).unwrap().clone()).unwrap();
            wal.flush(wal.end_lsn()).unwrap();
            if sync == SyncMode::Buffered {
                wal.sync().unwrap();
            }

            // The writer is idle from here on; the follower reads the files.
            let mut follower = Follower::open(dir.path(), Some(keys.clone()), Lsn::default())
                .unwrap()
                .poll_interval(Duration::from_millis(5));
            let mut seen = Vec::new();
            while let Some(r) = follower.next_timeout(Duration::from_millis(500)).unwrap() {
                seen.push(r.payload[0]);
            }
            assert_eq!(seen, (0..13).collect::<Vec<u8>>(), "{mode} {sync:?}");
            wal.close().unwrap();
        }
    }
}

/// Records a crashed writer wrote but never synced, which the next open recovers (and syncs):
/// a follower of the files sees them while that writer stays idle, appending nothing, also
/// when they end exactly at a page's end (the page holding the end then has no record,
/// and the hint goes into the page before) and in pagelevel (whose writer resumes on a fresh
/// page and rewrites none of the old). Before, the pages kept the crashed writer's
/// durable hint, and the follower stopped there until the next write-out: an idle or retired
/// primary left its replica short of records its own engine had replayed. Found by an outside
/// probe (the page's end by a second look).
#[test]
fn follower_sees_what_a_reopen_recovered_from_a_crashed_writer() {
    for mode in Mode::ALL {
        for on_page_end in [false, true] {
            let what = format!("{mode}, ending on a page's end {on_page_end}");
            let tmp = tempfile::tempdir().unwrap();
            let (dir, image) = (tmp.path().join("wal"), tmp.path().join("image"));
            let keys = KeyRing::generate().unwrap();
            let config = Config::new(mode)
                .keys(keys.clone())
                .sync(SyncMode::Buffered)
                .page_size(4096)
                .segment_size(64 * 4096)
                // No segment made ahead: the copy of the live directory below (the crash
                // image) must not race the preparer renaming its temporary file.
                .prepare_segments(false);
            let wal = Wal::open(&dir, config.clone()).unwrap();
            for i in 0..10u8 {
                wal.append(1, &[i; 100]).unwrap();
            }
            wal.sync().unwrap();
            let mut last = Lsn(0);
            for i in 0..5u8 {
                let before = u64::from(wal.end_lsn());
                last = wal.append(2, &[i; 100]).unwrap();
                let overhead = u64::from(wal.end_lsn()) - before - 100;
                let room = 4096 - u64::from(wal.end_lsn()) % 4096;
                if on_page_end && i == 4 {
                    // One more record, filling the page to its last byte.
                    assert!(room > overhead + 16, "{what}: room for a record");
                    last = wal.append(3, &vec![i; (room - overhead) as usize]).unwrap();
                    assert_eq!(u64::from(wal.end_lsn()) % 4096, 0, "{what}");
                }
            }
            // Written to the files, not synced: a crash of the process keeps them.
            wal.flush(last).unwrap();
            crate::support::copy_dir(&dir, &image);
            drop(wal);

            // The reopened writer stays open and idle while the follower reads (a pagelevel
            // writer resumes on a fresh page, which only its next write-out writes).
            let wal = Wal::open(&image, config.clone()).unwrap();
            assert!(wal.end_lsn() > last, "{what}: the open recovered the five");
            let ring = (mode != Mode::Plaintext).then(|| keys.clone());
            let mut follower = Follower::open(&image, ring, Lsn(0))
                .unwrap()
                .poll_interval(Duration::from_millis(5));
            let mut got = Vec::new();
            while let Some(record) = follower.next_timeout(Duration::from_millis(300)).unwrap() {
                got.push(record.lsn);
            }
            let written = 15 + usize::from(on_page_end);
            assert_eq!(
                got.len(),
                written,
                "{what}: the follower stopped at {:?}",
                got.last()
            );
            assert_eq!(got.last(), Some(&last), "{what}");
            wal.close().unwrap();
        }
    }
}
