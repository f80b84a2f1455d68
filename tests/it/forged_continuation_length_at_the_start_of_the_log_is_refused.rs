//! A page header's checksum needs no key. Nothing precedes the segment at LSN 0, so no record
//! continues into its first page: a continuation length written into that page's header (its
//! checksum recomputed) would have readers start past the records it covers, silently, even in
//! perrecord-gcm, whose tags cover records and not page headers. It is damage at that page for
//! the Reader (with `require_mode` too), a Follower and replay at open, in every mode.
//!
//! Before, all of them started at the record the forged length pointed to, without an error,
//! and `wal-dump --verify` called the log clean. Found by an outside probe.

use std::os::unix::fs::FileExt;

use crate::support::{append_all, payload, small_config};
use walcrypt::inspect::{PAGE_HEADER_LEN, PageHeader};
use walcrypt::{CorruptionKind, Error, Follower, KeyRing, Lsn, Mode, Reader, Visibility, Wal};

const PAGE: u64 = 512;

fn is_forged_length(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupt {
            kind: CorruptionKind::ContinuationMismatch { expected: 0, .. },
            ..
        }
    )
}

#[test]
fn forged_continuation_length_at_the_start_of_the_log_is_refused() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        let records: Vec<_> = (0..40).map(|i| (1u8, payload(i, 60))).collect();
        let lsns = append_all(&wal, &records);
        wal.close().unwrap();

        // The first page's header, made to say that the first three records' bytes continue
        // a record from before the log.
        let log_id = Reader::open(dir.path(), Some(keys.clone()))
            .unwrap()
            .segments()[0]
            .header
            .log_id;
        let fourth = u64::from(lsns[3]);
        assert!(
            fourth < 2 * PAGE,
            "{mode}: the fourth record starts in page 1"
        );
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("0000000000000000.wal"))
            .unwrap();
        let mut bytes = [0u8; PAGE_HEADER_LEN];
        file.read_exact_at(&mut bytes, PAGE).unwrap();
        let mut header = PageHeader::decode(log_id, &bytes).unwrap();
        assert_eq!(header.rem_len, 0, "{mode}");
        header.rem_len = (fourth - PAGE - PAGE_HEADER_LEN as u64) as u32;
        header.encode(log_id, &mut bytes);
        file.write_all_at(&bytes, PAGE).unwrap();
        drop(file);

        let reader = Reader::open(dir.path(), Some(keys.clone()))
            .unwrap()
            .require_mode(mode)
            .unwrap();
        match reader.records_from(Lsn::default()).next() {
            Some(Err(e)) if is_forged_length(&e) => {}
            other => panic!("{mode}: reader: {:?}", other.map(|r| r.map(|r| r.lsn))),
        }
        let follower = Follower::open(dir.path(), Some(keys.clone()), Lsn::default())
            .map(|f| f.visibility(Visibility::Written))
            .and_then(|mut f| f.poll());
        match follower {
            Err(e) if is_forged_length(&e) => {}
            other => panic!("{mode}: follower: {:?}", other.map(|r| r.map(|r| r.lsn))),
        }
        match Wal::open_and_replay(
            dir.path(),
            small_config(mode, &keys),
            Lsn::default(),
            |_| Ok(()),
        ) {
            Err(e) if is_forged_length(&e) => {}
            Err(e) => panic!("{mode}: replay: {e}"),
            Ok(_) => panic!("{mode}: replay opened the log"),
        }
    }
}
