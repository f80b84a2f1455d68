//! `purge_before` removes the segment files that lie wholly before the given LSN (and before
//! the flushed end), oldest first, and nothing else: the log stays readable from its new first
//! record, the writer keeps writing, and the log reopens. A second purge of the same range
//! removes nothing.

use crate::support;

use support::{check_payload, payload_for};
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

const SEGMENT: u64 = 16 * 1024;

#[test]
fn purge_removes_whole_old_segments_only() {
    for mode in Mode::ALL {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let config = Config::new(mode)
            .keys(keys.clone())
            .sync(SyncMode::Durable)
            .page_size(1024)
            .segment_size(SEGMENT);
        let wal = Wal::open(tmp.path(), config.clone()).unwrap();
        let mut lsns = Vec::new();
        let mut id = 1;
        while u64::from(wal.end_lsn()) < 6 * SEGMENT {
            let (kind, payload) = payload_for(id);
            lsns.push(wal.append(kind, &payload).unwrap());
            id += 1;
        }
        wal.flush(*lsns.last().unwrap()).unwrap();
        // A record in the fifth segment: the four segments before it go.
        let cut = lsns
            .iter()
            .position(|l| u64::from(*l) >= 4 * SEGMENT + 2048)
            .unwrap();
        // The first segment ends where the second starts: it lies wholly before that.
        assert_eq!(
            wal.purge_before(Lsn(SEGMENT)).unwrap(),
            1,
            "{mode}: a segment ending at the limit goes"
        );
        assert_eq!(wal.purge_before(lsns[cut]).unwrap(), 3, "{mode}");
        assert_eq!(
            wal.purge_before(lsns[cut]).unwrap(),
            0,
            "{mode}: nothing left to purge"
        );
        let (kind, payload) = payload_for(id);
        let last = wal.append(kind, &payload).unwrap();
        wal.flush(last).unwrap();
        wal.close().unwrap();
        let reader = Reader::open(tmp.path(), Some(keys.clone())).unwrap();
        let first = reader.first_lsn().unwrap();
        assert!(
            u64::from(first) >= 4 * SEGMENT && first <= lsns[cut],
            "{mode}: first {first}"
        );
        let ids: Vec<u64> = reader
            .records_from(first)
            .map(|r| {
                let r = r.unwrap();
                check_payload(r.kind, &r.payload).unwrap()
            })
            .collect();
        let first_id = ids[0];
        assert_eq!(ids, (first_id..=id).collect::<Vec<_>>(), "{mode}");
        assert!(
            first_id as usize <= cut + 1,
            "{mode}: the record at the cut is kept"
        );
        let wal = Wal::open(tmp.path(), config).unwrap();
        assert!(wal.end_lsn() > last, "{mode}");
        wal.close().unwrap();
    }
}
