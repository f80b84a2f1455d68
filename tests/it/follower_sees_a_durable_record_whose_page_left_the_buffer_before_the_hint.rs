//! A Durable flush whose record ends its page: while the round's fdatasync runs, appenders
//! (that do not flush) fill the whole WAL buffer and take the page's buffer slot for a later
//! page. The round's hint refresh, after the fdatasync, then cannot image the page from the
//! buffer. It skipped the page, leaving the new durable hint to the later page's first
//! write-out, which an idle writer never makes and a failing disk (a poisoned log) never
//! completes: a follower of the files never saw the acknowledged record, also after the
//! writer was dropped. The refresh now rewrites the header on file. Found by an outside probe
//! with failing fdatasyncs and many threads.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::hooked::{Gate, Hooked, Hooks};
use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, SyncMode, Wal};

/// Holds the first fdatasync of a segment after `armed` is set until `release`.
#[derive(Default)]
struct HoldSync {
    armed: AtomicBool,
    gate: Gate,
}

impl Hooks for HoldSync {
    fn syncing(&self, path: &Path) {
        if path.extension().is_none_or(|e| e != "wal") || !self.armed.swap(false, Ordering::SeqCst)
        {
            return;
        }
        self.gate.hold();
    }
}

#[test]
fn follower_sees_a_durable_record_whose_page_left_the_buffer_before_the_hint() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let hooks = Arc::new(HoldSync::default());
        let page = 512u64;
        let config = Config::new(mode)
            .keys(keys.clone())
            .sync(SyncMode::Durable)
            .page_size(page)
            .segment_size(64 * 1024)
            .buffer_size(4 * page as usize)
            .prepare_segments(false)
            .storage(Arc::new(Hooked(hooks.clone())));
        let wal = Arc::new(Wal::open(dir.path(), config).unwrap());
        wal.flush(wal.append(1, b"first").unwrap()).unwrap();
        // A record that ends exactly where its page ends: the flush lands the page in full.
        let start = wal.end_lsn();
        let probe_end = |len: usize| {
            // The end a record of `len` bytes would have, found with a throwaway log.
            let scratch = tempfile::tempdir().unwrap();
            let config = Config::new(mode)
                .keys(keys.clone())
                .page_size(page)
                .segment_size(64 * 1024);
            let s = Wal::open(scratch.path(), config).unwrap();
            s.append(1, b"first").unwrap();
            assert_eq!(s.end_lsn(), start, "{mode}: the scratch log starts alike");
            s.append(1, &vec![0x5A; len]).unwrap();
            u64::from(s.end_lsn())
        };
        let target_end = (u64::from(start) / page + 2) * page;
        // The shortest record that reaches the page's end (ends only grow with the length).
        let (mut lo, mut hi) = (1, 3 * page as usize);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match probe_end(mid) < target_end {
                true => lo = mid + 1,
                false => hi = mid,
            }
        }
        let len = lo;
        let lsn = wal.append(1, &vec![0x5A; len]).unwrap();
        assert_eq!(
            u64::from(wal.end_lsn()),
            target_end,
            "{mode}: the record ends its page"
        );
        hooks.armed.store(true, Ordering::SeqCst);
        let flusher = {
            let wal = wal.clone();
            std::thread::spawn(move || wal.flush(lsn))
        };
        hooks.gate.wait_held();
        // While the fdatasync is held: more than the whole buffer's worth of records, not
        // flushed, so the page's slot is taken for a page one ring length on.
        let mut appended = 0;
        while appended < 5 * page as usize {
            wal.append(2, &[0xC3; 100]).unwrap();
            appended += 100;
        }
        hooks.gate.release();
        flusher.join().unwrap().unwrap();
        // The writer stays idle: a follower of the files sees the acknowledged record.
        let mut follower = Follower::open(dir.path(), Some(keys.clone()), Lsn(0)).unwrap();
        let mut seen = false;
        while let Some(record) = follower.next_timeout(Duration::from_millis(500)).unwrap() {
            if record.lsn == lsn {
                seen = true;
                break;
            }
        }
        assert!(
            seen,
            "{mode}: the follower never saw the record at {lsn}, flushed"
        );
        drop(wal);
    }
}
