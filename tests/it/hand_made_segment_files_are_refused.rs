//! Hand-made segment files that no writer produces — a valid segment named (and headed) for a
//! start near the top of the LSN space, or a first segment whose start is not on the segment
//! grid — get a clear error naming the file from the Reader and from Wal::open. Nothing is
//! deleted or rewritten, and nothing panics (debug builds check arithmetic overflow).

use std::path::Path;

use walcrypt::inspect::{
    FORMAT_VERSION, PAGE_HEADER_LEN, PageHeader, RecordHeader, SegmentHeader, record_crc,
    segment_file_name,
};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, Wal};

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .page_size(512)
        .segment_size(1024)
        // Only the one segment moved below may exist.
        .prepare_segments(false)
}

/// A one-segment log (one data page) whose segment is moved to `start`: file name, segment
/// header, page header and (outside pagelevel, whose page body is ciphertext) the record's
/// checksum, which binds its LSN.
fn log_starting_at(dir: &Path, mode: Mode, keys: &KeyRing, start: u64) -> String {
    let wal = Wal::open(dir, config(mode, keys)).unwrap();
    let lsn = wal.append(1, b"only record").unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();
    let old = dir.join(segment_file_name(Lsn(0)));
    let mut bytes = std::fs::read(&old).unwrap();
    let mut header = SegmentHeader::decode(&bytes).unwrap();
    header.start = Lsn(start);
    header.encode(&mut bytes[..512]);
    // Page headers carry their own address: move them along.
    let page = &mut bytes[512..512 + PAGE_HEADER_LEN];
    let mut h = PageHeader::decode(header.log_id, page).unwrap();
    h.page_lsn = Lsn(start + 512);
    h.encode(header.log_id, page);
    if mode != Mode::PageLevel {
        let at = 512 + PAGE_HEADER_LEN;
        let mut record = RecordHeader::decode(&bytes[at..]).unwrap();
        let (head, rest) = bytes[at..].split_at(record.len_bytes());
        let stored = &rest[..record.len as usize];
        record.crc = record_crc(FORMAT_VERSION, Lsn(start + at as u64), head, stored);
        record.encode(&mut bytes[at..]);
    }
    std::fs::remove_file(&old).unwrap();
    let name = segment_file_name(Lsn(start));
    std::fs::write(dir.join(&name), &bytes).unwrap();
    name
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn segments_off_the_grid_or_near_the_end_of_the_lsn_space_are_refused() {
    for mode in Mode::ALL {
        for start in [u64::MAX - 1023, 1 << 63, 1000, 1024 + 512] {
            let keys = KeyRing::generate().unwrap();
            let tmp = tempfile::tempdir().unwrap();
            let name = log_starting_at(tmp.path(), mode, &keys, start);
            let before = snapshot(tmp.path());
            let what = format!("{mode}, segment {name}");
            match Reader::open(tmp.path(), Some(keys.clone())) {
                Ok(_) => panic!("{what}: the reader accepted it"),
                Err(e) => assert!(e.to_string().contains(&name), "{what}: reader: {e}"),
            }
            match Wal::open(tmp.path(), config(mode, &keys)) {
                Ok(wal) => panic!("{what}: Wal::open accepted it, end {}", wal.end_lsn()),
                Err(e) => assert!(e.to_string().contains(&name), "{what}: open: {e}"),
            }
            assert_eq!(snapshot(tmp.path()), before, "{what}: files changed");
        }
    }
}

#[test]
fn the_last_segment_below_the_limit_is_still_read() {
    // The limit refuses only what arithmetic cannot handle: a segment ending at 2^63 is fine.
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    log_starting_at(tmp.path(), Mode::PerRecord, &keys, (1 << 63) - 1024);
    let wal = Wal::open(tmp.path(), config(Mode::PerRecord, &keys)).unwrap();
    let lsn = wal.append(2, b"second").unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();
    let reader = Reader::open(tmp.path(), Some(keys)).unwrap();
    let records: Vec<_> = reader
        .records_from(Lsn::default())
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].payload, b"only record");
    assert_eq!(records[1].payload, b"second");
}

/// A FIFO put under a segment's name, or the control file's: the open, a reader and a replay
/// get an error naming the file. Before, opening it blocked every one of them forever, waiting
/// for a writer on the pipe (as `wal-dump`, which reads through the same storage).
#[test]
fn a_fifo_under_a_log_files_name_is_refused_not_waited_on() {
    let keys = KeyRing::generate().unwrap();
    // The second of several segments, then the control file (a checkpoint writes one).
    for planted in [
        segment_file_name(Lsn(1024)),
        walcrypt::CONTROL_FILE.to_string(),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(dir.path(), config(Mode::PerRecord, &keys)).unwrap();
        let first = wal.append(1, b"first").unwrap();
        for i in 0..40u32 {
            wal.append(1, &i.to_le_bytes().repeat(8)).unwrap();
        }
        wal.checkpoint(first, b"snapshot").unwrap();
        wal.close().unwrap();
        let path = dir.path().join(&planted);
        assert!(path.exists(), "{planted} exists to be replaced");
        std::fs::remove_file(&path).unwrap();
        crate::support::mkfifo(&path);
        let (d, k) = (dir.path().to_path_buf(), keys.clone());
        let (open, read) = crate::support::within_20s(&planted, move || {
            let open = Wal::open(&d, config(Mode::PerRecord, &k)).map(drop);
            let read = Reader::open(&d, Some(k.clone())).and_then(|r| {
                r.records_from(Lsn(0))
                    .collect::<Result<Vec<_>, _>>()
                    .map(drop)
            });
            (open, read)
        });
        let err = open.expect_err("the open refuses the log").to_string();
        assert!(
            err.contains(&planted) && err.contains("not a regular file"),
            "{err}"
        );
        if planted != walcrypt::CONTROL_FILE {
            let err = read.expect_err("the reader refuses the log").to_string();
            assert!(
                err.contains(&planted) && err.contains("not a regular file"),
                "{err}"
            );
        }
    }
}
