//! Writes the golden logs of the current format version into `tests/golden/`.
//!
//! ```sh
//! cargo run --example write_golden_logs               # every golden of the current version
//! cargo run --example write_golden_logs -- perrecord  # only the ones named
//! ```
//!
//! Each golden is a directory `tests/golden/v<format version>-<name>/` holding `log/` (the
//! segment files), `keys` (its key file, a test key that protects nothing; absent in plaintext),
//! `records` (every record a reader must return, byte for byte) and `manifest` (what the golden
//! covers, its geometry, segment headers and the LSN where a reopened log continues).
//! tests/golden/README.md describes the two text files.
//!
//! Only the directories of the current `FORMAT_VERSION` are replaced; goldens of older
//! versions stay as they are, because every later build must keep reading them (docs/FORMAT.md,
//! "Version changes"). Rerun this while a format version is unreleased and its layout changes;
//! after a release, a layout change takes a new version and gets new goldens.
//!
//! Before writing, each log is read back with the current reader and compared with what was
//! appended, so a golden never records a reader's mistake as the expected answer.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use walcrypt::inspect::FORMAT_VERSION;
use walcrypt::{Compression, Config, KeyRing, Lsn, Mode, Reader, SyncMode, Wal};

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

/// How a golden's log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Written by one open of the log, every record flushed.
    Complete,
    /// Half the records under key 1; reopened with a rotated ring (key 2 active), which writes a
    /// segment switch record; the other half under key 2.
    RotatedKeys,
    /// Half the records flushed one by one, the rest in one last write, then the last page is
    /// cut inside the last record, as a crash during that write leaves it.
    TornTail,
}

struct Golden {
    name: &'static str,
    covers: &'static str,
    mode: Mode,
    page_size: u64,
    segment_size: u64,
    shape: Shape,
    /// Records compressed with LZ4 before sealing (`Config::compression`).
    compressed: bool,
}

