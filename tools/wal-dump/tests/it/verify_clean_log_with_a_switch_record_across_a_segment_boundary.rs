//! --verify passes a clean log whose key rotation came with fewer bytes left in the segment
//! than a switch record's 12: the record's tail opens the next segment, and the log goes on
//! in the segment after that one. Verify used to expect the next record in the segment
//! holding the tail and reported every such log as damaged.

use crate::support;

use support::*;
use walcrypt::{Key, Mode};

/// A switch record: the plain record header, no payload.
const SWITCH_LEN: u64 = 12;

#[test]
fn verify_clean_log_with_a_switch_record_across_a_segment_boundary() {
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        for left in [1, 4, SWITCH_LEN - 1] {
            let what = format!("{mode}, {left} bytes left for the switch record");
            let tmp = tempfile::tempdir().unwrap();
            let (log, key_file, mut keys, _) = make_log(tmp.path(), mode, 20);
            let wal = open_when_unlocked(&log, config(mode, &keys));
            let header = if mode == Mode::PerRecord { 32 } else { 12 };
            // Append until the log ends `left` bytes before a segment's end; in the segment's
            // last page one record of the right length gets there.
            let mut n = 0;
            loop {
                let end = u64::from(wal.end_lsn());
                let room = SEGMENT - end % SEGMENT;
                if room == left && end % SEGMENT != 0 {
                    break;
                }
                let len = if room < PAGE && room >= left + header {
                    room - left - header
                } else {
                    150
                };
                wal.append(1, &vec![n as u8; len as usize]).unwrap();
                n += 1;
            }
            let key = Key::generate().unwrap();
            keys.add(2, key.clone()).unwrap();
            wal.activate_key(2, key).unwrap();
            keys.save(&key_file).unwrap();
            for i in 0..5u8 {
                wal.append(2, &[i; 100]).unwrap();
            }
            wal.close().unwrap();

            let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
            let text = stdout(&o);
            assert_eq!(o.status.code(), Some(0), "{what}: {text}{}", stderr(&o));
            assert!(
                text.contains(&format!("{} records checked: clean", 20 + n + 5)),
                "{what}: {text}"
            );
        }
    }
}
