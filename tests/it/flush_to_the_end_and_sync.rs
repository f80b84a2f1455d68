//! `flush` accepts any LSN up to the end of the log (the end itself included) and refuses one
//! beyond it; `sync` makes everything appended durable with an fdatasync in every sync mode.

use crate::support;

use std::sync::Arc;

use support::{Recorder, RecordingStorage, read_all, small_config};
use walcrypt::{Error, KeyRing, Lsn, Mode, SyncMode, Wal};

#[test]
fn flush_of_the_end_inside_a_record_and_beyond() {
    for sync in [SyncMode::Durable, SyncMode::Buffered] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small_config(Mode::PerRecord, &keys).sync(sync)).unwrap();
        let a = wal.append(1, &[7; 300]).unwrap();
        wal.append(1, &[8; 900]).unwrap();
        let end = wal.end_lsn();
        assert!(matches!(
            wal.flush(Lsn(u64::from(end) + 1)),
            Err(Error::LsnNotAvailable { lsn, end: at }) if lsn == Lsn(u64::from(end) + 1) && at == end
        ));
        // The message names the end the position lies beyond.
        let message = wal
            .hold("replica", Lsn(u64::from(end) + 1))
            .unwrap_err()
            .to_string();
        assert!(
            message.contains(&format!("the log ends at or before {end}")),
            "{message}"
        );
        // Inside the first record: that record is flushed.
        wal.flush(Lsn(u64::from(a) + 5)).unwrap();
        assert!(wal.flushed_lsn() > Lsn(u64::from(a) + 5), "{sync:?}");
        // The end itself: everything appended is flushed.
        wal.flush(end).unwrap();
        assert_eq!(wal.flushed_lsn(), end, "{sync:?}");
        // Flushing the end again is a no-op that still succeeds.
        let fsyncs = wal.stats().fsyncs;
        wal.flush(wal.end_lsn()).unwrap();
        assert_eq!(wal.stats().fsyncs, fsyncs, "{sync:?}: nothing new to sync");
        // A record appended at the old end is flushed by a flush of its own LSN.
        let c = wal.append(2, b"after").unwrap();
        wal.flush(c).unwrap();
        assert!(wal.flushed_lsn() > c, "{sync:?}");
        wal.close().unwrap();
        assert_eq!(read_all(dir.path(), Some(keys)).len(), 3);
    }
}

#[test]
fn sync_fdatasyncs_in_buffered_mode_too() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let recorder = Arc::new(Recorder::default());
    // No segment prepared ahead: its fdatasync, on another thread, would land in the count.
    let config = small_config(Mode::PageLevel, &keys)
        .sync(SyncMode::Buffered)
        .prepare_segments(false)
        .storage(Arc::new(RecordingStorage(recorder.clone())));
    let wal = Wal::open(dir.path(), config).unwrap();
    for i in 0..20u8 {
        wal.append(1, &[i; 100]).unwrap();
    }
    let synced_before = recorder.synced.lock().unwrap().len();
    wal.flush(wal.end_lsn()).unwrap();
    assert_eq!(
        recorder.synced.lock().unwrap().len(),
        synced_before,
        "a buffered flush does not fdatasync"
    );
    wal.sync().unwrap();
    assert!(recorder.synced.lock().unwrap().len() > synced_before);
    assert_eq!(wal.flushed_lsn(), wal.end_lsn());
    // Nothing appended since: sync again has nothing to fdatasync.
    let synced = recorder.synced.lock().unwrap().len();
    wal.sync().unwrap();
    assert_eq!(recorder.synced.lock().unwrap().len(), synced);
    drop(wal);
    assert_eq!(read_all(dir.path(), Some(keys)).len(), 20);
}
