//! perrecord-gcm: whoever can write the files can put a record past the end of the log with a
//! correct CRC32C (no key needed) and a made-up tag. A writer's open (no replay) checks the
//! tags of the records it scans at the tail: a record that fails its tag past every durable
//! hint is the torn tail's end, cut away like one, and the writer resumes where the log really
//! ends, so every record it acknowledges afterwards reads back. Before, the open took the
//! forged record for part of the log and resumed after it; every reader and replay then
//! stopped at it, and the acknowledged records behind it were lost. A record that fails its
//! tag below a durable hint is damage the open reports, as a replay does.

use crate::support;

use support::tamper::{fix_crc, single_page_records, write_at};
use support::{append_all, payload, small_config};
use walcrypt::inspect::RECORD_HEADER_ENCRYPTED;
use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, Wal};

const PAGE: u64 = 512;

/// Records as (lsn, payload), in log order.
type Records = Vec<(Lsn, Vec<u8>)>;

/// A closed perrecord-gcm log, with room in the page its end lies in for a copy of its last
/// record: the directory, the records (lsn, payload), the end and the last record's bytes.
fn log_with_room_at_the_end(keys: &KeyRing) -> (tempfile::TempDir, Records, u64, Vec<u8>) {
    for count in 30..60 {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, keys)).unwrap();
        let records: Vec<_> = (0..count).map(|i| (7u8, payload(i, 40))).collect();
        let lsns = append_all(&wal, &records);
        let end = u64::from(wal.end_lsn());
        wal.close().unwrap();
        let last = single_page_records(dir.path()).pop().unwrap();
        assert_eq!(last.lsn, u64::from(lsns[lsns.len() - 1]));
        let offset = end % PAGE;
        if offset >= 48 && offset + last.bytes.len() as u64 <= PAGE {
            let written = lsns
                .into_iter()
                .zip(records.into_iter().map(|r| r.1))
                .collect();
            return (dir, written, end, last.bytes);
        }
    }
    panic!("no log of 30 to 60 records ended with room in its page");
}

fn replayed(dir: &std::path::Path, keys: &KeyRing) -> Records {
    let mut out = Vec::new();
    let config = small_config(Mode::PerRecordGcm, keys);
    let wal = Wal::open_and_replay(dir, config, Lsn::default(), |r| {
        out.push((r.lsn, r.payload));
        Ok(())
    })
    .unwrap_or_else(|e| panic!("the log does not replay: {e}"));
    wal.close().unwrap();
    out
}

#[test]
fn a_record_forged_past_the_end_is_cut_and_the_writer_resumes_before_it() {
    let keys = KeyRing::generate().unwrap();
    let (dir, mut written, end, last) = log_with_room_at_the_end(&keys);
    // A copy of the last record at the end, its ciphertext changed and its CRC made right.
    let mut forged = last;
    forged[RECORD_HEADER_ENCRYPTED + 3] ^= 0x20;
    fix_crc(&mut forged, end);
    write_at(dir.path(), end, &forged);

    let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, &keys)).unwrap();
    assert_eq!(
        u64::from(wal.end_lsn()),
        end,
        "the open resumed after the forged record"
    );
    for i in 0..3 {
        let p = payload(1000 + i, 60);
        let lsn = wal.append(9, &p).unwrap();
        wal.flush(lsn).unwrap();
        written.push((lsn, p));
    }
    wal.close().unwrap();
    assert!(
        replayed(dir.path(), &keys) == written,
        "a replay lost acknowledged records"
    );
    let reader = Reader::open(dir.path(), Some(keys.clone()))
        .unwrap()
        .require_mode(Mode::PerRecordGcm)
        .unwrap();
    let read: Vec<_> = reader
        .records_from(Lsn::default())
        .map(|r| r.map(|r| (r.lsn, r.payload)))
        .collect::<walcrypt::Result<_>>()
        .unwrap_or_else(|e| panic!("the reader stops: {e}"));
    assert!(read == written, "the reader lost acknowledged records");
}

#[test]
fn a_record_failing_its_tag_below_a_durable_hint_fails_the_open() {
    let keys = KeyRing::generate().unwrap();
    let (dir, written, _, mut last) = log_with_room_at_the_end(&keys);
    // The last record, durable (the close vouched for it in its page header), altered.
    let lsn = u64::from(written[written.len() - 1].0);
    last[RECORD_HEADER_ENCRYPTED + 3] ^= 0x20;
    fix_crc(&mut last, lsn);
    write_at(dir.path(), lsn, &last);

    match Wal::open(dir.path(), small_config(Mode::PerRecordGcm, &keys)) {
        Err(Error::AuthenticationFailed { at, .. }) => assert_eq!(u64::from(at.lsn), lsn),
        Err(e) => panic!("expected an authentication failure, got {e}"),
        Ok(wal) => panic!("opened, ending at {}", wal.end_lsn()),
    }
}

