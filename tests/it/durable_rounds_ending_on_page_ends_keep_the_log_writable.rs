//! Durable rounds that end exactly at a page's end, with a buffer of four pages: once such a
//! round's fdatasync returns, the page has landed in full and an appender may claim its slot
//! for the page four pages on, at any moment, while the round's leader still rewrites that
//! page's header with the new durable hint. The leader must see one state of the slot (the
//! page, or the newer page and nothing to rewrite), never poison the log because the slot
//! moved on between a check and the copy. Four threads append records sized so that two fill
//! a page body exactly, two committing each record and two committing runs of nine, in every
//! mode; every commit must succeed and every record read back.

use walcrypt::inspect::{PAGE_HEADER_LEN, RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN, TAG_LEN};
use walcrypt::{Config, KeyRing, Mode, SyncMode, Wal};

const PAGE: usize = 1024;
const THREADS: usize = 4;
const COMMITS: usize = 450;

/// A payload length such that two records of it fill a page body exactly.
fn payload_len(mode: Mode) -> usize {
    let (header, tag) = match mode {
        Mode::PerRecord => (RECORD_HEADER_ENCRYPTED, 0),
        Mode::PerRecordGcm => (RECORD_HEADER_ENCRYPTED, TAG_LEN),
        _ => (RECORD_HEADER_PLAIN, 0),
    };
    (PAGE - PAGE_HEADER_LEN) / 2 - header - tag
}

#[test]
fn durable_commits_ending_on_page_ends_never_poison_the_log() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = Config::new(mode)
            .keys(keys.clone())
            .sync(SyncMode::Durable)
            .page_size(PAGE as u64)
            .segment_size(64 * 1024)
            .buffer_size(4 * PAGE);
        let wal = Wal::open(dir.path(), config).unwrap();
        let len = payload_len(mode);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let wal = &wal;
                s.spawn(move || {
                    // Odd threads commit every record; even ones append runs of a ring's
                    // worth of records before they commit, so appenders reach the page
                    // one ring length past a round's last page while its leader is at work.
                    let run = if t % 2 == 1 { 1 } else { 9 };
                    for i in 0..COMMITS {
                        let payload = vec![(t * COMMITS + i) as u8; len];
                        let lsn = wal.append(1, &payload).unwrap();
                        if i % run == run - 1 || i == COMMITS - 1 {
                            wal.flush(lsn).unwrap_or_else(|e| {
                                panic!("{mode}: commit {i} of thread {t}: {e}")
                            });
                        }
                    }
                });
            }
        });
        wal.close().unwrap();
        let all = crate::support::read_all(dir.path(), Some(keys));
        assert_eq!(all.len(), THREADS * COMMITS, "{mode}");
    }
}
