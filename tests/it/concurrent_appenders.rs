//! Eight threads append at once in every mode: every record comes back exactly once, in LSN
//! order, byte-identical.

use crate::support;

use std::collections::HashMap;

use support::{payload, read_all};
use walcrypt::{Config, KeyRing, Mode, SyncMode, Wal};

const THREADS: u64 = 8;
const PER_THREAD: u64 = 400;

#[test]
fn eight_threads_every_record_exactly_once() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        // A small buffer forces appenders to wait for the writer and write pages themselves.
        let config = Config::new(mode)
            .keys(keys.clone())
            .page_size(1024)
            .segment_size(64 * 1024)
            .buffer_size(8 * 1024)
            .sync(SyncMode::Buffered);
        let wal = Wal::open(dir.path(), config).unwrap();
        let mut appended: HashMap<u64, Vec<u8>> = HashMap::new();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let wal = &wal;
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        for i in 0..PER_THREAD {
                            let id = t * PER_THREAD + i;
                            let mut p = id.to_le_bytes().to_vec();
                            p.extend(payload(id, (id % 700) as usize));
                            let lsn = wal.append((t + 1) as u8, &p).unwrap();
                            if i % 16 == 0 {
                                wal.flush(lsn).unwrap();
                            }
                            mine.push((u64::from(lsn), p));
                        }
                        mine
                    })
                })
                .collect();
            for h in handles {
                for (lsn, p) in h.join().unwrap() {
                    assert!(
                        appended.insert(lsn, p).is_none(),
                        "{mode}: LSN handed out twice"
                    );
                }
            }
        });
        wal.close().unwrap();

        let records = read_all(dir.path(), Some(keys));
        assert_eq!(records.len() as u64, THREADS * PER_THREAD, "{mode}");
        let mut seen_ids = std::collections::HashSet::new();
        let mut last = None;
        for (lsn, kind, p) in &records {
            assert!(last < Some(*lsn), "{mode}: records out of LSN order");
            last = Some(*lsn);
            let id = u64::from_le_bytes(p[..8].try_into().unwrap());
            assert_eq!(kind, &((id / PER_THREAD + 1) as u8), "{mode}");
            assert_eq!(
                appended.get(&u64::from(*lsn)),
                Some(p),
                "{mode}: payload at {lsn}"
            );
            assert!(seen_ids.insert(id), "{mode}: record {id} twice");
        }
    }
}
