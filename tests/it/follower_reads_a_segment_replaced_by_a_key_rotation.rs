//! A follower that listed the segment prepared ahead of the log (its header names the key of
//! its time) keeps following when a key rotation replaces that segment with one listing the
//! new key: the records there name a key the header it read first does not list, so it reads
//! the headers again and goes on. It used to report the records as damage (`UnlistedKey`).
//! Real damage of that kind, in a segment nobody replaced, is still reported.
//!
//! perrecord and pagelevel, the follower in the writer's process (reading the files), records
//! visible once written.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::hooked::{Hooked, Hooks};
use walcrypt::inspect::{PAGE_HEADER_LEN, record_crc, segment_file_name};
use walcrypt::{
    Config, CorruptionKind, Error, Follower, Key, KeyRing, Lsn, Mode, Reader, SyncMode, Visibility,
    Wal,
};

const SEGMENT: u64 = 64 * 1024;
const PATIENCE: Duration = Duration::from_secs(10);

fn config(mode: Mode, keys: &KeyRing, prepare_ahead: bool) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(SEGMENT)
        .prepare_segments(prepare_ahead)
}

fn append(wal: &Wal, payload: &[u8]) -> Lsn {
    let lsn = wal.append(1, payload).unwrap();
    wal.flush(lsn).unwrap();
    lsn
}

fn next_payload(follower: &mut Follower, what: &str) -> Vec<u8> {
    follower
        .next_timeout(PATIENCE)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .unwrap_or_else(|| panic!("{what}: no record"))
        .payload
}

#[test]
fn the_follower_reads_on_past_rotations() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        for prepare_ahead in [false, true] {
            let what = format!("{mode}, preparer thread {prepare_ahead}");
            let dir = tempfile::tempdir().unwrap();
            let mut keys = KeyRing::generate().unwrap();
            let wal = Wal::open(dir.path(), config(mode, &keys, prepare_ahead)).unwrap();
            append(&wal, b"under key 1");
            if !prepare_ahead {
                assert!(wal.prepare_next_segment().unwrap(), "{what}");
            }
            for id in 2..=4 {
                keys.add(id, Key::generate().unwrap()).unwrap();
            }
            let mut follower = Follower::open(dir.path(), Some(keys.clone()), Lsn::default())
                .unwrap()
                .visibility(Visibility::Written);
            assert_eq!(next_payload(&mut follower, &what), b"under key 1");
            // The follower has listed the segment prepared under key 1 by now.
            assert!(
                follower.segments().len() >= 2 || prepare_ahead,
                "{what}: {} segments seen",
                follower.segments().len()
            );
            for id in 2..=4u32 {
                let key = keys.get(id).unwrap().clone();
                wal.activate_key(id, key).unwrap();
                let payload = format!("under key {id}");
                append(&wal, payload.as_bytes());
                assert_eq!(
                    next_payload(&mut follower, &what),
                    payload.as_bytes(),
                    "{what}"
                );
            }
            wal.close().unwrap();
        }
    }
}

#[test]
fn a_key_id_its_unchanged_segment_does_not_list_is_still_damage() {
    let dir = tempfile::tempdir().unwrap();
    let mut keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), config(Mode::PerRecord, &keys, false)).unwrap();
    for i in 0..5u8 {
        append(&wal, &[i; 60]);
    }
    wal.close().unwrap();
    keys.add(2, Key::generate().unwrap()).unwrap();

    // The fourth record's header names key 2, its checksum recomputed.
    let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
    let mut rec = reader
        .raw_records_from(Lsn::default())
        .nth(3)
        .unwrap()
        .unwrap();
    let (_, iv) = rec.header.encryption.unwrap();
    rec.header.encryption = Some((2, iv));
    let mut head = vec![0u8; rec.header.len_bytes()];
    rec.header.encode(&mut head);
    rec.header.crc = record_crc(rec.format_version, rec.lsn, &head, &rec.stored);
    rec.header.encode(&mut head);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(segment_file_name(Lsn(0))))
        .unwrap();
    file.write_all_at(&head, u64::from(rec.lsn)).unwrap();

    let mut follower = Follower::open(dir.path(), Some(keys), Lsn::default())
        .unwrap()
        .visibility(Visibility::Written);
    for i in 0..3u8 {
        assert_eq!(next_payload(&mut follower, "intact"), [i; 60]);
    }
    let err = follower.next_timeout(PATIENCE).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                kind: CorruptionKind::UnlistedKey { key_id: 2 },
                ..
            }
        ),
        "{err}"
    );
}

