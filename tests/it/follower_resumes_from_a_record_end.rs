//! A replica resumes from the `end_lsn` of the last record it applied. Records that fill
//! their page exactly end on page and segment boundaries; a `Follower` (and a `Reader`)
//! started from any record's end yields the next record, and from the end of the log waits
//! for the next one.

use std::time::Duration;

use walcrypt::inspect::RECORD_HEADER_PLAIN;
use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Reader, Visibility, Wal};

const PAGE: u64 = 1024;
const SEGMENT: u64 = 4 * PAGE;

#[test]
fn follower_resumes_from_a_record_end() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(Mode::Plaintext)
        .keys(KeyRing::empty())
        .page_size(PAGE)
        .segment_size(SEGMENT);
    let wal = Wal::open(dir.path(), config).unwrap();
    let mut appended = Vec::new();
    for i in 0..10u8 {
        // Every other record fills the rest of its page exactly.
        let pos = wal.geometry().skip_headers(Lsn(wal.end_lsn().0)).0;
        let room = (PAGE - pos % PAGE) as usize;
        let len = if i % 2 == 0 && room > RECORD_HEADER_PLAIN {
            room - RECORD_HEADER_PLAIN
        } else {
            100
        };
        let lsn = wal.append(i, &vec![i; len]).unwrap();
        appended.push(lsn);
    }
    let last = *appended.last().unwrap();
    wal.flush(last).unwrap();
    let reader = Reader::open(dir.path(), None).unwrap();
    let records: Vec<_> = reader
        .records_from(Lsn::default())
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records.len(), 10);
    let ends = |r: &&walcrypt::Record, every: u64| r.end_lsn.0.is_multiple_of(every);
    assert!(records.iter().any(|r| ends(&r, PAGE) && !ends(&r, SEGMENT)));
    assert!(records.iter().any(|r| ends(&r, SEGMENT)));

    for pair in records.windows(2) {
        let (done, next) = (&pair[0], &pair[1]);
        let mut follower = Follower::open(dir.path(), None, done.end_lsn)
            .unwrap()
            .visibility(Visibility::Written);
        let got = follower.poll().unwrap().expect("the next record");
        assert_eq!(
            (got.lsn, got.kind),
            (next.lsn, next.kind),
            "after {}",
            done.end_lsn
        );
        let from_reader = reader.records_from(done.end_lsn).next().unwrap().unwrap();
        assert_eq!(from_reader.lsn, next.lsn);
    }

    // From the end of the log: nothing yet, then the next record.
    let end = records.last().unwrap().end_lsn;
    let mut follower = Follower::open(dir.path(), None, end)
        .unwrap()
        .visibility(Visibility::Written);
    assert!(follower.poll().unwrap().is_none());
    let lsn = wal.append(42, b"later").unwrap();
    wal.flush(lsn).unwrap();
    let got = follower.next_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(got.map(|r| (r.lsn, r.kind)), Some((lsn, 42)));
    wal.close().unwrap();
}
