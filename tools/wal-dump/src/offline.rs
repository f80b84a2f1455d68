//! `--truncate-to LSN` and `--purge-before LSN`: the two ways an operator shortens a log that no
//! process has open, each after copying what it removes into `--backup` (or, with `--dry-run`,
//! only reporting it).
//!
//! Truncation cuts at a record boundary on the files (`crate::cut`), as recovery cuts a torn
//! tail. Purging is the library's: the log is opened for writing and `Wal::purge_before`
//! removes the segment files wholly before the LSN, never the one holding the end of the log.

use std::io::Write;
use std::sync::Arc;

use serde::Serialize;
use walcrypt::inspect;
use walcrypt::{Config, Error, Lsn, Mode, Reader, Wal};

use crate::fail::{EXIT_DAMAGE, EXIT_OK, Fail, KeyContext};
use crate::lock::LogLock;
use crate::output::write_json;
use crate::repair::back_up;
use crate::source::{self, Disk, Target, fmt_lsn};
use crate::{Args, OutputFormat};

/// `--truncate-to` and `--purge-before` with `--format json`: one object; the field names are
/// stable (docs/WAL-DUMP.md).
#[derive(Serialize)]
struct Report {
    operation: &'static str,
    result: &'static str,
    exit_code: u8,
    dry_run: bool,
    lsn: u64,
    lsn_text: String,
    records_cut: u64,
    bytes_cut: u64,
    segments_removed: Vec<String>,
    backup: Option<String>,
    backup_files: usize,
}

impl Report {
    fn new(operation: &'static str, args: &Args, lsn: Lsn) -> Report {
        Report {
            operation,
            result: "",
            exit_code: EXIT_OK,
            dry_run: args.dry_run,
            lsn: u64::from(lsn),
            lsn_text: lsn.to_string(),
            records_cut: 0,
            bytes_cut: 0,
            segments_removed: Vec::new(),
            backup: None,
            backup_files: 0,
        }
    }

    fn print(
        &self,
        format: OutputFormat,
        out: &mut dyn Write,
        text: &[String],
    ) -> Result<u8, Fail> {
        match format {
            OutputFormat::Json => write_json(out, self)?,
            OutputFormat::Text => {
                for line in text {
                    writeln!(out, "{line}")?;
                }
            }
        }
        Ok(self.exit_code)
    }
}

/// The log directory PATH names, its lock, its keys and a reader; refuses a segment file, a log
/// open in another process (before the log is read for the operation or anything copied), a
/// pagelevel log without its key and, when `writer` (the operation opens the log for writing),
/// any encrypted log without its key.
fn open(args: &Args, what: &str, writer: bool) -> Result<(Target, Arc<LogLock>, Reader), Fail> {
    let key_file = args.key_file.as_deref();
    let (keys, target, _) =
        source::open_target(key_file, &args.kek, &args.path, args.require_mode)?;
    if target.segment.is_some() {
        return Err(Fail::trouble(format!(
            "{}: {what} works on a log directory, not on one segment file",
            args.path.display()
        )));
    }
    // Taken after the reader's first look at the directory (which tells a log from anything
    // else, and makes no file), before the reads the operation is planned on.
    let lock = LogLock::take(&target.dir)?;
    let reader = target.open(keys.as_ref(), key_file)?;
    let mode = reader.mode();
    let needs_key = mode == Mode::PageLevel || (writer && mode.is_encrypted());
    if needs_key && keys.is_none() {
        return Err(Fail::trouble(format!(
            "{}: {what} on a {mode} log needs --key-file",
            target.dir.display()
        )));
    }
    Ok((target, lock, reader))
}

fn backup_dir<'a>(args: &'a Args, what: &str) -> Result<Option<&'a std::path::Path>, Fail> {
    match (args.backup.as_deref(), args.dry_run) {
        (Some(dir), _) => Ok(Some(dir)),
        (None, true) => Ok(None),
        (None, false) => Err(Fail::trouble(format!(
            "{what} needs --backup DIR (the segment files it changes are copied there first), \
             or --dry-run"
        ))),
    }
}

