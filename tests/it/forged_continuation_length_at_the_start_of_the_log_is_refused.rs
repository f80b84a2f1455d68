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
use walcrypt::inspect::{PAGE_HEADER_LEN, PageHeader, segment_file_name};
use walcrypt::{CorruptionKind, Error, Follower, Key, KeyRing, Lsn, Mode, Reader, Visibility, Wal};

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

/// The same forgery in the first page of the oldest segment of a purged log, after a
/// checkpoint at that segment's start (`end_lsn()` right after a key rotation, which starts a
/// segment). The records from the checkpoint on are what the engine needs; before, replay from
/// the checkpoint and a reader started there began at the record the forged length pointed
/// to, past two acknowledged records, without an error, even in perrecord-gcm. There, a record
/// whose tag checks at the page's first body position now shows that nothing continued into
/// the page. (The CTR modes promise nothing against a writer of the files: one can delete
/// records there anyway.)
#[test]
fn forged_continuation_length_after_a_checkpoint_at_a_segment_start_is_refused() {
    {
        let mode = Mode::PerRecordGcm;
        let dir = tempfile::tempdir().unwrap();
        let mut keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), small_config(mode, &keys)).unwrap();
        append_all(
            &wal,
            &(0..10).map(|i| (1u8, payload(i, 60))).collect::<Vec<_>>(),
        );
        let key = Key::generate().unwrap();
        keys.add(2, key.clone()).unwrap();
        wal.activate_key(2, key).unwrap();
        let checkpoint = wal.end_lsn();
        assert_eq!(
            u64::from(checkpoint) % (8 * PAGE),
            0,
            "{mode}: a segment start"
        );
        let after = append_all(
            &wal,
            &(10..18).map(|i| (1u8, payload(i, 40))).collect::<Vec<_>>(),
        );
        assert!(
            wal.checkpoint(checkpoint, b"snapshot").unwrap() > 0,
            "{mode}"
        );
        wal.close().unwrap();

        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let log_id = reader.segments()[0].header.log_id;
        assert_eq!(reader.segments()[0].header.start, checkpoint, "{mode}");
        let name = segment_file_name(checkpoint);
        let page1 = PAGE;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join(name))
            .unwrap();
        let mut bytes = [0u8; PAGE_HEADER_LEN];
        file.read_exact_at(&mut bytes, page1).unwrap();
        let mut header = PageHeader::decode(log_id, &bytes).unwrap();
        assert_eq!(header.rem_len, 0, "{mode}");
        let body = u64::from(checkpoint) + page1 + PAGE_HEADER_LEN as u64;
        assert_eq!(
            u64::from(after[0]),
            body,
            "{mode}: the first record after the checkpoint"
        );
        let third = u64::from(after[2]);
        assert!(
            third < u64::from(checkpoint) + 2 * PAGE,
            "{mode}: in page 1"
        );
        header.rem_len = (third - body) as u32;
        header.encode(log_id, &mut bytes);
        file.write_all_at(&bytes, page1).unwrap();
        drop(file);

        // Not a record start there (`open_from_checkpoint` says so of its checkpoint, naming
        // the control file); in perrecord-gcm the open's scan may meet the forgery first: a
        // record whose tag checks starts where the length says one continues.
        let refused = |e: &Error| {
            matches!(
                e,
                Error::NotRecordStart(_)
                    | Error::Control { .. }
                    | Error::Corrupt {
                        kind: CorruptionKind::ContinuationMismatch { expected: 0, .. },
                        ..
                    }
            )
        };
        let reader = Reader::open(dir.path(), Some(keys.clone()))
            .unwrap()
            .require_mode(mode)
            .unwrap();
        match reader.records_from(checkpoint).next() {
            Some(Err(e)) if refused(&e) => {}
            other => panic!("{mode}: reader: {:?}", other.map(|r| r.map(|r| r.lsn))),
        }
        let follower = Follower::open(dir.path(), Some(keys.clone()), checkpoint)
            .map(|f| f.visibility(Visibility::Written))
            .and_then(|mut f| f.poll());
        match follower {
            Err(e) if refused(&e) => {}
            other => panic!("{mode}: follower: {:?}", other.map(|r| r.map(|r| r.lsn))),
        }
        let (mut replayed, mut restored) = (Vec::new(), false);
        match Wal::open_from_checkpoint(
            dir.path(),
            small_config(mode, &keys),
            |_| {
                restored = true;
                Ok(())
            },
            |r| {
                replayed.push(r.lsn);
                Ok(())
            },
        ) {
            Err(e) if refused(&e) => {}
            Err(e) => panic!("{mode}: replay: {e}"),
            Ok(_) => panic!("{mode}: replay opened the log, replaying {replayed:?}"),
        }
        // Refused before the engine restored anything.
        assert!(!restored, "{mode}: restore was called");
    }
}

