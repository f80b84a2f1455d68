//! A new log's segments are at most `MAX_SEGMENT_SIZE` (1 GiB): every open reads the rest of
//! the segment the log ends in, so a larger one would make each restart slow. (That a log made
//! with larger segments by an earlier version still passes the open's checks is a unit test in
//! src/writer/open.rs: opening one for real reads a GiB.)

use walcrypt::{Config, Error, MAX_SEGMENT_SIZE, Mode, Wal};

#[test]
fn a_new_log_with_segments_above_the_maximum_is_refused_before_anything_is_created() {
    let config = |segment| Config::new(Mode::Plaintext).segment_size(segment);
    config(MAX_SEGMENT_SIZE).validate().unwrap();
    for segment in [MAX_SEGMENT_SIZE + 8192, 4 << 30, 1 << 40] {
        let err = config(segment).validate().unwrap_err();
        assert!(
            matches!(&err, Error::Config(why) if why.contains("segment_size")),
            "segment {segment}: {err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("log");
        let err = Wal::open(&missing, config(segment)).unwrap_err();
        assert!(
            matches!(&err, Error::Config(why) if why.contains("segment_size")),
            "segment {segment}: {err}"
        );
        assert!(
            !missing.exists(),
            "segment {segment}: the open created the log"
        );
    }
}
