//! A log written at format version 2 with the next segment prepared ahead (a version-2 header
//! over zeros). A follower lists that segment, then a writer of this build opens the log: it
//! removes the prepared segment, leaves the version-2 tail with a switch record and makes the
//! segment anew at the current version, whose records carry checksums over their LSN. The
//! follower, whose header of that segment says version 2, goes on reading the new records
//! rather than taking them for damage.

mod support;

use std::time::Duration;

use support::older_format::rewrite_as_version_2;
use support::{payload, small_config};
use walcrypt::inspect::FORMAT_VERSION;
use walcrypt::{Follower, KeyRing, Lsn, Mode, Reader, Visibility, Wal};

const SEGMENT: u64 = 8 * 512;

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
    for mode in [Mode::Plaintext, Mode::PerRecord] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let keys = KeyRing::generate().unwrap();
        let config = || small_config(mode, &keys).prepare_segments(false);

        let wal = Wal::open(dir, config()).unwrap();
        let mut want = Vec::new();
        for i in 0..5 {
            let lsn = wal.append(1, &payload(i, 100)).unwrap();
            wal.flush(lsn).unwrap();
            want.push((lsn, payload(i, 100)));
        }
        assert!(wal.prepare_next_segment().unwrap());
        wal.close().unwrap();
        rewrite_as_version_2(dir, &keys);

        let mut written = Follower::open(dir, Some(keys.clone()), Lsn::default())
            .unwrap()
            .visibility(Visibility::Written);
        let mut durable = Follower::open(dir, Some(keys.clone()), Lsn::default()).unwrap();
        let listed: Vec<u32> = written
            .segments()
            .iter()
            .map(|s| s.header.version)
            .collect();
        assert_eq!(listed, [2, 2], "{mode:?}: the prepared segment is listed");
        let ms50 = Duration::from_millis(50);
        assert_eq!(drain(&mut written, ms50, "written"), want);
        // Flushed one by one: the last record has no later page header vouching for it yet.
        assert_eq!(drain(&mut durable, ms50, "durable"), want[..4]);

        let wal = Wal::open(dir, config()).unwrap();
        for i in 5..40 {
            let lsn = wal.append(2, &payload(i, 100)).unwrap();
            wal.flush(lsn).unwrap();
            want.push((lsn, payload(i, 100)));
        }
        wal.close().unwrap();
        let reader = Reader::open(dir, Some(keys.clone())).unwrap();
        let versions: Vec<u32> = reader.segments().iter().map(|s| s.header.version).collect();
        assert_eq!(versions[..2], [2, FORMAT_VERSION], "{mode:?}: made anew");
        assert!(u64::from(want[39].0) > SEGMENT, "{mode:?}");

        let wait = Duration::from_millis(500);
        let got = drain(&mut written, wait, "written");
        assert!(got == want[5..], "{mode:?}: written follower");
        let got = drain(&mut durable, wait, "durable");
        assert!(got == want[4..39], "{mode:?}: durable follower");
    }
}