const GOLDENS: &[Golden] = &[
    Golden {
        name: "plaintext",
        covers: "plaintext mode; several segments; records from empty to larger than a segment, spanning pages and segments; kinds 0 to 255",
        mode: Mode::Plaintext,
        page_size: 1024,
        segment_size: 4 * 1024,
        shape: Shape::Complete,
        compressed: false,
    },
    Golden {
        name: "perrecord",
        covers: "perrecord mode; several segments; records from empty to larger than a segment, spanning pages and segments; kinds 0 to 255",
        mode: Mode::PerRecord,
        page_size: 1024,
        segment_size: 4 * 1024,
        shape: Shape::Complete,
        compressed: false,
    },
    Golden {
        name: "pagelevel",
        covers: "pagelevel mode; several segments; records from empty to larger than a segment, spanning pages and segments; kinds 0 to 255",
        mode: Mode::PageLevel,
        page_size: 1024,
        segment_size: 4 * 1024,
        shape: Shape::Complete,
        compressed: false,
    },
    Golden {
        name: "pagelevel-8k-pages",
        covers: "pagelevel mode at the default 8 KiB page size (pages larger than a 4 KiB file-system block); two segments; a record spanning them",
        mode: Mode::PageLevel,
        page_size: 8 * 1024,
        segment_size: 16 * 1024,
        shape: Shape::Complete,
        compressed: false,
    },
    Golden {
        name: "plaintext-torn-tail",
        covers: "plaintext mode; the last page cut inside the last record (a crash during the last write); smallest pages",
        mode: Mode::Plaintext,
        page_size: 512,
        segment_size: 4 * 1024,
        shape: Shape::TornTail,
        compressed: false,
    },
    Golden {
        name: "perrecord-torn-tail",
        covers: "perrecord mode; the last page cut inside the last record (a crash during the last write); smallest pages",
        mode: Mode::PerRecord,
        page_size: 512,
        segment_size: 4 * 1024,
        shape: Shape::TornTail,
        compressed: false,
    },
    Golden {
        name: "pagelevel-torn-tail",
        covers: "pagelevel mode; the last page cut inside the last record (a crash during the last write); smallest pages",
        mode: Mode::PageLevel,
        page_size: 512,
        segment_size: 4 * 1024,
        shape: Shape::TornTail,
        compressed: false,
    },
    Golden {
        name: "perrecord-rotated-keys",
        covers: "perrecord mode; records under key 1, a key switch record at the reopen with key 2 active, records under key 2; each segment header listing the key its records use",
        mode: Mode::PerRecord,
        page_size: 512,
        segment_size: 4 * 1024,
        shape: Shape::RotatedKeys,
        compressed: false,
    },
    Golden {
        name: "pagelevel-rotated-keys",
        covers: "pagelevel mode; pages under key 1, a key switch record at the reopen with key 2 active, pages under key 2; each segment header listing the key its records use",
        mode: Mode::PageLevel,
        page_size: 512,
        segment_size: 4 * 1024,
        shape: Shape::RotatedKeys,
        compressed: false,
    },
    Golden {
        name: "perrecord-gcm",
        covers: "perrecord-gcm mode (authenticated); several segments; records from empty to larger than a segment, spanning pages and segments; kinds 0 to 255",
        mode: Mode::PerRecordGcm,
        page_size: 1024,
        segment_size: 4 * 1024,
        shape: Shape::Complete,
        compressed: false,
    },
    Golden {
        name: "perrecord-gcm-torn-tail",
        covers: "perrecord-gcm mode; the last page cut inside the last record (a crash during the last write); smallest pages",
        mode: Mode::PerRecordGcm,
        page_size: 512,
        segment_size: 4 * 1024,
        shape: Shape::TornTail,
        compressed: false,
    },
    Golden {
        name: "perrecord-gcm-rotated-keys",
        covers: "perrecord-gcm mode; records under key 1, a key switch record at the reopen with key 2 active, records under key 2; each segment header listing the key its records use",
        mode: Mode::PerRecordGcm,
        page_size: 512,
        segment_size: 4 * 1024,
        shape: Shape::RotatedKeys,
        compressed: false,
    },
    Golden {
        name: "perrecord-compressed",
        covers: "perrecord mode with LZ4 compression before sealing: compressed and uncompressed records side by side",
        mode: Mode::PerRecord,
        page_size: 1024,
        segment_size: 4 * 1024,
        shape: Shape::Complete,
        compressed: true,
    },
    Golden {
        name: "plaintext-compressed",
        covers: "plaintext mode with LZ4 compression: the compressed flag without encryption",
        mode: Mode::Plaintext,
        page_size: 1024,
        segment_size: 4 * 1024,
        shape: Shape::Complete,
        compressed: true,
    },
];

/// Payload sizes: empty, tiny, around a page body (464 B in 512 B pages), several pages; each
/// golden adds one record larger than a segment's share of the record stream.
const SIZES: &[usize] = &[
    0, 1, 13, 100, 250, 463, 464, 465, 700, 1000, 40, 7, 64, 300, 1500, 20, 600,
];

