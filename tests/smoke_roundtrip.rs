use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

#[test]
fn smoke() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let cfg = Config::new(mode)
            .keys(keys.clone())
            .sync(SyncMode::Buffered)
            .page_size(512)
            .segment_size(4096)
            .buffer_size(2048);
        let wal = Wal::open(dir.path(), cfg.clone()).unwrap();
        let mut expect = Vec::new();
        for i in 0..200usize {
            let p = vec![i as u8; i * 7 % 1500];
            let lsn = wal.append((i % 5) as u8, &p).unwrap();
            if i % 3 == 0 {
                wal.flush(lsn).unwrap();
            }
            expect.push((lsn, p));
        }
        drop(wal);
        let r = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let got: Vec<_> = r
            .records_from(Lsn::default())
            .map(|r| r.unwrap())
            .map(|r| (r.lsn, r.payload))
            .collect();
        assert_eq!(got.len(), expect.len(), "{mode}");
        assert_eq!(got, expect, "{mode}");
        let mut n = 0;
        let wal = Wal::open_and_replay(dir.path(), cfg, Lsn::default(), |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 200);
        let l = wal.append(9, b"more").unwrap();
        wal.close().unwrap();
        let r = Reader::open(dir.path(), Some(keys)).unwrap();
        let last = r.records_from(l).next().unwrap().unwrap();
        assert_eq!(last.payload, b"more");
    }
}
