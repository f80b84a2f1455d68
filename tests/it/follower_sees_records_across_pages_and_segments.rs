//! A follower in the writer's process sees records appear as they are flushed, across page
//! and segment boundaries, in every mode: one reading only the files, one attached to the
//! `Wal`. Both yield exactly the appended records, in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, Record, SyncMode, Wal};

const RECORDS: usize = 300;

/// Records from a few bytes to three 1 KiB pages, naming their index.
fn payload(i: usize) -> Vec<u8> {
    let len = 8 + (i * 397) % 3000;
    let mut p = vec![(i % 251) as u8; len];
    p[..8].copy_from_slice(&(i as u64).to_le_bytes());
    p
}

fn collect(follower: &mut Follower, n: usize) -> Vec<Record> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        if let Some(r) = follower.next_timeout(Duration::from_millis(100)).unwrap() {
            out.push(r);
        }
    }
    out
}

#[test]
fn follower_sees_records_across_pages_and_segments() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = Config::new(mode)
            .keys(keys.clone())
            .sync(SyncMode::Durable)
            .page_size(1024)
            .segment_size(8 * 1024)
            .buffer_size(8 * 1024);
        let wal = Arc::new(Wal::open(dir.path(), config).unwrap());
        let mut from_files = Follower::open(dir.path(), Some(keys.clone()), Lsn::default())
            .unwrap()
            .poll_interval(Duration::from_millis(2));
        let mut attached = Follower::attach(&wal, Lsn::default()).unwrap();
        let (appended, seen_files, seen_attached) = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut lsns = Vec::new();
                for i in 0..RECORDS {
                    let lsn = wal.append(7, &payload(i)).unwrap();
                    wal.flush(lsn).unwrap();
                    lsns.push(lsn);
                }
                // One more flush, so a page header vouches for the last record.
                let marker = wal.append(9, b"marker").unwrap();
                wal.flush(marker).unwrap();
                lsns
            });
            let seen_attached = s.spawn(|| collect(&mut attached, RECORDS));
            let seen_files = collect(&mut from_files, RECORDS);
            (
                writer.join().unwrap(),
                seen_files,
                seen_attached.join().unwrap(),
            )
        });
        assert!(wal.geometry().segment_start(Lsn(appended[RECORDS - 1].0)).0 > 8 * 1024 * 10);
        for (name, seen) in [("files", &seen_files), ("attached", &seen_attached)] {
            assert_eq!(seen.len(), RECORDS, "{mode}: {name} follower");
            for (i, (r, lsn)) in seen.iter().zip(&appended).enumerate() {
                assert_eq!(r.lsn, *lsn, "{mode}: {name} follower, record {i}");
                assert_eq!(r.payload, payload(i), "{mode}: {name} follower, record {i}");
            }
        }
        let marker = attached.next_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(marker.map(|r| r.payload), Some(b"marker".to_vec()));
    }
}