fn main() -> BoxResult<()> {
    let only: Vec<String> = std::env::args().skip(1).collect();
    if let Some(unknown) = only.iter().find(|n| !GOLDENS.iter().any(|g| g.name == *n)) {
        let names: Vec<&str> = GOLDENS.iter().map(|g| g.name).collect();
        return Err(format!(
            "no golden named {unknown}; the names are {}",
            names.join(", ")
        )
        .into());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden");
    fs::create_dir_all(&root)?;
    for golden in GOLDENS
        .iter()
        .filter(|g| only.is_empty() || only.iter().any(|n| n == g.name))
    {
        let dir = root.join(format!("v{FORMAT_VERSION}-{}", golden.name));
        write_golden(golden, &dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        println!("wrote {}", dir.display());
    }
    Ok(())
}

/// The records of a golden: `(kind, payload)`. Payloads are lines of text naming the golden,
/// the record and the line, so each is distinct, readable in a dump, and compresses well.
fn records(golden: &Golden) -> Vec<(u8, Vec<u8>)> {
    let spans_a_segment = (golden.segment_size - golden.page_size) as usize + 100;
    let sizes = SIZES[..11]
        .iter()
        .chain([&spans_a_segment])
        .chain(&SIZES[11..]);
    sizes
        .enumerate()
        .map(|(i, &len)| {
            let kind = match i {
                0 => 0,
                1 => 255,
                _ => (i * 37 % 256) as u8,
            };
            let mut payload = Vec::with_capacity(len + 64);
            let mut line = 0;
            while payload.len() < len {
                payload.extend_from_slice(
                    format!("{} record {i} line {line}\n", golden.name).as_bytes(),
                );
                line += 1;
            }
            payload.truncate(len);
            (kind, payload)
        })
        .collect()
}

fn write_golden(golden: &Golden, dir: &Path) -> BoxResult<()> {
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    let log = dir.join("log");
    fs::create_dir_all(&log)?;
    let mut keys = if golden.mode.is_encrypted() {
        KeyRing::generate()?
    } else {
        KeyRing::empty()
    };
    let config = |keys: &KeyRing| {
        Config::new(golden.mode)
            .keys(keys.clone())
            .page_size(golden.page_size)
            .segment_size(golden.segment_size)
            .buffer_size(4 * golden.page_size as usize)
            .sync(SyncMode::Durable)
            // No empty segment prepared after the end: the goldens hold what the log holds.
            .prepare_segments(false)
            .compression(if golden.compressed {
                Compression::Lz4 { min_len: 64 }
            } else {
                Compression::Off
            })
    };
    let records = records(golden);
    let half = records.len() / 2;
    let mut appended = Vec::new();
    // A torn tail is a crash during a write the log never acknowledged as durable: the last
    // records are written out but never synced, so no page's durable hint covers them (a
    // durable record cut short would be damage, not a torn tail).
    let wal = match golden.shape {
        Shape::TornTail => Wal::open(&log, config(&keys).sync(SyncMode::Buffered))?,
        _ => Wal::open(&log, config(&keys))?,
    };
    match golden.shape {
        Shape::Complete => {
            for (kind, payload) in &records {
                let lsn = wal.append(*kind, payload)?;
                wal.flush(lsn)?;
                appended.push(lsn);
            }
            wal.close()?;
        }
        Shape::RotatedKeys => {
            for (kind, payload) in &records[..half] {
                let lsn = wal.append(*kind, payload)?;
                wal.flush(lsn)?;
                appended.push(lsn);
            }
            wal.close()?;
            keys.rotate()?;
            let wal = Wal::open(&log, config(&keys))?;
            for (kind, payload) in &records[half..] {
                let lsn = wal.append(*kind, payload)?;
                wal.flush(lsn)?;
                appended.push(lsn);
            }
            wal.close()?;
        }
        Shape::TornTail => {
            let mut last = Lsn::default();
            for (i, (kind, payload)) in records.iter().enumerate() {
                last = wal.append(*kind, payload)?;
                if i < half {
                    wal.flush(last)?;
                }
                if i + 1 == half {
                    wal.sync()?;
                }
                appended.push(last);
            }
            wal.flush(last)?;
            // Dropped, not closed: a Buffered log's drop writes out what is left, unsynced.
            drop(wal);
        }
    }
    for entry in fs::read_dir(&log)? {
        let path = entry?.path();
        if path.extension().is_none_or(|x| x != "wal") {
            fs::remove_file(path)?;
        }
    }

    // What the reader must return: every record appended, or for a torn tail the ones that end
    // before the cut.
    let complete = read_back(&log, &keys)?;
    let lsns: Vec<Lsn> = complete.iter().map(|r| r.lsn).collect();
    if lsns != appended {
        return Err(format!("read back LSNs {lsns:?}, appended {appended:?}").into());
    }
    let mut expected = complete;
    if golden.shape == Shape::TornTail {
        let cut = tear_last_record(&log, golden, &expected)?;
        expected.retain(|r| u64::from(r.end_lsn) <= cut);
        if expected.len() + 1 != records.len() {
            return Err(format!("the cut at {cut} removed more than the last record").into());
        }
    }
    for (record, (kind, payload)) in expected.iter().zip(&records) {
        if record.kind != *kind || record.payload != *payload {
            return Err(format!("record at {} does not read back as written", record.lsn).into());
        }
    }
    let got = read_back(&log, &keys)?;
    if got != expected {
        return Err("the reader disagrees with the expected records".into());
    }
    if golden.shape == Shape::RotatedKeys {
        let reader = Reader::open(&log, Some(keys.clone()))?;
        let last = reader.segments().last().ok_or("no segments")?;
        if !last.header.key_checks.iter().any(|(id, _)| *id == 2) {
            return Err("the last segment does not list key 2".into());
        }
    }

    if golden.mode.is_encrypted() {
        keys.save(dir.join("keys"))?;
        let text = fs::read_to_string(dir.join("keys"))?;
        fs::write(
            dir.join("keys"),
            format!("# Test key of this golden log: it is public and protects nothing.\n{text}"),
        )?;
    }
    fs::write(dir.join("records"), records_text(&expected))?;
    fs::write(
        dir.join("manifest"),
        manifest_text(golden, &log, &keys, &expected)?,
    )?;
    Ok(())
}

fn read_back(log: &Path, keys: &KeyRing) -> BoxResult<Vec<walcrypt::Record>> {
    let reader = Reader::open(log, Some(keys.clone()))?;
    Ok(reader
        .records_from(Lsn::default())
        .collect::<walcrypt::Result<_>>()?)
}

/// Cuts the segment holding the end of the last record in the middle of the last record's
/// bytes on its last page (keeping that page's header). Returns the LSN of the cut.
fn tear_last_record(log: &Path, golden: &Golden, records: &[walcrypt::Record]) -> BoxResult<u64> {
    let last = records.last().ok_or("no records")?;
    let (start, end) = (u64::from(last.lsn), u64::from(last.end_lsn));
    let page = (end - 1) - (end - 1) % golden.page_size;
    let from = start.max(page + walcrypt::inspect::PAGE_HEADER_LEN as u64);
    let cut = from + (end - from) / 2;
    let segment = page - page % golden.segment_size;
    let path: PathBuf = log.join(walcrypt::inspect::segment_file_name(Lsn(segment)));
    let file = fs::OpenOptions::new().write(true).open(&path)?;
    file.set_len(cut - segment)?;
    file.sync_all()?;
    Ok(cut)
}

fn records_text(records: &[walcrypt::Record]) -> String {
    let mut text = String::from(
        "# Every record a reader returns, in order: <lsn, 16 hex digits> <kind> <payload hex, - if empty>\n",
    );
    for r in records {
        let hex: String = r.payload.iter().map(|b| format!("{b:02x}")).collect();
        let hex = if hex.is_empty() { "-".to_string() } else { hex };
        let _ = writeln!(text, "{:016x} {} {hex}", u64::from(r.lsn), r.kind);
    }
    text
}

fn manifest_text(
    golden: &Golden,
    log: &Path,
    keys: &KeyRing,
    records: &[walcrypt::Record],
) -> BoxResult<String> {
    let reader = Reader::open(log, Some(keys.clone()))?;
    let end = records.last().map_or(0, |r| u64::from(r.end_lsn));
    let mut text = String::from(
        "# Written by `cargo run --example write_golden_logs`; see tests/golden/README.md.\n",
    );
    let _ = writeln!(text, "covers = {}", golden.covers);
    let _ = writeln!(text, "format_version = {FORMAT_VERSION}");
    let _ = writeln!(text, "mode = {}", golden.mode);
    let _ = writeln!(text, "page_size = {}", golden.page_size);
    let _ = writeln!(text, "segment_size = {}", golden.segment_size);
    let _ = writeln!(text, "log_id = {:016x}", reader.log_id());
    let _ = writeln!(text, "records = {}", records.len());
    let _ = writeln!(text, "end_lsn = {end:016x}");
    for segment in reader.segments() {
        let ids: Vec<String> = segment
            .header
            .key_checks
            .iter()
            .map(|(id, _)| id.to_string())
            .collect();
        let ids = if ids.is_empty() {
            "-".to_string()
        } else {
            ids.join(",")
        };
        let name = walcrypt::inspect::segment_file_name(segment.header.start);
        let _ = writeln!(text, "segment = {name} keys {ids}");
    }
    Ok(text)
}
