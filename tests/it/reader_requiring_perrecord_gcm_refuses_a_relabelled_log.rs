//! Downgrade: the mode byte of every segment header of a perrecord-gcm log rewritten to
//! perrecord (header checksums recomputed, as anyone can) makes the files read as a CTR log,
//! whose records nothing authenticates. A reader or follower that requires perrecord-gcm
//! refuses such a log with `Error::Mismatch` naming both modes, as it refuses a plaintext log
//! relabelled with the id of the authenticated one, and a perrecord-gcm log of a format
//! version whose segment switches (before 4) or geometry (before 5) are not authenticated.

use crate::support;

use support::tamper::rewrite_segment_headers;
use support::{append_all, copy_dir, payload, small_config};
use walcrypt::{Error, Follower, KeyRing, Lsn, Mode, Reader, Wal};

fn gcm_log(keys: &KeyRing) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::PerRecordGcm, keys)).unwrap();
    let records: Vec<_> = (0..40).map(|i| (1u8, payload(i, 64))).collect();
    append_all(&wal, &records);
    wal.close().unwrap();
    dir
}

fn assert_mismatch(result: walcrypt::Result<impl std::fmt::Debug>, on_disk: &str, who: &str) {
    match result {
        Err(Error::Mismatch {
            what,
            on_disk: found,
            configured,
        }) => {
            assert_eq!(what, "mode", "{who}");
            assert!(found.starts_with(on_disk), "{who}: {found}");
            assert!(found.contains(".wal"), "{who}: names the segment: {found}");
            assert!(
                configured.starts_with("perrecord-gcm"),
                "{who}: {configured}"
            );
        }
        other => panic!("{who}: expected a mode mismatch, got {other:?}"),
    }
}

#[test]
fn a_gcm_log_relabelled_as_perrecord_is_refused_by_a_reader_requiring_gcm() {
    let keys = KeyRing::generate().unwrap();
    let dir = gcm_log(&keys);
    rewrite_segment_headers(dir.path(), |h| h.mode = Mode::PerRecord);
    // Unasked, the files say perrecord, and that is what a reader takes them for.
    let reader = Reader::open(dir.path(), Some(keys.clone())).unwrap();
    assert_eq!(reader.mode(), Mode::PerRecord);
    assert_mismatch(
        reader.require_mode(Mode::PerRecordGcm),
        "perrecord",
        "reader",
    );
    let follower = Follower::open(dir.path(), Some(keys.clone()), Lsn::default()).unwrap();
    assert_mismatch(
        follower.require_mode(Mode::PerRecordGcm),
        "perrecord",
        "follower",
    );
    // A follower told before the log exists checks when it finds it.
    let later = tempfile::tempdir().unwrap();
    let follower = Follower::open(later.path(), Some(keys.clone()), Lsn::default())
        .unwrap()
        .require_mode(Mode::PerRecordGcm)
        .unwrap();
    let mut follower = follower;
    copy_dir(dir.path(), later.path());
    assert_mismatch(follower.poll(), "perrecord", "follower told early");
}

#[test]
fn a_plaintext_log_relabelled_with_the_gcm_log_id_is_refused() {
    let keys = KeyRing::generate().unwrap();
    let gcm = gcm_log(&keys);
    let log_id = Reader::open(gcm.path(), None).unwrap().log_id();
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(dir.path(), small_config(Mode::Plaintext, &keys)).unwrap();
    append_all(&wal, &[(1, b"forged".to_vec())]);
    wal.close().unwrap();
    rewrite_segment_headers(dir.path(), |h| h.log_id = log_id);
    let reader = Reader::open(dir.path(), None).unwrap();
    assert_mismatch(
        reader.require_mode(Mode::PerRecordGcm),
        "plaintext",
        "reader",
    );
}

#[test]
fn the_untampered_gcm_log_passes_the_requirement() {
    let keys = KeyRing::generate().unwrap();
    let dir = gcm_log(&keys);
    let reader = Reader::open(dir.path(), Some(keys.clone()))
        .unwrap()
        .require_mode(Mode::PerRecordGcm)
        .unwrap();
    assert_eq!(reader.records_from(Lsn::default()).count(), 40);
}

#[test]
fn a_gcm_log_of_format_version_3_does_not_meet_the_requirement() {
    let keys = KeyRing::generate().unwrap();
    let dir = gcm_log(&keys);
    // Relabelled as version 3, whose segment switches carry no tag.
    rewrite_segment_headers(dir.path(), |h| h.version = 3);
    let reader = Reader::open(dir.path(), Some(keys)).unwrap();
    assert_mismatch(
        reader.require_mode(Mode::PerRecordGcm),
        "perrecord-gcm of format version 3",
        "reader",
    );
}

/// A log of format version 4 (the golden one, written by the builds that wrote version 4):
/// its tags do not bind the geometry, which can then be rewritten in its headers. Read without
/// the requirement, it reads.
#[test]
fn a_gcm_log_of_format_version_4_does_not_meet_the_requirement() {
    let golden = crate::golden_files::all()
        .into_iter()
        .find(|g| g.name == "v4-perrecord-gcm")
        .expect("the golden v4-perrecord-gcm log");
    let reader = Reader::open(&golden.log, Some(golden.keys.clone())).unwrap();
    assert_eq!(
        reader.records_from(Lsn::default()).count(),
        golden.records.len()
    );
    let reader = Reader::open(&golden.log, Some(golden.keys.clone())).unwrap();
    assert_mismatch(
        reader.require_mode(Mode::PerRecordGcm),
        "perrecord-gcm of format version 4",
        "reader",
    );
}
