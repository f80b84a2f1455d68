//! A segment written by a newer format version (made here by patching a golden's version field
//! and resealing its header checksum) is refused by the reader and by `Wal::open` with
//! `UnsupportedVersion`, naming the file, the version found and the versions this build reads.
//! So is a segment patched to a version older than any this build reads.

use crate::golden_files;

use std::path::Path;

use walcrypt::inspect::{FORMAT_VERSION, KCV_ENTRY, OLDEST_READ_VERSION, SEGMENT_HEADER_FIXED};
use walcrypt::{Config, Error, Lsn, Reader, Wal};

/// Offsets in the segment header (docs/FORMAT.md): format version (u32), key count (u16).
const VERSION_OFFSET: usize = 8;
const NKEYS_OFFSET: usize = 14;

/// Rewrites the version field of the segment at `path` and its header checksum, so only the
/// version is wrong.
fn patch_version(path: &Path, version: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&version.to_le_bytes());
    let nkeys = u16::from_le_bytes([bytes[NKEYS_OFFSET], bytes[NKEYS_OFFSET + 1]]) as usize;
    let end = SEGMENT_HEADER_FIXED + nkeys * KCV_ENTRY;
    let crc = crc32c::crc32c(&bytes[..end]);
    bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

/// Checks that `result` is the refusal of `file`, patched to version `found`, naming it and
/// the versions this build reads, in the variant and in the message.
fn assert_refused<T: std::fmt::Debug>(
    result: walcrypt::Result<T>,
    (file, found_version): (&str, u32),
    what: &str,
) {
    match result {
        Err(
            ref e @ Error::UnsupportedVersion {
                ref path,
                found,
                supported,
            },
        ) => {
            assert!(path.ends_with(file), "{what}: {path:?} is not {file}");
            assert_eq!(
                (found, supported),
                (found_version, FORMAT_VERSION),
                "{what}"
            );
            let message = e.to_string();
            assert!(
                message.contains(&format!("version {found_version} is not supported"))
                    && message.contains(&format!(
                        "reads versions {OLDEST_READ_VERSION} to {FORMAT_VERSION}"
                    ))
                    && message.contains(file),
                "{what}: message names the file and the versions: {message}"
            );
        }
        other => panic!("{what}: expected UnsupportedVersion, got {other:?}"),
    }
}

#[test]
fn a_segment_from_a_newer_format_version_is_refused_naming_both_versions() {
    refused_when_patched_to(FORMAT_VERSION + 1);
}

#[test]
fn a_segment_from_a_format_version_older_than_any_read_is_refused() {
    refused_when_patched_to(OLDEST_READ_VERSION - 1);
}

/// Patches each segment of the current version's largest encrypted golden in turn to
/// `version` and checks that the reader and the writer refuse it.
fn refused_when_patched_to(version: u32) {
    let goldens = golden_files::all();
    let golden = goldens
        .iter()
        .filter(|g| g.format_version == FORMAT_VERSION && g.mode.is_encrypted())
        .max_by_key(|g| g.segments.len())
        .expect("a golden log of the current version");
    assert!(golden.segments.len() >= 3, "{}", golden.name);

    for (file, _) in &golden.segments {
        let dir = tempfile::tempdir().unwrap();
        golden_files::copy_log(golden, dir.path());
        patch_version(&dir.path().join(file), version);
        let what = format!("{} with {file} patched to version {version}", golden.name);
        let refused = (file.as_str(), version);

        // The reader refuses when it opens the log or at the latest when it reaches the
        // segment; it never returns records from it or treats it as the end of the log.
        let read = Reader::open(dir.path(), Some(golden.keys.clone())).and_then(|reader| {
            reader
                .records_from(Lsn::default())
                .collect::<walcrypt::Result<Vec<_>>>()
        });
        assert_refused(read, refused, &format!("reader, {what}"));

        // The writer refuses too, whichever segment it is, and leaves the file alone.
        let config = Config::new(golden.mode).keys(golden.keys.clone());
        assert_refused(
            Wal::open(dir.path(), config),
            refused,
            &format!("Wal::open, {what}"),
        );
        let after = std::fs::read(dir.path().join(file)).unwrap();
        let found = u32::from_le_bytes(
            after[VERSION_OFFSET..VERSION_OFFSET + 4]
                .try_into()
                .unwrap(),
        );
        assert_eq!(found, version, "{what}: the refused segment is left alone");
    }
}
