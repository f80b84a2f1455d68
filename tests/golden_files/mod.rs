//! Loads the golden logs in tests/golden/: their manifest, key file and expected records
//! (formats in tests/golden/README.md; `cargo run --example write_golden_logs` writes them).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use walcrypt::{KeyRing, Lsn, Mode};

/// One golden log and what a reader must find in it.
#[derive(Debug)]
pub struct Golden {
    /// The golden's directory name, `v<format version>-<name>`.
    pub name: String,
    /// The log directory (segment files only).
    pub log: PathBuf,
    /// The key ring, empty for a plaintext log.
    pub keys: KeyRing,
    /// What the golden covers, in words.
    pub covers: String,
    /// Format version the golden was written with.
    pub format_version: u32,
    pub mode: Mode,
    pub page_size: u64,
    pub segment_size: u64,
    pub log_id: u64,
    /// Where a reopened log continues writing: the end of the last complete record.
    pub end_lsn: Lsn,
    /// Segment file names with the key ids their headers list, oldest first.
    pub segments: Vec<(String, Vec<u32>)>,
    /// Every record a reader returns, in order: (lsn, kind, payload).
    pub records: Vec<(Lsn, u8, Vec<u8>)>,
}

/// The directory holding every golden.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The goldens of format `version`, sorted by name; panics when there are none, so a test over
/// them never passes by having nothing to read.
pub fn of_version(version: u32) -> Vec<Golden> {
    let goldens: Vec<Golden> = all()
        .into_iter()
        .filter(|g| g.format_version == version)
        .collect();
    assert!(!goldens.is_empty(), "no version-{version} goldens");
    goldens
}

/// Every golden in tests/golden/, sorted by name.
pub fn all() -> Vec<Golden> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root())
        .expect("tests/golden exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| load(d)).collect()
}

fn load(dir: &Path) -> Golden {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let manifest = fs::read_to_string(dir.join("manifest"))
        .unwrap_or_else(|e| panic!("{name}: manifest: {e}"));
    let field = |key: &str| -> String {
        manifest
            .lines()
            .filter_map(|l| l.split_once(" = "))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
            .unwrap_or_else(|| panic!("{name}: manifest has no `{key}`"))
    };
    let hex = |key: &str| u64::from_str_radix(&field(key), 16).unwrap();
    let segments = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("segment = "))
        .map(|v| {
            let (file, ids) = v.split_once(" keys ").expect("segment line");
            let ids = match ids {
                "-" => Vec::new(),
                ids => ids.split(',').map(|i| i.parse().unwrap()).collect(),
            };
            (file.to_string(), ids)
        })
        .collect();
    let keys_file = dir.join("keys");
    let keys = if keys_file.exists() {
        KeyRing::load(&keys_file).unwrap_or_else(|e| panic!("{name}: {e}"))
    } else {
        KeyRing::empty()
    };
    let records = fs::read_to_string(dir.join("records"))
        .unwrap_or_else(|e| panic!("{name}: records: {e}"))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let mut f = l.split(' ');
            let lsn = Lsn(u64::from_str_radix(f.next().unwrap(), 16).unwrap());
            let kind: u8 = f.next().unwrap().parse().unwrap();
            let payload = match f.next().unwrap() {
                "-" => Vec::new(),
                h => hex::decode(h).unwrap(),
            };
            (lsn, kind, payload)
        })
        .collect();
    Golden {
        log: dir.join("log"),
        keys,
        covers: field("covers"),
        format_version: field("format_version").parse().unwrap(),
        mode: field("mode").parse().unwrap(),
        page_size: field("page_size").parse().unwrap(),
        segment_size: field("segment_size").parse().unwrap(),
        log_id: hex("log_id"),
        end_lsn: Lsn(hex("end_lsn")),
        segments,
        records,
        name,
    }
}

/// Copies the golden's log into `to` (which exists), so a test may write to it.
pub fn copy_log(golden: &Golden, to: &Path) {
    for entry in fs::read_dir(&golden.log).expect("read golden log") {
        let entry = entry.expect("dir entry");
        fs::copy(entry.path(), to.join(entry.file_name())).expect("copy segment");
    }
}

/// [`copy_log`], then puts a segment prepared ahead after the one the log ends in, as a writer
/// of the golden's format version leaves it: that version's header (a copy of the tail
/// segment's, for the next start) over zeros. A segment file already there (the cut-short
/// remnant of a torn-tail golden) is replaced. Returns the prepared segment's start.
pub fn copy_log_with_prepared_segment(golden: &Golden, to: &Path) -> Lsn {
    copy_log(golden, to);
    let end = u64::from(golden.end_lsn);
    let tail = end - end % golden.segment_size;
    let next = Lsn(tail + golden.segment_size);
    let tail_file = fs::read(to.join(walcrypt::inspect::segment_file_name(Lsn(tail))))
        .expect("read the tail segment");
    let mut header =
        walcrypt::inspect::SegmentHeader::decode(&tail_file).expect("the tail segment's header");
    header.start = next;
    let mut bytes = vec![0u8; golden.segment_size as usize];
    header.encode(&mut bytes[..golden.page_size as usize]);
    fs::write(to.join(walcrypt::inspect::segment_file_name(next)), bytes)
        .expect("write the prepared segment");
    next
}