/// The first page of the oldest (and only) segment of a purged log, rewritten to say that the
/// record continuing there from the purged segment runs on past the end of the log: a plain
/// open started its scan there, found nothing and resumed past every record left, so the
/// writer built on a gap (an outside probe). The pages that continuation runs over say how
/// much of it is left at each, and disagree: the open refuses the log, in every mode. In
/// perrecord-gcm, a length rewritten where nothing continued (a record whose tag checks starts
/// at the page's first body position) is refused even when it stays inside that page.
#[test]
fn forged_continuation_length_in_a_purged_logs_first_page_is_refused() {
    for mode in Mode::ALL {
        for inside_page_1 in [false, true] {
            if inside_page_1 && mode != Mode::PerRecordGcm {
                continue;
            }
            let what = format!("{mode}, inside page 1 {inside_page_1}");
            let first_key = KeyRing::generate().unwrap();
            let (mut keys, key) = (first_key.clone(), Key::generate().unwrap());
            keys.add(2, key.clone()).unwrap();
            let len = if inside_page_1 { 20 } else { 150 };
            // A log purged down to the segment holding its end, which lies past page 2 and
            // (inside page 1) starts with a record of its own: the first after a key rotation,
            // which starts a segment.
            let (dir, end, oldest, log_id, first) = (40..200)
                .find_map(|count| {
                    let dir = tempfile::tempdir().unwrap();
                    let wal = Wal::open(dir.path(), small_config(mode, &first_key)).unwrap();
                    let records: Vec<_> = (0..count).map(|i| (1u8, payload(i, len))).collect();
                    append_all(&wal, &records);
                    if inside_page_1 {
                        wal.activate_key(2, key.clone()).unwrap();
                        append_all(&wal, &records[..40]);
                    }
                    wal.purge_before(wal.end_lsn()).unwrap();
                    let end = u64::from(wal.end_lsn());
                    wal.close().unwrap();
                    let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
                    let segment = &reader.segments()[0].header;
                    let (oldest, log_id) = (segment.start, segment.log_id);
                    let first: Vec<Lsn> = reader
                        .records_from(Lsn::default())
                        .take(3)
                        .map(|r| r.unwrap().lsn)
                        .collect();
                    let body = u64::from(oldest) + PAGE + PAGE_HEADER_LEN as u64;
                    let usable = u64::from(oldest) > 0
                        && end - u64::from(oldest) >= 3 * PAGE
                        && (!inside_page_1 || u64::from(first[0]) == body);
                    drop(reader);
                    usable.then_some((dir, end, oldest, log_id, first))
                })
                .expect("a purged log of the shape wanted");
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(dir.path().join(segment_file_name(oldest)))
                .unwrap();
            let mut bytes = [0u8; PAGE_HEADER_LEN];
            file.read_exact_at(&mut bytes, PAGE).unwrap();
            let mut header = PageHeader::decode(log_id, &bytes).unwrap();
            let body = u64::from(oldest) + PAGE + PAGE_HEADER_LEN as u64;
            // Body bytes from page 1's body to `to`, over page headers.
            let stream = |to: u64| {
                (body..to)
                    .filter(|&at| at % PAGE >= PAGE_HEADER_LEN as u64)
                    .count()
            };
            let forged = if inside_page_1 {
                assert_eq!(header.rem_len, 0, "{what}: a record starts the segment");
                assert!(u64::from(first[2]) < u64::from(oldest) + 2 * PAGE, "{what}");
                stream(u64::from(first[2]))
            } else {
                // The page after the end's, past everything left.
                stream(end - end % PAGE + PAGE + PAGE_HEADER_LEN as u64)
            };
            header.rem_len = forged as u32;
            header.encode(log_id, &mut bytes);
            file.write_all_at(&bytes, PAGE).unwrap();
            drop(file);

            match Wal::open(dir.path(), small_config(mode, &keys)) {
                Err(Error::Corrupt {
                    kind: CorruptionKind::ContinuationMismatch { .. },
                    ..
                }) => {}
                Err(e) => panic!("{what}: {e}"),
                Ok(wal) => panic!("{what}: the open resumed at {}", wal.end_lsn()),
            }
        }
    }
}
