//! A follower never yields a record beyond what the writer has made durable: under
//! `SyncMode::Durable` every record it yields lies before the writer's fdatasync'ed end; under
//! `SyncMode::Buffered` (flush without fdatasync) it yields nothing until the log is synced,
//! while a follower asking for `Visibility::Written` sees the written records.

use std::time::Duration;

use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, SyncMode, Visibility, Wal};

fn config(mode: Mode, keys: &KeyRing, sync: SyncMode) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(1024)
        .segment_size(16 * 1024)
}

fn drain(follower: &mut Follower) -> Vec<walcrypt::Record> {
    let mut out = Vec::new();
    while let Some(r) = follower.poll().unwrap() {
        out.push(r);
    }
    out
}

#[test]
fn follower_yields_only_durable_records() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();

        // Durable: after each flush, what the follower yields ends at or before it.
        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable)).unwrap();
        let mut durable = Follower::open(dir.path(), Some(keys.clone()), Lsn::default()).unwrap();
        let mut yielded = 0;
        for i in 0..120u32 {
            let lsn = wal
                .append(1, &i.to_le_bytes().repeat(1 + i as usize % 40))
                .unwrap();
            wal.flush(lsn).unwrap();
            for r in drain(&mut durable) {
                assert!(
                    r.end_lsn <= wal.flushed_lsn(),
                    "{mode}: yielded {} past",
                    r.lsn
                );
                assert!(r.end_lsn <= durable.durable_lsn());
                yielded += 1;
            }
        }
        // From the files alone the follower sees every flush: the last page's header carries
        // the hint of the fdatasync that made it durable.
        assert_eq!(yielded, 120, "{mode}");
        wal.close().unwrap();

        // Buffered: flushed but never fdatasync'ed records are not yielded.
        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Buffered)).unwrap();
        let mut written = Follower::open(dir.path(), Some(keys.clone()), Lsn::default())
            .unwrap()
            .visibility(Visibility::Written);
        assert_eq!(drain(&mut written).len(), 120);
        for i in 0..50u32 {
            let lsn = wal.append(2, &i.to_le_bytes()).unwrap();
            wal.flush(lsn).unwrap();
        }
        let late = drain(&mut durable);
        assert_eq!(
            late.len(),
            0,
            "{mode}: every record synced before the reopen was yielded already"
        );
        assert_eq!(drain(&mut written).len(), 50, "{mode}: written records");
        // Closing syncs, and the last page's header vouches for every record.
        wal.close().unwrap();
        let vouched = durable.next_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(vouched.map(|r| r.kind), Some(2), "{mode}");
        assert_eq!(drain(&mut durable).len(), 49, "{mode}");
        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable)).unwrap();
        let lsn = wal.append(3, b"after").unwrap();
        wal.flush(lsn).unwrap();
        let after = durable.next_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(after.map(|r| r.lsn), Some(lsn), "{mode}");
        wal.close().unwrap();
    }
}
