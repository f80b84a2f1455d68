//! A reader or a follower opening a log lists the segments and then reads each one's header.
//! A purge may remove the oldest segment between the two, and recycling may give its file to a
//! new segment at once: a handle opened by the old name then reads a header that names another
//! start. That is not damage: the open must look again and succeed, reading every record that
//! is still there. Here the storage plays the writer's purge and reuse right after the reader
//! opens the oldest segment's file.

use crate::support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use support::hooked::{Hooked, Hooks};
use walcrypt::inspect::segment_file_name;
use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const SEGMENT: u64 = 4096;

/// Armed with the oldest segment's path: when a reader opens it, the writer purges it and
/// appends until a new segment has taken its file.
struct PurgeAndReuse {
    armed: Mutex<Option<(PathBuf, Arc<Wal>)>>,
    reused: Mutex<bool>,
}

impl Hooks for PurgeAndReuse {
    fn opened(&self, path: &Path) {
        let mut armed = self.armed.lock().unwrap();
        let Some((oldest, wal)) = armed.as_ref() else {
            return;
        };
        if path != oldest {
            return;
        }
        let inode = std::fs::metadata(oldest).unwrap().ino();
        let dir = oldest.parent().unwrap().to_path_buf();
        assert_eq!(wal.purge_before(Lsn(SEGMENT)).unwrap(), 1);
        let files_end = u64::from(wal.end_lsn()) / SEGMENT * SEGMENT + SEGMENT;
        while u64::from(wal.end_lsn()) < files_end + 64 {
            let lsn = wal.append(1, &[9; 150]).unwrap();
            wal.flush(lsn).unwrap();
        }
        let new = dir.join(segment_file_name(Lsn(files_end)));
        *self.reused.lock().unwrap() = std::fs::metadata(new).unwrap().ino() == inode;
        *armed = None;
    }
}

fn scenario(mode: Mode, follower: bool) {
    let what = format!("{mode}, {}", if follower { "follower" } else { "reader" });
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let keys = KeyRing::generate().unwrap();
    let config = Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(SEGMENT)
        .prepare_segments(false)
        .recycle_segments(4);
    let wal = Arc::new(Wal::open(&dir, config).unwrap());
    // A record start in the third segment: where the follower starts.
    let mut from = Lsn(0);
    while u64::from(wal.end_lsn()) < 3 * SEGMENT + 100 {
        let lsn = wal.append(1, &[7; 200]).unwrap();
        wal.flush(lsn).unwrap();
        if from == Lsn(0) && u64::from(lsn) >= 2 * SEGMENT {
            from = lsn;
        }
    }
    let hooks = Arc::new(PurgeAndReuse {
        armed: Mutex::new(Some((dir.join(segment_file_name(Lsn(0))), wal.clone()))),
        reused: Mutex::new(false),
    });
    let storage = Arc::new(Hooked(hooks.clone()));
    let read = if follower {
        let mut f = Follower::open_with_storage(&dir, Some(keys.clone()), storage, from)
            .unwrap_or_else(|e| panic!("{what}: open: {e}"));
        let mut n = 0;
        while let Some(r) = f
            .next_timeout(std::time::Duration::from_millis(200))
            .unwrap()
        {
            assert!(
                r.payload == [7; 200] || r.payload == [9; 150],
                "{what}: record at {} altered",
                r.lsn
            );
            n += 1;
            if u64::from(r.lsn) >= 3 * SEGMENT {
                break;
            }
        }
        n
    } else {
        let reader = Reader::open_with_storage(&dir, Some(keys.clone()), storage)
            .unwrap_or_else(|e| panic!("{what}: open: {e}"));
        let mut n = 0;
        for r in reader.records_from(Lsn::default()) {
            let r = r.unwrap_or_else(|e| panic!("{what}: read: {e}"));
            assert!(
                r.payload == [7; 200] || r.payload == [9; 150],
                "{what}: record at {} altered",
                r.lsn
            );
            n += 1;
        }
        n
    };
    assert!(
        *hooks.reused.lock().unwrap(),
        "{what}: the purged file was not reused, the scenario did not happen"
    );
    assert!(read > 0, "{what}: nothing read");
}

#[test]
fn reader_opening_beside_a_purge_and_reuse_is_not_fooled() {
    for mode in Mode::ALL {
        scenario(mode, false);
        scenario(mode, true);
    }
}
