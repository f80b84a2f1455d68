//! A WAL buffer size above `MAX_BUFFER_SIZE` is refused by `Config::validate` and by
//! `Wal::open` with `Error::Config` naming the setting, before anything is allocated or
//! created; a buffer of 0 or 1 byte is rounded up to 4 pages and the log works through it.

use walcrypt::{Config, Error, MAX_BUFFER_SIZE, Mode, SyncMode, Wal};

use crate::support::{payload, read_all};

fn config(buffer: usize) -> Config {
    Config::new(Mode::Plaintext)
        .sync(SyncMode::Buffered)
        .page_size(512)
        .segment_size(16 * 512)
        .buffer_size(buffer)
}

#[test]
fn a_buffer_above_the_maximum_is_a_config_error_before_anything_is_created() {
    config(MAX_BUFFER_SIZE).validate().unwrap();
    for buffer in [MAX_BUFFER_SIZE + 1, 1 << 40, usize::MAX] {
        let err = config(buffer).validate().unwrap_err();
        assert!(
            matches!(&err, Error::Config(why) if why.contains("buffer_size")),
            "buffer {buffer}: {err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("log");
        let err = Wal::open(&missing, config(buffer)).unwrap_err();
        assert!(
            matches!(&err, Error::Config(why) if why.contains("buffer_size")),
            "buffer {buffer}: {err}"
        );
        assert!(
            !missing.exists(),
            "buffer {buffer}: the open created the log"
        );
    }
}

#[test]
fn a_zero_or_one_byte_buffer_holds_four_pages_and_keeps_every_record() {
    for buffer in [0, 1] {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(dir.path(), config(buffer)).unwrap();
        // Records over many pages and segments: the 4-page ring is reused again and again.
        let written: Vec<_> = (0..200u64)
            .map(|i| {
                let p = payload(i, 1 + (i as usize * 37) % 700);
                (wal.append(1, &p).unwrap(), p)
            })
            .collect();
        wal.close().unwrap();
        let read = read_all(dir.path(), None);
        assert_eq!(read.len(), written.len(), "buffer {buffer}");
        for ((lsn, _, got), (at, want)) in read.iter().zip(&written) {
            assert_eq!((lsn, got), (at, want), "buffer {buffer}");
        }
    }
}
