//! A copy of each version-2 golden log with the next segment prepared ahead, as a version-2
//! writer leaves it (a version-2 header over zeros). A follower lists that segment and reads
//! the log, then a writer of this build opens it: it removes the prepared segment and makes it
//! anew at the current version, whose records carry checksums over their LSN. It gets there
//! by a switch record leaving the version-2 tail segment or, in a pagelevel log ending in the
//! last page of a segment, by a resume record at the start of the new segment. The follower,
//! whose header of that segment still says version 2, goes on reading the new records rather
//! than taking them (or the resume record) for damage.

use crate::golden_files;

use std::time::Duration;

use walcrypt::inspect::FORMAT_VERSION;
use walcrypt::{Config, Follower, Lsn, Reader, Visibility, Wal};

/// Everything the follower yields within `wait` of the last record, as (lsn, payload).
fn drain(follower: &mut Follower, wait: Duration, what: &str) -> Vec<(Lsn, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        match follower.next_timeout(wait) {
            Ok(Some(r)) => out.push((r.lsn, r.payload)),
            Ok(None) => return out,
            Err(e) => panic!("{what}: after {} records: {e}", out.len()),
        }
    }
}

#[test]
fn follower_reads_on_when_a_reopen_remakes_an_older_format_segment() {
    let goldens = golden_files::of_version(2);
    for g in &goldens {
        let name = &g.name;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let prepared = golden_files::copy_log_with_prepared_segment(g, dir);
        let old: Vec<(Lsn, Vec<u8>)> = g.records.iter().map(|r| (r.0, r.2.clone())).collect();

        let open = || Follower::open(dir, Some(g.keys.clone()), Lsn::default()).unwrap();
        let mut written = open().visibility(Visibility::Written);
        let mut durable = open();
        let listed = written.segments().last().unwrap();
        assert_eq!(
            (listed.header.start, listed.header.version),
            (prepared, 2),
            "{name}: the prepared segment is listed"
        );
        let ms30 = Duration::from_millis(30);
        assert!(drain(&mut written, ms30, name) == old, "{name}: written");
        let seen = drain(&mut durable, ms30, name);
        assert!(old.starts_with(&seen), "{name}: durable");

        let config = Config::new(g.mode)
            .keys(g.keys.clone())
            .prepare_segments(false);
        let wal = Wal::open(dir, config).unwrap();
        let mut new = Vec::new();
        for i in 0..20u8 {
            let payload = vec![i; 150];
            let lsn = wal.append(3, &payload).unwrap();
            wal.flush(lsn).unwrap();
            new.push((lsn, payload));
        }
        wal.close().unwrap();
        let now = Reader::open(dir, Some(g.keys.clone())).unwrap();
        let remade = now.segments().iter().find(|s| s.header.start == prepared);
        assert_eq!(
            remade.map(|s| s.header.version),
            Some(FORMAT_VERSION),
            "{name}: the segment is made anew"
        );

        let wait = Duration::from_millis(100);
        assert!(
            drain(&mut written, wait, name) == new,
            "{name}: written follower after the reopen"
        );
        // Every record: the close left the last page's header vouching for the last one.
        let mut all = old.clone();
        all.extend(new.iter().cloned());
        let more = drain(&mut durable, wait, name);
        assert!(
            more == all[seen.len()..],
            "{name}: durable follower after the reopen"
        );
    }
}
