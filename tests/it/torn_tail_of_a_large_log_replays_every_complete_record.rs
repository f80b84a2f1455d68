//! A crash that tears the last record of a log large enough for recovery to read ahead on a
//! second thread: recovery replays every complete record in order, ends the log before the
//! torn one, and appends continue there, in every mode.

use crate::support;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use support::large::{SEGMENT, append_flushing, config, payload};
use walcrypt::{KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

#[test]
fn last_record_cut_short_in_a_three_mib_log() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        // Flushed every 50 records; the last 30 go out in one final write (the writer's drop:
        // a close would vouch for them), so the torn record was in flight when the crash came.
        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable)).unwrap();
        let lsns = append_flushing(&wal, |lsns, written| written < 3 << 20 || lsns % 50 != 30);
        drop(wal);
        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let mut records = reader.records_from(Lsn::default());
        let ends: Vec<Lsn> = records.by_ref().map(|r| r.unwrap().end_lsn).collect();
        assert_eq!(ends.len(), lsns.len());
        drop(reader);

        // The crash: the file ends one byte before the last record does.
        let end = u64::from(*ends.last().unwrap());
        let segment = (end - 1) - (end - 1) % SEGMENT;
        let path = dir
            .path()
            .join(walcrypt::inspect::segment_file_name(Lsn(segment)));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut last_byte = [0u8; 1];
        file.read_exact_at(&mut last_byte, end - 1 - segment)
            .unwrap();
        file.set_len(end - 1 - segment).unwrap();
        drop(file);
        // A cut-off zero byte reads back as the zero it was: the record is then still whole.
        let kept = if last_byte[0] == 0 {
            lsns.len()
        } else {
            lsns.len() - 1
        };

        let mut seen = Vec::new();
        let wal = Wal::open_and_replay(
            dir.path(),
            config(mode, &keys, SyncMode::Durable),
            Lsn::default(),
            |r| {
                assert_eq!(r.payload, payload(seen.len()), "{mode}");
                seen.push(r.lsn);
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{mode}: a torn tail is not damage: {e}"));
        assert_eq!(seen, lsns[..kept], "{mode}");
        let next = wal.append(2, b"after the crash").unwrap();
        wal.close().unwrap();

        let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
        let all: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(all.len(), kept + 1, "{mode}");
        assert_eq!(all[kept].lsn, next, "{mode}");
        assert_eq!(all[kept].payload, b"after the crash", "{mode}");
        assert!(u64::from(next) >= u64::from(ends[kept - 1]), "{mode}");
    }
}