/// A `Reader` that listed the segment prepared under the old key, opened before the rotation
/// replaced it, meets the new records under a key that header does not list. The writer moved
/// on; nothing is damaged: the reader's log ends before that segment (a reader opened after
/// the rotation reads on). It used to fail with `UnlistedKey`.
#[test]
fn a_reader_that_listed_the_replaced_segment_ends_before_it_instead_of_reporting_damage() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let mut keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), config(mode, &keys, false)).unwrap();
        append(&wal, b"under key 1");
        assert!(wal.prepare_next_segment().unwrap(), "{mode}");
        keys.add(2, Key::generate().unwrap()).unwrap();
        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        assert!(
            reader.segments().len() >= 2,
            "{mode}: the prepared segment is listed"
        );

        wal.activate_key(2, keys.get(2).unwrap().clone()).unwrap();
        append(&wal, b"under key 2");
        let read: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| r.map(|r| r.payload))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{mode}: the writer moved on, nothing is damaged: {e}"));
        assert_eq!(read, vec![b"under key 1".to_vec()], "{mode}");

        let after = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let read: Vec<_> = after
            .records_from(Lsn::default())
            .map(|r| r.unwrap().payload)
            .collect();
        assert_eq!(
            read,
            vec![b"under key 1".to_vec(), b"under key 2".to_vec()],
            "{mode}"
        );
        wal.close().unwrap();
    }
}

type Move = Box<dyn FnOnce() + Send>;

/// Runs the writer's move (once) at the first page-header-sized read after it is armed: the
/// torn-tail rule's look at the page headers after the place a reader found no record.
#[derive(Default)]
struct MoveAtHeaderRead {
    armed: Mutex<Option<Move>>,
}

impl Hooks for MoveAtHeaderRead {
    fn read_bytes(&self, _path: &Path, _offset: u64, bytes: &mut [u8]) -> std::io::Result<()> {
        if bytes.len() == PAGE_HEADER_LEN {
            let armed = self.armed.lock().unwrap().take();
            if let Some(writer_moves) = armed {
                writer_moves();
            }
        }
        Ok(())
    }
}

/// The same rotation landing later: after the reader's cursor found the end of the log, while
/// it weighs the page headers after it (and, finding a newer hint, reads the place again with
/// a fresh cursor, which meets the record under key 2). The reader still ends before the
/// replaced segment. Before, the second look's `UnlistedKey` came out as damage.
#[test]
fn a_reader_weighing_the_end_as_a_rotation_replaces_the_next_segment_ends_before_it() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let mut keys = KeyRing::generate().unwrap();
        let wal = Arc::new(Wal::open(dir.path(), config(mode, &keys, false)).unwrap());
        let mut written = Vec::new();
        while u64::from(wal.end_lsn()) < SEGMENT + 3 * 4096 {
            written.push(format!("under key 1: {}", written.len()).into_bytes());
            append(&wal, written.last().unwrap());
        }
        assert!(wal.prepare_next_segment().unwrap(), "{mode}");
        keys.add(2, Key::generate().unwrap()).unwrap();
        let hooks = Arc::new(MoveAtHeaderRead::default());
        let reader = Reader::open_with_storage(
            dir.path(),
            Some(keys.clone()),
            Arc::new(Hooked(hooks.clone())),
        )
        .unwrap();
        assert_eq!(
            reader.segments().len(),
            3,
            "{mode}: the prepared segment is listed"
        );

        let mut records = reader.records_from(Lsn::default());
        for (i, want) in written.iter().enumerate() {
            let got = records.next().unwrap().unwrap();
            assert_eq!(&got.payload, want, "{mode}: record {i}");
        }
        let (writer, key) = (wal.clone(), keys.get(2).unwrap().clone());
        *hooks.armed.lock().unwrap() = Some(Box::new(move || {
            writer.activate_key(2, key).unwrap();
            for i in 0..5 {
                append(&writer, format!("under key 2: {i}").as_bytes());
            }
        }));
        match records.next() {
            None => {}
            Some(Ok(r)) => panic!(
                "{mode}: a record at {} past the replaced segment's start",
                r.lsn
            ),
            Some(Err(e)) => panic!("{mode}: the writer moved on, nothing is damaged: {e}"),
        }
        assert!(
            hooks.armed.lock().unwrap().is_none(),
            "{mode}: the rotation ran"
        );

        let after = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let read = after
            .records_from(Lsn::default())
            .map(|r| r.unwrap().payload)
            .collect::<Vec<_>>();
        assert_eq!(
            read.len(),
            written.len() + 5,
            "{mode}: every record, read again"
        );
        drop(records);
        Arc::into_inner(wal).unwrap().close().unwrap();
    }
}
