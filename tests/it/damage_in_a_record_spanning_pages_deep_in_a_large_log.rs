//! Damage to a perrecord record that spans pages, deep in a log large enough for recovery to
//! read ahead on a second thread (which checks such records' CRCs and decrypts them ahead of
//! the replay): a flipped payload bit on the record's second page, or a flipped bit in its
//! IV, is reported by recovery exactly as the reader reports it (same LSN, segment and kind),
//! after the callback saw exactly the records before it.

use crate::support;

use support::large::{PAGE, append_flushing, config};
use walcrypt::inspect::REC_IV_AT;
use walcrypt::{KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

/// Flips one bit at `offset(record)` of the first record from three quarters of the log on
/// that spans two pages and has at least 200 bytes on its second page, then checks that the
/// reader and recovery report the same damage at that record.
fn damage_is_reported_at_its_record(what: &str, offset: impl Fn(u64, u64) -> u64) {
    let mode = Mode::PerRecord;
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), config(mode, &keys, SyncMode::Durable)).unwrap();
    let lsns = append_flushing(&wal, |_, written| written < 3 << 20);
    wal.close().unwrap();

    let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
    let ends: Vec<u64> = reader
        .records_from(Lsn::default())
        .map(|r| u64::from(r.unwrap().end_lsn))
        .collect();
    drop(reader);
    let n = (lsns.len() * 3 / 4..lsns.len() - 1)
        .find(|&i| {
            let start = u64::from(lsns[i]);
            let second = start / PAGE + 1;
            ends[i] / PAGE == second && ends[i] % PAGE >= 200 && start % PAGE < PAGE - 64
        })
        .unwrap();
    let byte = offset(u64::from(lsns[n]), ends[n]);
    support::tamper::flip_bits_at(dir.path(), byte, 0x10);

    support::large::assert_damage_reported_alike(dir.path(), mode, &keys, &lsns, n, what);
}

#[test]
fn flipped_payload_bit_on_the_second_page_of_a_record() {
    // 100 bytes before the record's end, on its second page.
    damage_is_reported_at_its_record("payload on the second page", |_, end| end - 100);
}

#[test]
fn flipped_bit_in_the_iv_of_a_record_spanning_pages() {
    damage_is_reported_at_its_record("IV", |start, _| start + REC_IV_AT as u64);
}
