//! A flipped bit deep in a log large enough for recovery to read ahead on a second thread is
//! reported by recovery exactly as the reader reports it (same LSN, segment and kind), in
//! every mode, after the callback saw exactly the records before it.

mod support;

use support::large::{PAGE, SEGMENT, append_flushing, config, payload};
use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

#[test]
fn flipped_bit_at_three_quarters_of_a_three_mib_log() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable)).unwrap();
        let lsns = append_flushing(&wal, |_, written| written < 3 << 20);
        wal.close().unwrap();

        // A payload byte of a record at about three quarters of the log, on its header's page.
        let n = (lsns.len() * 3 / 4..lsns.len())
            .find(|&i| (u64::from(lsns[i]) + 40) / PAGE == u64::from(lsns[i]) / PAGE)
            .unwrap();
        let byte = u64::from(lsns[n]) + 40;
        let segment = byte - byte % SEGMENT;
        support::tamper::flip_bits_at(dir.path(), byte, 0x04);

        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let read: Vec<_> = reader.records_from(Lsn::default()).collect();
        assert_eq!(read.len(), n + 1, "{mode}: {n} records, then the error");
        let Some(Err(Error::Corrupt { at, kind })) = read.last() else {
            panic!(
                "{mode}: the reader must report corruption, got {:?}",
                read.last()
            );
        };
        assert_eq!(at.lsn, lsns[n], "{mode}");

        let mut seen = Vec::new();
        let replayed = Wal::open_and_replay(
            dir.path(),
            config(mode, &keys, SyncMode::Durable),
            Lsn::default(),
            |r| {
                assert_eq!(r.payload, payload(seen.len()), "{mode}");
                seen.push(r.lsn);
                Ok(())
            },
        );
        match replayed {
            Err(Error::Corrupt {
                at: got_at,
                kind: got_kind,
            }) => {
                assert_eq!(got_at, *at, "{mode}: recovery and reader agree on where");
                assert_eq!(
                    format!("{got_kind:?}"),
                    format!("{kind:?}"),
                    "{mode}: and on what"
                );
                assert_eq!(u64::from(got_at.segment), segment, "{mode}");
            }
            other => panic!("{mode}: recovery must refuse the damaged log, got {other:?}"),
        }
        assert_eq!(
            seen,
            lsns[..n],
            "{mode}: every record before the damage, in order"
        );
    }
}