/// A segment file added after the last one, its header copied from that segment with the start
/// moved on and its first page's header saying the log is durable into it (both checksums need
/// no key). Before, that page made the added segment the open's proven start: the scan began
/// there, read none of the real tail, and the writer resumed in the added segment, so every
/// record it acknowledged sat behind the rest of the real tail segment, which readers stop at.
/// The open now takes such a start only when the records before it, tags checked, lead there;
/// here they do not, and the open fails instead of building on the gap.
#[test]
fn a_segment_added_past_the_end_with_a_durable_hint_is_not_a_start_to_build_on() {
    use std::os::unix::fs::FileExt;
    use walcrypt::inspect::{PAGE_HEADER_LEN, PageHeader, SegmentHeader, segment_file_name};
    let keys = KeyRing::generate().unwrap();
    let config = small_config(Mode::PerRecordGcm, &keys).prepare_segments(false);
    let segment = 8 * PAGE;
    // A log spanning segments whose end leaves at least a page of its segment unwritten.
    let (dir, records, end) = (60..200)
        .find_map(|count| {
            let dir = tempfile::tempdir().unwrap();
            let wal = Wal::open(dir.path(), config.clone()).unwrap();
            let records: Vec<_> = (0..count).map(|i| (7u8, payload(i, 40))).collect();
            append_all(&wal, &records);
            let end = u64::from(wal.end_lsn());
            wal.close().unwrap();
            (end > segment && end % segment < segment - PAGE).then_some((dir, records, end))
        })
        .expect("a log whose end leaves room in its segment");
    let (last, added) = (end - end % segment, end - end % segment + segment);

    let mut bytes = std::fs::read(dir.path().join(segment_file_name(Lsn(last)))).unwrap();
    let mut header = SegmentHeader::decode(&bytes).unwrap();
    header.start = Lsn(added);
    header.encode(&mut bytes[..PAGE as usize]);
    bytes[PAGE as usize..].fill(0);
    let page1 = PAGE as usize..PAGE as usize + PAGE_HEADER_LEN;
    let mut page = PageHeader::decode(
        header.log_id,
        &std::fs::read(dir.path().join(segment_file_name(Lsn(last)))).unwrap()[page1.clone()],
    )
    .unwrap();
    page.page_lsn = Lsn(added + PAGE);
    page.rem_len = 0;
    page.durable_hint = Lsn(added + PAGE + PAGE_HEADER_LEN as u64);
    page.encode(header.log_id, &mut bytes[page1]);
    let file = std::fs::File::create_new(dir.path().join(segment_file_name(Lsn(added)))).unwrap();
    file.write_all_at(&bytes, 0).unwrap();
    drop(file);

    match Wal::open(dir.path(), config) {
        Ok(wal) => {
            let resumed = u64::from(wal.end_lsn());
            assert!(
                resumed < added,
                "the writer resumed at {resumed}, in the added segment"
            );
        }
        Err(Error::AuthenticationFailed { .. } | Error::Corrupt { .. }) => {}
        Err(e) => panic!("unexpected: {e}"),
    }
    // Whatever the open did, every record written reads back.
    let read: Vec<_> = Reader::open(dir.path(), Some(keys.clone()))
        .unwrap()
        .records_from(Lsn::default())
        .take(records.len())
        .map(|r| r.unwrap().payload)
        .collect();
    assert_eq!(read.len(), records.len());
}

/// An honest perrecord-gcm log whose proven start is a page boundary: a record that ran into
/// a segment ends exactly at a page's end there. The walk that vouches for a proven start
/// takes it (the open scans from there, not from the oldest record). Before, the walk looked
/// for the boundary itself where the reader looks past the page's header, never found it, and
/// every open of such a log read, checked and synced the whole log again (found by review).
#[test]
fn an_honest_proven_start_on_a_page_boundary_is_taken() {
    const SEGMENT: u64 = 8 * PAGE;
    // Body bytes from `from` to `to`, over page and segment headers.
    let body_between = |from: u64, to: u64| {
        (from..to)
            .filter(|&at| at % SEGMENT >= PAGE && at % PAGE >= 48)
            .count() as u64
    };
    let keys = KeyRing::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(Mode::PerRecordGcm, &keys).segment_size(SEGMENT);
    let wal = Wal::open(dir.path(), config.clone()).unwrap();
    let before = u64::from(wal.end_lsn());
    wal.append(1, &payload(1, 10)).unwrap();
    let overhead = body_between(before, u64::from(wal.end_lsn())) - 10;
    let append_ending_at = |to: u64| {
        let from = u64::from(wal.end_lsn());
        let body = body_between(from, to);
        wal.append(1, &payload(to, (body - overhead) as usize))
            .unwrap();
        assert_eq!(u64::from(wal.end_lsn()), to, "a record from {from} to {to}");
    };
    append_ending_at(5 * PAGE + 100);
    // Into segment 1, ending at its page 2's end; then one into segment 2.
    append_ending_at(SEGMENT + 2 * PAGE);
    append_ending_at(SEGMENT + 7 * PAGE + 100);
    append_ending_at(2 * SEGMENT + PAGE + 200);
    wal.append(1, b"tail").unwrap();
    wal.close().unwrap();

    let wal = Wal::open(dir.path(), config).unwrap();
    let summary = wal.recovery_summary().unwrap();
    assert_eq!(summary.scanned_from, Lsn(SEGMENT + 2 * PAGE));
    wal.close().unwrap();
}
