//! A writer purging old segments while `--verify` or `--stats` reads the log: segment files the
//! tool listed when it started are gone when it reaches them, or (with the purged files reused,
//! `Config::recycle_segments`) a file the tool is reading becomes a later segment under it.
//! Tested inside the crate, with the listing taken before the purge, because a purge cannot be
//! placed between the listing and the reads of a running binary.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Parser;
use walcrypt::{Config, KeyRing, Lsn, Mode, Reader, Wal};

use crate::Args;
use crate::kinds::Selection;
use crate::source::Target;
use crate::verify::Seams;

const PAGE: u64 = 512;
const SEGMENT: u64 = 8 * PAGE;

fn config(mode: Mode, keys: Option<&KeyRing>) -> Config {
    // Segments made when the writer reaches them, none ahead: which one a purged file becomes
    // is then known.
    let config = Config::new(mode)
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .buffer_size(8 * PAGE as usize)
        .prepare_segments(false);
    match keys {
        Some(keys) => config.keys(keys.clone()),
        None => config,
    }
}

/// A log of `mode` in `dir/log` over a dozen segments, where its records start, and its
/// writer, left open with every record on file.
fn make_log(dir: &Path, mode: Mode, keys: Option<&KeyRing>) -> (PathBuf, Vec<Lsn>, Wal) {
    let log = dir.join("log");
    let wal = Wal::open(&log, config(mode, keys)).unwrap();
    let lsns: Vec<Lsn> = (0..300u32)
        .map(|i| wal.append(1, &[i as u8; 100]).unwrap())
        .collect();
    wal.flush(lsns[lsns.len() - 1]).unwrap();
    (log, lsns, wal)
}

/// The log listed as the tool lists it when it starts.
fn listed(log: &Path) -> (Target, Reader) {
    let target = Target::resolve(log).unwrap();
    let reader = target.open(None, None).unwrap();
    (target, reader)
}

fn args(options: &[&str], log: &Path) -> Args {
    let mut argv: Vec<OsString> = vec!["wal-dump".into()];
    argv.extend(options.iter().map(OsString::from));
    argv.push(log.into());
    Args::try_parse_from(argv).unwrap()
}

/// `--verify` whose page checks find segments purged since it listed the files notes the purge
/// and finds the log clean: no I/O error, and the records of the segments left checked.
#[test]
fn verify_notes_segments_purged_before_its_page_checks_and_finds_the_log_clean() {
    verify_beside_a_purge(false);
}

/// `--verify` whose records pass meets segments purged after it listed the files for its
/// reader (`Error::Purged` from the reader) notes the purge, reads on from the oldest segment
/// left and finds the log clean: a purge is no key problem.
#[test]
fn verify_notes_segments_purged_under_its_records_pass_and_finds_the_log_clean() {
    verify_beside_a_purge(true);
}

/// `--verify` of a log listed before a writer's purge: the purge made right after the listing,
/// or (`under_records`) once the records pass has listed the files for its reader.
fn verify_beside_a_purge(under_records: bool) {
    for mode in [Mode::Plaintext, Mode::PerRecord, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let keys = mode.is_encrypted().then(|| KeyRing::generate().unwrap());
        let (log, lsns, wal) = make_log(tmp.path(), mode, keys.as_ref());
        let (target, reader) = listed(&log);
        let listed_segments = reader.segments().len();
        let purge = || assert!(wal.purge_before(lsns[150]).unwrap() >= 2, "{mode}");
        if !under_records {
            purge();
        }

        let args = args(&["--verify", "--format", "json"], &log);
        let mut out = Vec::new();
        let seams = Seams {
            before_records: Box::new(|| {
                if under_records {
                    purge();
                }
            }),
            ..Seams::none()
        };
        let code =
            crate::verify::verify_listed(&args, target, reader, keys.as_ref(), &mut out, seams)
                .unwrap_or_else(|fail| panic!("{mode}: {}", fail.message));
        assert_clean_with_a_purge_note(mode, code, &out, listed_segments);
        wal.close().unwrap();
    }
}

