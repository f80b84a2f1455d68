//! A writer that reopens a log stamps its pages with "durable up to here". Before it may, it
//! must fdatasync everything the previous writer left unsynced, in every segment, not only the
//! last few: a previous writer in Buffered mode (or one that never flushed) can leave many
//! segments in the page cache when it is killed.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use support::{Recorder, RecordingStorage, payload, small_config};
use walcrypt::{KeyRing, Mode, SyncMode, Wal};

#[test]
fn reopening_fdatasyncs_every_segment_that_was_not_proven_durable() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        // The first writer never fdatasyncs its pages.
        let buffered = small_config(mode, &keys).sync(SyncMode::Buffered);
        let wal = Wal::open(dir.path(), buffered).unwrap();
        for i in 0..200 {
            wal.append(1, &payload(i, 100)).unwrap();
        }
        drop(wal);
        let segments: BTreeSet<_> = support::segment_files(dir.path()).into_iter().collect();
        assert!(segments.len() > 4, "{mode}: {} segments", segments.len());

        let recorder = Arc::new(Recorder::default());
        let watched =
            small_config(mode, &keys).storage(Arc::new(RecordingStorage(recorder.clone())));
        let wal = Wal::open(dir.path(), watched).unwrap();
        let synced: BTreeSet<_> = recorder.synced.lock().unwrap().iter().cloned().collect();
        let missing: Vec<_> = segments.difference(&synced).collect();
        assert!(missing.is_empty(), "{mode}: open left {missing:?} unsynced");
        drop(wal);
    }
}
