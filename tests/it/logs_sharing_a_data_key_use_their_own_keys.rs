//! Two logs under one data key encrypt with different working keys (HKDF of the data key and
//! the log id): their segment headers show different check values for the same key id, so
//! nobody can tell from the files that they share a key, and the stored bytes are plain
//! AES-256-CTR under `Key::for_log(log id, key id)` with the IV in the header, not under the
//! data key itself.

use walcrypt::inspect::ctr_apply_keystream;
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn logs_sharing_a_data_key_use_their_own_keys() {
    let ring = KeyRing::generate().unwrap();
    let data_key = ring.get(1).unwrap().clone();
    let mut checks = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(dir.path(), Config::new(Mode::PerRecord).keys(ring.clone())).unwrap();
        let lsn = wal.append(1, b"the same secret in both logs").unwrap();
        wal.close().unwrap();

        let reader = Reader::open(dir.path(), Some(ring.clone())).unwrap();
        let log_id = reader.log_id();
        let header = &reader.segments()[0].header;
        assert_eq!(header.key_checks.len(), 1);
        let (id, kcv) = header.key_checks[0];
        assert_eq!(kcv, data_key.log_check_value(log_id, id));
        assert_ne!(
            kcv,
            data_key.check_value(),
            "the raw key's check value is on disk"
        );
        checks.push(kcv);
        ids.push(log_id);

        let raw = reader.raw_records_from(lsn).next().unwrap().unwrap();
        let (key_id, iv) = raw.header.encryption.unwrap();
        let mut plain = raw.stored.clone();
        ctr_apply_keystream(&data_key.for_log(log_id, key_id), &iv, &mut plain);
        assert_eq!(plain, b"the same secret in both logs");
        let mut under_data_key = raw.stored.clone();
        ctr_apply_keystream(&data_key, &iv, &mut under_data_key);
        assert_ne!(under_data_key, b"the same secret in both logs");
        assert_eq!(
            reader
                .records_from(Lsn::default())
                .next()
                .unwrap()
                .unwrap()
                .payload,
            b"the same secret in both logs"
        );
    }
    assert_ne!(ids[0], ids[1]);
    assert_ne!(checks[0], checks[1], "two logs show they share a key");
}
