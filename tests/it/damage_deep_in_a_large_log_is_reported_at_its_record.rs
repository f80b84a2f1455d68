//! A flipped bit deep in a log large enough for recovery to read ahead on a second thread is
//! reported by recovery exactly as the reader reports it (same LSN, segment and kind), in
//! every mode, after the callback saw exactly the records before it.

use crate::support;

use support::large::{PAGE, append_flushing, config};
use walcrypt::inspect::REC_CRC_AT;
use walcrypt::{KeyRing, Mode, SyncMode, Wal};

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
        support::tamper::flip_bits_at(dir.path(), byte, 0x04);

        support::large::assert_damage_reported_alike(
            dir.path(),
            mode,
            &keys,
            &lsns,
            n,
            &mode.to_string(),
        );
    }
}

/// Only the checksum field altered: the payload and an authenticated record's tag still
/// match, so a read-ahead that trusted the tag alone would hand the record out.
#[test]
fn flipped_checksum_bit_at_three_quarters_of_a_three_mib_log() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable)).unwrap();
        let lsns = append_flushing(&wal, |_, written| written < 3 << 20);
        wal.close().unwrap();

        // The checksum of a record at about three quarters of the log whose header lies
        // inside one page.
        let at = REC_CRC_AT as u64;
        let n = (lsns.len() * 3 / 4..lsns.len())
            .find(|&i| (u64::from(lsns[i]) + 40) / PAGE == u64::from(lsns[i]) / PAGE)
            .unwrap();
        support::tamper::flip_bits_at(dir.path(), u64::from(lsns[n]) + at, 0x10);

        support::large::assert_damage_reported_alike(
            dir.path(),
            mode,
            &keys,
            &lsns,
            n,
            &format!("{mode}, checksum field"),
        );
    }
}
