//! A crash loses an unsynced page of one segment while the first page of the next segment,
//! written in the same flush, survives and begins with a fresh record. Recovery must end the
//! log at the lost page (everything after it was never acknowledged), not continue after the
//! surviving page: otherwise the next flush stamps a durable hint beyond the hole and the log
//! no longer reads.

use crate::support;

use std::os::unix::fs::FileExt;

use support::payload_for;
use walcrypt::inspect::{PAGE_HEADER_LEN, RECORD_HEADER_PLAIN, segment_file_name};
use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

const PAGE: u64 = 1024;
const SEGMENT: u64 = 16 * 1024;

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .buffer_size(64 * 1024)
}

#[test]
fn recovery_ends_at_a_lost_page_even_when_the_next_segment_starts_cleanly() {
    // Plaintext records whose stored size divides a segment's stream bytes exactly, so a
    // record ends at the segment boundary and the next segment's page 1 has no continuation.
    let body = PAGE - PAGE_HEADER_LEN as u64;
    let stream_per_segment = (SEGMENT / PAGE - 1) * body;
    let record = 122u64;
    assert_eq!(stream_per_segment % record, 0);
    let per_segment = stream_per_segment / record;
    let payload_len = record as usize - RECORD_HEADER_PLAIN;

    let mode = Mode::Plaintext;
    let keys = KeyRing::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
    let acked = per_segment - 30;
    let total = per_segment + 20;
    let mut lsns = Vec::new();
    for id in 1..=total {
        let mut payload = payload_for(id).1;
        payload.resize(payload_len, 0);
        let lsn = wal.append(1, &payload).unwrap();
        lsns.push(lsn);
        if id == acked {
            wal.flush(lsn).unwrap();
        }
    }
    // The last write-out (the writer's drop, as a crash during the last flush would leave it:
    // a flush or close that returns vouches for its records in the last page's header) writes
    // the tail of segment 0 and the start of segment 1 together.
    drop(wal);

    // The crash hit before that flush's fdatasync finished: a page of segment 0 holding
    // unacknowledged records never reached the disk, page 1 of segment 1 did.
    let lost_record = acked + 10;
    let lost_page = u64::from(lsns[lost_record as usize - 1]) / PAGE * PAGE;
    assert!(lost_page < SEGMENT);
    let seg0 = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(segment_file_name(Lsn(0))))
        .unwrap();
    seg0.write_all_at(&vec![0u8; PAGE as usize], lost_page)
        .unwrap();
    drop(seg0);

    // A writer opens (no replay), appends and flushes.
    let wal = Wal::open(dir.path(), config(mode, &keys)).unwrap();
    let lsn = wal.append(2, b"after the crash").unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();

    let records = support::try_read_records(dir.path(), &keys)
        .unwrap_or_else(|e| panic!("the log no longer reads after recovery: {e}"));
    let (last, rest) = records.split_last().unwrap();
    assert_eq!(last.payload, b"after the crash");
    assert!(rest.len() as u64 >= acked, "acknowledged records lost");
    for (i, rec) in rest.iter().enumerate() {
        assert_eq!(rec.lsn, lsns[i], "record {} moved", i + 1);
        let mut expected = payload_for(i as u64 + 1).1;
        expected.resize(payload_len, 0);
        assert_eq!(rec.payload, expected, "record {} altered", i + 1);
    }
    assert!(
        (rest.len() as u64) < lost_record,
        "records after the lost page cannot be back"
    );
}
