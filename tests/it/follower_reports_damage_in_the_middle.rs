//! A follower that reaches damage in the middle of a log (a flipped bit in a record that later
//! page headers vouch for) yields every record before it and then reports `Error::Corrupt`
//! naming the record, instead of waiting at it as if it were the live end.

use std::time::{Duration, Instant};

use walcrypt::inspect::segment_file_name;
use walcrypt::{Config, Error, Follower, KeyRing, Lsn, Mode, Reader, Record, Visibility, Wal};

#[test]
fn follower_reports_damage_in_the_middle() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = Config::new(mode)
            .keys(keys.clone())
            .page_size(1024)
            .segment_size(8 * 1024);
        let wal = Wal::open(dir.path(), config).unwrap();
        for i in 0..100u32 {
            let lsn = wal.append(1, &i.to_le_bytes().repeat(30)).unwrap();
            wal.flush(lsn).unwrap();
        }
        wal.close().unwrap();
        let records: Vec<_> = Reader::open(dir.path(), Some(keys.clone()))
            .unwrap()
            .records_from(Lsn::default())
            .collect::<Result<_, _>>()
            .unwrap();
        let victim = &records[40];
        let last = victim.end_lsn.0 - 1;
        let seg = last - last % (8 * 1024);
        let path = dir.path().join(segment_file_name(Lsn(seg)));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(victim.end_lsn.0 - 1 - seg) as usize] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();

        let before: Vec<Vec<u8>> = records[..40].iter().map(|r| r.payload.clone()).collect();
        follow_to_the_damage(dir.path(), &keys, &before, victim.lsn, &mode.to_string());
    }
}

/// A page header damaged in the middle of a segment: the pages vouching for the records before
/// it lie after it, in the same segment. A follower of the files yields what the Reader yields
/// before the damage and then the Reader's error, instead of waiting forever for those records
/// to be proven durable (the quick look for durable hints stops at the first page without a
/// valid header; a follower stopped at one record for a while reads every later header).
#[test]
fn follower_reports_a_damaged_page_header_in_the_middle_of_a_segment() {
    const PAGE: u64 = 1024;
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = Config::new(mode)
            .keys(keys.clone())
            .page_size(PAGE)
            .segment_size(64 * PAGE);
        let wal = Wal::open(dir.path(), config).unwrap();
        // One flush for all: only the last page's header vouches for the records (the
        // close refreshes its durable hint).
        for i in 0..200u32 {
            wal.append(1, &i.to_le_bytes().repeat(30)).unwrap();
        }
        wal.flush(wal.end_lsn()).unwrap();
        wal.close().unwrap();
        // The header of the 10th page, in the first segment, which the log fills past its
        // 20th page.
        let path = dir.path().join(segment_file_name(Lsn(0)));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(10 * PAGE + 2) as usize] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let mut before = Vec::new();
        let mut expected_error = None;
        for r in reader.records_from(Lsn::default()) {
            match r {
                Ok(r) => before.push(r.payload),
                Err(e) => {
                    expected_error = Some(e);
                    break;
                }
            }
        }
        let Some(Error::Corrupt { at: damage, .. }) = expected_error else {
            panic!("{mode}: the reader does not report the damage: {expected_error:?}");
        };
        assert!(
            damage.lsn < Lsn(11 * PAGE) && !before.is_empty(),
            "{mode}: the reader's error at {} after {} records",
            damage.lsn,
            before.len()
        );

        follow_to_the_damage(dir.path(), &keys, &before, damage.lsn, &mode.to_string());
    }
}

/// The same damage met by a follower attached to the `Wal` that wrote the log, after that
/// `Wal` is gone: it learns what is durable from the page headers, as a follower of the files
/// does, and must also read every later page header once it has waited a while. It waited
/// for good: the full look was made only by followers never attached.
#[test]
fn follower_attached_to_a_dropped_wal_reports_a_damaged_page_header() {
    const PAGE: u64 = 1024;
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = Config::new(mode)
            .keys(keys.clone())
            .page_size(PAGE)
            .segment_size(64 * PAGE);
        let wal = std::sync::Arc::new(Wal::open(dir.path(), config).unwrap());
        let mut follower = Follower::attach(&wal, Lsn::default()).unwrap();
        for i in 0..200u32 {
            wal.append(1, &i.to_le_bytes().repeat(30)).unwrap();
        }
        wal.flush(wal.end_lsn()).unwrap();
        wal.shutdown().unwrap();
        drop(wal);
        let path = dir.path().join(segment_file_name(Lsn(0)));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(10 * PAGE + 2) as usize] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        let mut seen = 0;
        let err = until_error(&mut follower, &mode.to_string(), |_| seen += 1);
        assert!(seen > 0, "{mode}: no record before the damage");
        assert!(
            matches!(err, Error::Corrupt { at, .. } if at.lsn < Lsn(11 * PAGE)),
            "{mode}: {err}"
        );
    }
}

/// Follows the log in `dir` from its start, durable and written: it must yield `before`, in
/// order, then `Corrupt` at `damage`, within ten seconds.
fn follow_to_the_damage(
    dir: &std::path::Path,
    keys: &KeyRing,
    before: &[Vec<u8>],
    damage: Lsn,
    what: &str,
) {
    for visibility in [Visibility::Durable, Visibility::Written] {
        let mut follower = Follower::open(dir, Some(keys.clone()), Lsn::default())
            .unwrap()
            .visibility(visibility);
        let mut seen = 0;
        let err = until_error(&mut follower, &format!("{what} {visibility:?}"), |r| {
            assert_eq!(r.payload, before[seen], "{what} {visibility:?}");
            seen += 1;
        });
        assert_eq!(seen, before.len(), "{what} {visibility:?}");
        match err {
            Error::Corrupt { at, .. } => assert_eq!(at.lsn, damage, "{what} {visibility:?}"),
            other => panic!("{what} {visibility:?}: {other}"),
        }
    }
}

/// Polls `follower` until it fails, handing each record to `record`; the error, within ten
/// seconds (`what` names the case when it does not come).
fn until_error(follower: &mut Follower, what: &str, mut record: impl FnMut(Record)) -> Error {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "{what}: damage never reported");
        match follower.next_timeout(Duration::from_millis(100)) {
            Ok(Some(r)) => record(r),
            Ok(None) => {}
            Err(e) => return e,
        }
    }
}
