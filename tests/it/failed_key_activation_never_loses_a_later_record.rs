//! A key activation (or rotation) in pagelevel mode writes a segment-switch record and then
//! reads the segment's header for the key it lists. When that read fails, the switch record is
//! already (partly) in the buffer and perhaps on file, so the log must be poisoned: a later
//! record copied over the switch record's bytes, in a page that is never written again, would
//! be acknowledged and then lost. Swept over many fill levels, so the switch record lands at
//! every place in a page, including across a page whose buffer slot is still in use.

use crate::support;

use support::faults::{Effect, FaultStorage, Op};
use support::{payload, read_all, small_config};
use walcrypt::{Error, Key, KeyRing, Lsn, Mode, SyncMode, Wal};

const EIO: i32 = 5;

#[test]
fn a_failed_key_activation_poisons_and_loses_no_acknowledged_record() {
    let keys = KeyRing::generate().unwrap();
    for fill in 0..90u64 {
        let dir = tempfile::tempdir().unwrap();
        let storage = FaultStorage::new();
        let config = small_config(Mode::PageLevel, &keys)
            .sync(SyncMode::Buffered)
            .buffer_size(4 * 512)
            .segment_size(64 * 512)
            .prepare_segments(false)
            .storage(storage.arc());
        let wal = Wal::open(dir.path(), config).unwrap();
        let mut acknowledged: Vec<(Lsn, Vec<u8>)> = Vec::new();
        for i in 0..fill {
            let p = payload(fill * 1000 + i, 40 + (i as usize * 7) % 50);
            let lsn = wal.append(1, &p).unwrap();
            if i % 37 == 36 {
                wal.flush(lsn).unwrap();
                acknowledged.push((lsn, p));
            }
        }

        storage.fail_from(
            Op::OpenRead,
            storage.count(Op::OpenRead) + 1,
            Effect::Errno(EIO),
        );
        let activated = wal.activate_key(2, Key::generate().unwrap());
        storage.heal();
        assert!(
            activated.is_err(),
            "fill {fill}: the activation should fail"
        );

        let after = payload(fill * 1000 + 999, 60);
        match wal.append(1, &after) {
            Err(Error::Poisoned(_)) => {}
            Ok(lsn) => {
                // Not poisoned: whatever is acknowledged now must be read back.
                if wal.flush(lsn).is_ok() {
                    acknowledged.push((lsn, after));
                }
                panic_if_lost(&wal, dir.path(), &keys, fill, &acknowledged);
                panic!("fill {fill}: a failed activation left the log writable");
            }
            Err(e) => panic!("fill {fill}: unexpected error {e}"),
        }
        drop(wal);
        check_kept(dir.path(), &keys, fill, &acknowledged);
    }
}

fn panic_if_lost(
    wal: &Wal,
    dir: &std::path::Path,
    keys: &KeyRing,
    fill: u64,
    acknowledged: &[(Lsn, Vec<u8>)],
) {
    let _ = wal.sync();
    check_kept(dir, keys, fill, acknowledged);
}

fn check_kept(dir: &std::path::Path, keys: &KeyRing, fill: u64, acknowledged: &[(Lsn, Vec<u8>)]) {
    let read = read_all(dir, Some(keys.clone()));
    for (lsn, p) in acknowledged {
        assert!(
            read.iter().any(|(l, _, q)| l == lsn && q == p),
            "fill {fill}: the record acknowledged at {lsn} is gone ({} records read)",
            read.len()
        );
    }
}
