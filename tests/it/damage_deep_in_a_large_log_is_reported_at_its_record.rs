//! A flipped bit deep in a log large enough for recovery to read ahead on a second thread is
//! reported by recovery exactly as the reader reports it (same LSN, segment and kind), in
//! every mode, after the callback saw exactly the records before it.

use crate::support;

use support::large::{PAGE, append_flushing, config};
use walcrypt::inspect::REC_CRC_AT;
use walcrypt::{KeyRing, Mode, SyncMode, Wal};

/// In a 3 MiB log of every mode, flips `bits` of the byte `offset` bytes into a record at about
/// three quarters of the log whose first 40 bytes lie in one page, and checks that recovery
/// reports it as the reader does.
fn flip_at_three_quarters(offset: u64, bits: u8, what: &str) {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable)).unwrap();
        let lsns = append_flushing(&wal, |_, written| written < 3 << 20);
        wal.close().unwrap();

        let n = (lsns.len() * 3 / 4..lsns.len())
            .find(|&i| (u64::from(lsns[i]) + 40) / PAGE == u64::from(lsns[i]) / PAGE)
            .unwrap();
        support::tamper::flip_bits_at(dir.path(), u64::from(lsns[n]) + offset, bits);

        support::large::assert_damage_reported_alike(
            dir.path(),
            mode,
            &keys,
            &lsns,
            n,
            &format!("{mode}, {what}"),
        );
    }
}

/// A payload byte (past the longest record header) on the header's page.
#[test]
fn flipped_bit_at_three_quarters_of_a_three_mib_log() {
    flip_at_three_quarters(40, 0x04, "payload byte");
}

/// Only the checksum field altered: the payload and an authenticated record's tag still
/// match, so a read-ahead that trusted the tag alone would hand the record out.
#[test]
fn flipped_checksum_bit_at_three_quarters_of_a_three_mib_log() {
    flip_at_three_quarters(REC_CRC_AT as u64, 0x10, "checksum field");
}
