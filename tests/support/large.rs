//! Logs large enough that recovery replays them on two threads (past its first MiB): 4 KiB
//! pages, 1 MiB segments, and records of 40 B to 3 KiB whose payloads follow from their index.

use std::path::Path;

use walcrypt::{Config, Error, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

pub const PAGE: u64 = 4096;
pub const SEGMENT: u64 = 1 << 20;

/// 4 KiB pages, 1 MiB segments, no segments prepared ahead.
pub fn config(mode: Mode, keys: &KeyRing, sync: SyncMode) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(sync)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .prepare_segments(false)
}

/// The payload of record `i`: 40 B to 3 KiB.
pub fn payload(i: usize) -> Vec<u8> {
    let len = 40 + (i * 97) % 3000;
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// Writes records until about `bytes` of payload are in the log, then closes it; returns
/// their LSNs.
pub fn write_log(dir: &Path, config: Config, bytes: usize) -> Vec<Lsn> {
    let wal = Wal::open(dir, config).unwrap();
    let mut lsns = Vec::new();
    let mut written = 0;
    while written < bytes {
        let p = payload(lsns.len());
        written += p.len();
        lsns.push(wal.append(1, &p).unwrap());
    }
    wal.close().unwrap();
    lsns
}

/// Threads of this process now.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Appends records to `wal` while `more(records so far, payload bytes so far)` holds,
/// flushing every 50th; returns their LSNs.
pub fn append_flushing(wal: &Wal, more: impl Fn(usize, usize) -> bool) -> Vec<Lsn> {
    let mut lsns = Vec::new();
    let mut written = 0;
    while more(lsns.len(), written) {
        let p = payload(lsns.len());
        written += p.len();
        let lsn = wal.append(1, &p).unwrap();
        lsns.push(lsn);
        if lsns.len() % 50 == 0 {
            wal.flush(lsn).unwrap();
        }
    }
    lsns
}

/// The log in `dir` (written by [`write_log`], records at `lsns`) is damaged in record `n`: a
/// plain read hands out the `n` records before it and then reports corruption at its LSN, and
/// recovery replays the same `n` records, in order, then refuses the log with the same error at
/// the same place (segment, offset, LSN).
pub fn assert_damage_reported_alike(
    dir: &Path,
    mode: Mode,
    keys: &KeyRing,
    lsns: &[Lsn],
    n: usize,
    what: &str,
) {
    let reader = Reader::open(dir, Some(keys.clone())).unwrap();
    let read: Vec<_> = reader.records_from(Lsn::default()).collect();
    assert_eq!(read.len(), n + 1, "{what}: {n} records, then the error");
    let Some(Err(Error::Corrupt { at, kind })) = read.last() else {
        panic!(
            "{what}: the reader must report corruption, got {:?}",
            read.last()
        );
    };
    assert_eq!(at.lsn, lsns[n], "{what}");

    let mut seen = Vec::new();
    let replayed = Wal::open_and_replay(
        dir,
        config(mode, keys, SyncMode::Durable),
        Lsn::default(),
        |r| {
            assert_eq!(r.payload, payload(seen.len()), "{what}");
            seen.push(r.lsn);
            Ok(())
        },
    );
    match replayed {
        Err(Error::Corrupt {
            at: got_at,
            kind: got_kind,
        }) => {
            assert_eq!(got_at, *at, "{what}: recovery and reader agree on where");
            assert_eq!(
                format!("{got_kind:?}"),
                format!("{kind:?}"),
                "{what}: and on what"
            );
            let segment = u64::from(lsns[n]) - u64::from(lsns[n]) % SEGMENT;
            assert_eq!(u64::from(got_at.segment), segment, "{what}");
        }
        other => panic!("{what}: recovery must refuse the damaged log, got {other:?}"),
    }
    assert_eq!(
        seen,
        lsns[..n],
        "{what}: every record before the damage, in order"
    );
}
