//! A reader asked for a position far past the end of the log says the log ends at or before
//! the farthest position its files could hold (the end of the last segment file, one prepared
//! ahead included, plus a segment), not that this position is the log's end, which lies
//! well before it.

use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, Wal};

use crate::support::small_config;

#[test]
fn the_message_says_the_log_ends_at_or_before_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::Plaintext, &keys)).unwrap();
    let lsn = wal.append(1, &[7; 100]).unwrap();
    wal.flush(lsn).unwrap();
    let reader = Reader::open(dir.path(), None).unwrap();
    let far = Lsn(1 << 40);
    let err = reader.records_from(far).next().unwrap().unwrap_err();
    let Error::LsnNotAvailable { lsn, end } = &err else {
        panic!("expected LsnNotAvailable, got {err:?}");
    };
    assert_eq!(*lsn, far);
    assert!(*end > wal.end_lsn());
    let message = err.to_string();
    assert!(
        message.contains(&format!("the log ends at or before {end}")),
        "{message}"
    );
    wal.close().unwrap();
}
