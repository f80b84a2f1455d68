//! When the WAL buffer is full, an appender writes pages out itself. If that write-out fails
//! (a failed write, a short write, no space for the next segment), the append reports the
//! error and the log is poisoned: no later append, flush or close reports success, since pages
//! may be on disk beyond what the writer accounted for. Reopening gives a prefix of what was
//! appended, holding every record acknowledged before the failure.

use crate::support;

use support::faults::{Effect, FaultStorage, Op};
use support::{check_payload, payload_for};
use walcrypt::{Config, Error, KeyRing, Lsn, Mode, SyncMode, Wal};

fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .sync(SyncMode::Durable)
        .page_size(4096)
        .segment_size(64 * 1024)
        .buffer_size(16 * 1024)
        .prepare_segments(false)
}

#[test]
fn a_failed_write_out_inside_append_poisons_the_log() {
    let faults: [(Op, u64, Effect); 6] = [
        (Op::Write, 1, Effect::Errno(libc::EIO)),
        (Op::Write, 3, Effect::ShortWrite(libc::ENOSPC)),
        (Op::Write, 8, Effect::Errno(libc::ENOSPC)),
        (Op::Create, 2, Effect::Errno(libc::ENOSPC)),
        (Op::SetLen, 2, Effect::Errno(libc::ENOSPC)),
        (Op::Sync, 3, Effect::Errno(libc::EIO)),
    ];
    for mode in Mode::ALL {
        for (op, nth, effect) in faults {
            let what = format!("{mode} {op:?} #{nth} {effect:?}");
            let keys = KeyRing::generate().unwrap();
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("log");
            let storage = FaultStorage::new();
            let wal = Wal::open(&dir, config(mode, &keys).storage(storage.arc())).unwrap();
            // One flushed record first, then appends only: every write-out happens inside
            // append, when the buffer is full.
            let (kind, payload) = payload_for(1);
            let lsn = wal.append(kind, &payload).unwrap();
            wal.flush(lsn).unwrap();
            storage.fail_nth(op, storage.count(op) + nth, effect);
            let mut failed_at = None;
            let mut last = lsn;
            for id in 2..2000 {
                let (kind, payload) = payload_for(id);
                match wal.append(kind, &payload) {
                    Ok(lsn) => last = lsn,
                    Err(e) => {
                        assert!(!matches!(e, Error::Poisoned(_)), "{what}: first error {e}");
                        failed_at = Some(id);
                        break;
                    }
                }
            }
            let failed_at = failed_at.unwrap_or_else(|| panic!("{what}: the fault never fired"));
            assert!(storage.injected() > 0, "{what}");
            let (kind, payload) = payload_for(failed_at);
            assert!(
                matches!(wal.append(kind, &payload), Err(Error::Poisoned(_))),
                "{what}"
            );
            assert!(
                matches!(wal.flush(last), Err(Error::Poisoned(_))),
                "{what}: flush"
            );
            assert!(
                matches!(wal.close(), Err(Error::Poisoned(_))),
                "{what}: close"
            );
            let mut ids = Vec::new();
            let wal = Wal::open_and_replay(&dir, config(mode, &keys), Lsn::default(), |r| {
                ids.push(
                    check_payload(r.kind, &r.payload).unwrap_or_else(|e| panic!("{what}: {e}")),
                );
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            let m = ids.len() as u64;
            assert!(m >= 1, "{what}: the flushed record is lost");
            assert_eq!(ids, (1..=m).collect::<Vec<_>>(), "{what}: not a prefix");
            assert!(
                m < failed_at,
                "{what}: {m} records back, the append of {failed_at} failed"
            );
            wal.close().unwrap();
        }
    }
}
