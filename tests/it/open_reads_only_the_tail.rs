//! Opening a long log for writing reads the segment headers and the last segments, not the
//! whole log: the end is found from a record boundary near the end that a durable page vouches
//! for.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use support::{Recorder, RecordingStorage, payload};
use walcrypt::{Config, KeyRing, Mode, SyncMode, Wal};

#[test]
fn open_reads_a_bounded_tail_of_a_long_log() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let segment = 64 * 1024;
        let config = Config::new(mode)
            .keys(keys.clone())
            .page_size(4096)
            .segment_size(segment)
            .sync(SyncMode::Durable);
        let wal = Wal::open(dir.path(), config.clone()).unwrap();
        // About 40 segments of records that straddle segment boundaries, flushed often.
        let mut i = 0u64;
        while u64::from(wal.end_lsn()) < 40 * segment {
            let lsn = wal.append(1, &payload(i, 700)).unwrap();
            if i.is_multiple_of(8) {
                wal.flush(lsn).unwrap();
            }
            i += 1;
        }
        wal.close().unwrap();
        let log_bytes = 40 * segment;

        let recorder = Arc::new(Recorder::default());
        let watched = config.storage(Arc::new(RecordingStorage(recorder.clone())));
        let wal = Wal::open(dir.path(), watched).unwrap();
        let read = recorder.bytes_read.load(Ordering::Relaxed);
        assert!(
            read < 4 * segment,
            "{mode}: open read {read} bytes of a {log_bytes} byte log"
        );
        // And it continues exactly at the end.
        let lsn = wal.append(2, b"next").unwrap();
        wal.close().unwrap();
        let all = support::read_all(dir.path(), Some(keys));
        assert_eq!(all.len() as u64, i + 1, "{mode}");
        assert_eq!(all.last().unwrap().0, lsn);
    }
}