/// `--verify` whose page checks read a segment's pages through its file while a writer purges
/// the segment and makes the file the segment after its last one (a purged file kept for
/// reuse, as by default): by the second read of its page headers the file holds the new
/// segment's pages, at other addresses. That is a purge, noted as one, not damage: the log is
/// found clean. Reported page-address damage (or a page never written before written ones, in
/// plaintext, whose reused files are wiped) without the fix.
#[test]
fn verify_takes_a_segment_whose_file_was_reused_under_its_page_checks_for_purged() {
    for mode in [
        Mode::Plaintext,
        Mode::PerRecord,
        Mode::PageLevel,
        Mode::PerRecordGcm,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let keys = mode.is_encrypted().then(|| KeyRing::generate().unwrap());
        let (log, lsns, wal) = make_log(tmp.path(), mode, keys.as_ref());
        let (target, reader) = listed(&log);
        let listed_segments = reader.segments().len();
        let oldest = reader.segments()[0].header.start;
        let after_last = reader.geometry().segment_start(wal.end_lsn()) + SEGMENT;
        let reused = std::cell::Cell::new(false);
        let seams = Seams {
            between_page_passes: Box::new(|start| {
                if start == oldest && !reused.replace(true) {
                    reuse_oldest(&wal, &log, &lsns, oldest, after_last);
                }
            }),
            ..Seams::none()
        };

        let args = args(&["--verify", "--format", "json"], &log);
        let mut out = Vec::new();
        let code =
            crate::verify::verify_listed(&args, target, reader, keys.as_ref(), &mut out, seams)
                .unwrap_or_else(|fail| panic!("{mode}: {}", fail.message));
        assert!(
            reused.get(),
            "{mode}: the oldest segment's pages were never read"
        );
        assert_clean_with_a_purge_note(mode, code, &out, listed_segments);
        wal.close().unwrap();
    }
}

/// Purges the segment at `oldest` (its file kept for reuse) and appends until the writer has
/// made the segment at `next` from that file and written pages into it.
fn reuse_oldest(wal: &Wal, log: &Path, lsns: &[Lsn], oldest: Lsn, next: Lsn) {
    let second = lsns
        .iter()
        .copied()
        .find(|&l| l >= oldest + SEGMENT)
        .unwrap();
    assert_eq!(wal.purge_before(second).unwrap(), 1);
    let free = log.join(format!(
        "{}.free",
        walcrypt::inspect::segment_file_name(oldest)
    ));
    assert!(free.exists(), "the purged file is kept for reuse");
    while wal.end_lsn() < next + 4 * PAGE {
        let lsn = wal.append(2, &[0xa5; 100]).unwrap();
        wal.flush(lsn).unwrap();
    }
    assert!(
        !free.exists(),
        "the purged file became the segment at {next}"
    );
}

/// The JSON report `out` of `--verify` (exit `code`) says clean, with the purge in a note and
/// the records of the segments left checked.
fn assert_clean_with_a_purge_note(mode: Mode, code: u8, out: &[u8], listed_segments: usize) {
    let report: serde_json::Value = serde_json::from_slice(out).unwrap();
    assert_eq!(code, 0, "{mode}: {report}");
    assert_eq!(report["result"], "clean", "{mode}: {report}");
    assert_eq!(report["segments"], listed_segments, "{mode}: {report}");
    assert!(
        report["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("were purged while the log was verified")),
        "{mode}: {report}"
    );
    assert!(
        report["records"].as_u64().unwrap() >= 150,
        "{mode}: {report}"
    );
}

/// `--stats` that reaches a segment purged since it listed the files says it was purged, as the
/// library's readers do, instead of failing on the missing file.
#[test]
fn stats_says_a_segment_purged_while_it_reads_was_purged() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, lsns, wal) = make_log(tmp.path(), Mode::Plaintext, None);
    let (target, reader) = listed(&log);
    assert!(wal.purge_before(lsns[150]).unwrap() >= 2);

    // From a record in a purged segment: the tool reads that segment's first page itself.
    let start = lsns[60].to_string();
    let args = args(&["--stats", "--start", &start], &log);
    let selection = Selection::from_args(&args).unwrap();
    let mut out = Vec::new();
    let Err(fail) = crate::stats::stats_listed(&args, selection, None, target, reader, &mut out)
    else {
        panic!("stats of a purged segment succeeded");
    };
    assert_eq!(fail.code, 2, "{}", fail.message);
    assert!(fail.message.contains("was purged"), "{}", fail.message);
    assert!(!fail.message.contains("No such file"), "{}", fail.message);
    wal.close().unwrap();
}

/// A segment file gone from between others is no purge: still an I/O error.
#[test]
fn a_segment_missing_from_the_middle_is_not_taken_for_a_purge() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, _, _wal) = make_log(tmp.path(), Mode::Plaintext, None);
    let (_, reader) = listed(&log);
    let middle = &reader.segments()[reader.segments().len() / 2];
    std::fs::remove_file(&middle.path).unwrap();
    let mut disk = crate::source::Disk::new(&reader);
    let Err(fail) = disk.page_header_bytes(middle.header.start + PAGE) else {
        panic!("a missing segment read");
    };
    assert_eq!(fail.purged, None, "{}", fail.message);
    assert!(fail.message.contains("No such file"), "{}", fail.message);
}
