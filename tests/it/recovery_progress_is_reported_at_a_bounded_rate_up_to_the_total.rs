//! Recovery tells the listener how far its scan has come: counts that never decrease, at most
//! one call per MiB scanned plus the last, and a last call (`done`) at the total, before the
//! summary. A new log has no scan to report.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::config_4k_pages;
use walcrypt::{
    EventListener, KeyRing, Lsn, Mode, RecoveryProgress, RecoverySummary, SyncMode, Wal,
};

const MIB: u64 = 1 << 20;

#[derive(Default)]
struct Heard {
    progress: Mutex<Vec<RecoveryProgress>>,
    /// Progress calls heard before the summary, per summary.
    progress_before_summary: Mutex<Vec<usize>>,
}

struct Listener(Arc<Heard>);

impl EventListener for Listener {
    fn on_recovery_progress(&self, progress: &RecoveryProgress) {
        self.0.progress.lock().unwrap().push(progress.clone());
    }
    fn on_recovery(&self, _summary: &RecoverySummary) {
        let heard = self.0.progress.lock().unwrap().len();
        self.0.progress_before_summary.lock().unwrap().push(heard);
    }
}

fn assert_monotone_bounded_and_complete(calls: &[RecoveryProgress], records: u64) {
    let last = calls.last().expect("at least the last call");
    assert!(last.done);
    assert_eq!(last.bytes_read, last.bytes_total);
    assert_eq!(last.records_read, records);
    assert!(calls[..calls.len() - 1].iter().all(|call| !call.done));
    for pair in calls.windows(2) {
        assert!(pair[0].bytes_read <= pair[1].bytes_read, "{pair:?}");
        assert!(pair[0].records_read <= pair[1].records_read, "{pair:?}");
        assert_eq!(pair[0].bytes_total, pair[1].bytes_total);
    }
    let bound = last.bytes_total / MIB + 1;
    assert!(
        calls.len() as u64 <= bound,
        "{} calls for {} bytes",
        calls.len(),
        last.bytes_total
    );
}

#[test]
fn replay_of_a_few_mib_reports_monotone_bounded_progress_ending_at_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let heard = Arc::new(Heard::default());
    let config = config_4k_pages(Mode::PerRecord, &keys, SyncMode::Buffered)
        .listener(Arc::new(Listener(heard.clone())));

    let wal = Wal::open(dir.path(), config.clone()).unwrap();
    let payload = vec![7u8; 2000];
    let mut records = 0u64;
    while wal.end_lsn() < Lsn(3 * MIB) {
        wal.append(1, &payload).unwrap();
        records += 1;
    }
    wal.close().unwrap();
    assert!(
        heard.progress.lock().unwrap().is_empty(),
        "a new log has no scan"
    );

    // A slow replay: a pause at each MiB lets the 250 ms clock ask for reports on the way.
    let mut mib_seen = 0;
    let wal = Wal::open_and_replay(dir.path(), config.clone(), Lsn::default(), |record| {
        if u64::from(record.lsn) / MIB > mib_seen {
            mib_seen = u64::from(record.lsn) / MIB;
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok(())
    })
    .unwrap();
    wal.close().unwrap();

    let calls = std::mem::take(&mut *heard.progress.lock().unwrap());
    assert_monotone_bounded_and_complete(&calls, records);
    assert!(
        calls.len() >= 2,
        "reports on the way, not only the last: {calls:?}"
    );
    assert!(calls.last().unwrap().bytes_total >= 3 * MIB);
    assert_eq!(
        heard.progress_before_summary.lock().unwrap()[1],
        calls.len()
    );

    // An open without replay scans the tail only, and ends at its total too.
    let wal = Wal::open(dir.path(), config).unwrap();
    wal.close().unwrap();
    let calls = heard.progress.lock().unwrap().clone();
    let last = calls.last().unwrap();
    assert!(last.done && last.bytes_read == last.bytes_total);
    assert!(calls.len() as u64 <= last.bytes_total / MIB + 1);
}