pub fn truncate(args: &Args, lsn: Lsn, out: &mut dyn Write) -> Result<u8, Fail> {
    let backup = backup_dir(args, "--truncate-to")?;
    let (target, lock, reader) = open(args, "--truncate-to", false)?;
    let geo = reader.geometry();
    let log_id = reader.log_id();
    let cut = cut_after(&reader, lsn, args)?;
    drop(reader);
    let mut report = Report::new("truncate", args, lsn);
    report.records_cut = cut.records;
    report.bytes_cut = cut.end - lsn;
    let what = format!(
        "{} record{} ({} bytes of log, {lsn} .. {}){}",
        cut.records,
        if cut.records == 1 { "" } else { "s" },
        report.bytes_cut,
        fmt_lsn(cut.end),
        if cut.damaged {
            "; the log is damaged after the cut, so more may follow"
        } else {
            ""
        }
    );
    if cut.records == 0 {
        report.result = "nothing_to_cut";
        return report.print(
            args.format,
            out,
            &[format!("the log already ends at {lsn}: nothing cut")],
        );
    }
    let Some(backup) = backup else {
        report.result = "would_truncate";
        return report.print(
            args.format,
            out,
            &[
                "dry run: nothing changed".into(),
                format!("would cut: {what}"),
            ],
        );
    };
    // The segment the log ends in; a log that ends at a segment's end ends in that segment.
    let from = if lsn.0.is_multiple_of(geo.segment_size) {
        lsn - geo.segment_size
    } else {
        geo.segment_start(lsn)
    };
    let copied = back_up(&target.dir, backup, |start| start >= from)?;
    report.backup = Some(backup.display().to_string());
    report.backup_files = copied.len();
    report.segments_removed = segment_names(&target.dir, |start| start > from)?;
    crate::cut::cut_log(&target.dir, &lock, geo, log_id, lsn)?;
    report.result = "truncated";
    report.print(
        args.format,
        out,
        &[
            format!(
                "backup: {} segment file{} from {} on copied to {}",
                copied.len(),
                if copied.len() == 1 { "" } else { "s" },
                inspect::segment_file_name(from),
                backup.display()
            ),
            format!("truncated: the log now ends at {lsn}; cut: {what}"),
        ],
    )
}

/// What lies from `lsn` on: records, where the last one ends, and whether damage stopped the
/// count.
struct After {
    records: u64,
    end: Lsn,
    damaged: bool,
}

/// Checks that `lsn` is a record boundary of the valid log, and counts what follows it.
fn cut_after(reader: &Reader, lsn: Lsn, args: &Args) -> Result<After, Fail> {
    let key_file = args.key_file.as_deref();
    let mut disk = Disk::new(reader);
    let begin = disk.boundary_before(lsn)?;
    let mut after = After {
        records: 0,
        end: lsn,
        damaged: false,
    };
    let mut boundary = begin == lsn;
    let mut records = reader.raw_records_from(begin);
    for item in records.by_ref() {
        let rec = match item {
            Ok(rec) => rec,
            Err(Error::Corrupt { .. }) if boundary => {
                after.damaged = true;
                return Ok(after);
            }
            Err(e) => {
                let keys = KeyContext {
                    log: Some(&args.path),
                    key_file,
                    ring: None,
                };
                let mut fail = Fail::from_wal_with_keys(&e, &keys);
                if fail.code == EXIT_DAMAGE {
                    fail.message = format!(
                        "damage before {}: {} (--repair cuts there)",
                        fmt_lsn(lsn),
                        fail.message
                    );
                }
                return Err(fail);
            }
        };
        let start = rec.lsn;
        let end = rec.end_lsn;
        if start == lsn || end == lsn {
            boundary = true;
        }
        if start >= lsn {
            if !boundary {
                break;
            }
            after.records += 1;
            after.end = end;
        }
    }
    if boundary {
        return Ok(after);
    }
    let ends = records.end_lsn();
    Err(Fail::trouble(match ends {
        Some(end) if lsn > end => format!(
            "--truncate-to {}: the log ends at {} already",
            fmt_lsn(lsn),
            fmt_lsn(end)
        ),
        _ => format!(
            "--truncate-to {}: no record starts there (the log is cut only at a record \
             boundary; wal-dump --start LSN --limit 1 shows the next one)",
            fmt_lsn(lsn)
        ),
    }))
}

