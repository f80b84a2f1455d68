//! A Buffered commit that continues a page this open already wrote whole (same durable hint)
//! writes only the bytes appended since, in plaintext and perrecord; `sync` rewrites the first
//! sector of the page it ends in with the hint it made true in its header (the rest of the
//! page is on file already), so the next commit appends there too; in
//! those modes a page image ends where the commit ends (the file holds zeros after it). Every
//! pagelevel page is written whole. The records read back.

use crate::support;

use std::sync::Arc;

use support::{Recorder, RecordingStorage, config_4k_pages, payload, read_all};
use walcrypt::{KeyRing, Lsn, Mode, SyncMode, Wal};

const PAGE: u64 = 4096;
const SEGMENT: u64 = 64 * 1024;

/// The writes since the last call, as (offset in the segment file, length).
fn take_writes(recorder: &Recorder) -> Vec<(u64, u64)> {
    std::mem::take(&mut *recorder.writes.lock().unwrap())
        .into_iter()
        .map(|(offset, bytes)| (offset, bytes.len() as u64))
        .collect()
}

fn page_of(lsn: u64) -> u64 {
    lsn / PAGE * PAGE % SEGMENT
}

#[test]
fn buffered_commit_writes_only_what_it_appended() {
    for mode in [Mode::Plaintext, Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let recorder = Arc::new(Recorder::default());
        let config = config_4k_pages(mode, &keys, SyncMode::Buffered)
            .storage(Arc::new(RecordingStorage(recorder.clone())));
        let wal = Wal::open(dir.path(), config).unwrap();
        let appends_whole = mode == Mode::PageLevel;
        let mut expected = Vec::new();
        let mut put = |wal: &Wal, seed: u64, len: usize| {
            let p = payload(seed, len);
            let lsn = wal.append(1, &p).unwrap();
            expected.push((lsn, p));
            (u64::from(lsn), u64::from(wal.end_lsn()))
        };

        // The page image, whole in pagelevel, up to the end of the commit otherwise.
        let image = |lsn: u64, end: u64| {
            if appends_whole {
                (page_of(lsn), PAGE)
            } else {
                (page_of(lsn), end - lsn / PAGE * PAGE)
            }
        };

        let (a, a_end) = put(&wal, 1, 100);
        take_writes(&recorder);
        wal.flush(Lsn(a)).unwrap();
        assert_eq!(
            take_writes(&recorder),
            vec![image(a, a_end)],
            "{mode}: first write of a page"
        );

        let (b, b_end) = put(&wal, 2, 200);
        wal.flush(Lsn(b)).unwrap();
        let continued = if appends_whole {
            vec![(page_of(b), PAGE)]
        } else {
            vec![(b % SEGMENT, b_end - b)]
        };
        assert_eq!(take_writes(&recorder), continued, "{mode}: continued page");

        // A record running into the next page: the rest of this page, then the next one (whole
        // in pagelevel, up to the record's end otherwise).
        let (c, c_end) = put(&wal, 3, 5000);
        wal.flush(Lsn(c)).unwrap();
        let across = if appends_whole {
            vec![(page_of(c), page_of(c_end) + PAGE - page_of(c))]
        } else {
            vec![(c % SEGMENT, c_end - c)]
        };
        assert_eq!(take_writes(&recorder), across, "{mode}: across a page");

        // `sync` moves the durable hint and writes the first sector of the page it ends in
        // again, with the new hint in its header; the next commit finds that header current and
        // appends again.
        wal.sync().unwrap();
        assert_eq!(
            take_writes(&recorder).last(),
            Some(&(page_of(c_end), 512)),
            "{mode}: sync rewrites the last page's header sector with the new hint"
        );
        let (d, d_end) = put(&wal, 4, 100);
        wal.flush(Lsn(d)).unwrap();
        let continued_after_sync = if appends_whole {
            vec![image(d, d_end)]
        } else {
            vec![(d % SEGMENT, d_end - d)]
        };
        assert_eq!(
            take_writes(&recorder),
            continued_after_sync,
            "{mode}: after sync"
        );

        let (e, e_end) = put(&wal, 5, 100);
        wal.flush(Lsn(e)).unwrap();
        let continued = if appends_whole {
            vec![(page_of(e), PAGE)]
        } else {
            vec![(e % SEGMENT, e_end - e)]
        };
        assert_eq!(
            take_writes(&recorder),
            continued,
            "{mode}: continued after sync"
        );

        wal.close().unwrap();
        let read: Vec<(Lsn, Vec<u8>)> = read_all(dir.path(), Some(keys))
            .into_iter()
            .map(|(lsn, _, p)| (lsn, p))
            .collect();
        assert_eq!(read, expected, "{mode}");
    }
}