pub fn purge(args: &Args, lsn: Lsn, out: &mut dyn Write) -> Result<u8, Fail> {
    let backup = backup_dir(args, "--purge-before")?;
    let (target, lock, reader) = open(args, "--purge-before", true)?;
    let geo = reader.geometry();
    let mut disk = Disk::new(&reader);
    // The segment holding the end of the log is the newest with a written first page; the
    // library never purges it, nor what follows.
    let mut holding = Lsn(0);
    for s in reader.segments() {
        let start = s.header.start;
        if disk.page_header(start + geo.page_size)?.is_some() {
            holding = start;
        }
    }
    let doomed = |start: Lsn| start.saturating_add(geo.segment_size) <= lsn && start < holding;
    let names = segment_names(&target.dir, doomed)?;
    let mode = reader.mode();
    drop(reader);
    let mut report = Report::new("purge", args, lsn);
    report.segments_removed = names.clone();
    let list = names.join(", ");
    if names.is_empty() {
        report.result = "nothing_to_purge";
        return report.print(
            args.format,
            out,
            &[format!(
                "no segment file lies wholly before {lsn} and before the segment holding the \
                 end of the log: nothing purged"
            )],
        );
    }
    let Some(backup) = backup else {
        report.result = "would_purge";
        return report.print(
            args.format,
            out,
            &[
                "dry run: nothing changed".into(),
                format!("would remove {} segment file(s): {list}", names.len()),
            ],
        );
    };
    let copied = back_up(&target.dir, backup, doomed)?;
    report.backup = Some(backup.display().to_string());
    report.backup_files = copied.len();
    let keys = source::load_keys(args.key_file.as_deref(), &args.kek)?;
    // The writer takes the lock over from this process.
    let mut config = Config::new(mode)
        .recycle_segments(0)
        .prepare_segments(false)
        .storage(lock);
    if let Some(keys) = keys.clone() {
        config = config.keys(keys);
    }
    let key_file = args.key_file.as_deref();
    let wal = Wal::open(&target.dir, config).map_err(|e| {
        let context = target.key_context(key_file, keys.as_ref());
        let mut fail = Fail::from_wal_with_keys(&e, &context);
        fail.message = format!("cannot purge: {}", fail.message);
        fail
    })?;
    let removed = wal.purge_before(lsn).map_err(|e| Fail::from_wal(&e))?;
    wal.close().map_err(|e| Fail::from_wal(&e))?;
    let gone: Vec<String> = names
        .into_iter()
        .filter(|n| !target.dir.join(n).exists())
        .collect();
    report.segments_removed = gone.clone();
    report.result = "purged";
    report.print(
        args.format,
        out,
        &[
            format!(
                "backup: {} segment file{} copied to {}",
                copied.len(),
                if copied.len() == 1 { "" } else { "s" },
                backup.display()
            ),
            format!(
                "purged: {removed} segment file{} removed: {}",
                if removed == 1 { "" } else { "s" },
                gone.join(", ")
            ),
        ],
    )
}

/// Names of the segment files in `dir` whose start `pick` selects, in order.
fn segment_names(dir: &std::path::Path, pick: impl Fn(Lsn) -> bool) -> Result<Vec<String>, Fail> {
    let entries = std::fs::read_dir(dir).map_err(|e| Fail::io("read log directory", dir, &e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Fail::io("read log directory", dir, &e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if inspect::parse_segment_file_name(&name).is_some_and(&pick) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}
