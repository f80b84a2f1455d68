//! `--repair`: cut a damaged log at its first damage, after copying every segment file the cut
//! touches into a backup directory; `--repair --dry-run` reports the cut and changes nothing.
//!
//! The cut itself is the library's: the log is opened for writing with
//! `RecoveryMode::TruncateAtDamage`, which keeps every record before the first damaged one and
//! zeroes or removes the rest. A perrecord log without its key is cut by the tool in the same
//! way (`crate::cut`): its record headers and checksums are plaintext, so the damage is found
//! without decrypting. Nothing is changed before the copies are durable.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use walcrypt::inspect;
use walcrypt::{Config, Lsn, Mode, RecoveryMode, Wal};

use crate::fail::{EXIT_DAMAGE, EXIT_OK, Fail};
use crate::lock::LogLock;
use crate::output::write_json;
use crate::source::{self, fmt_lsn};
use crate::survey::{self, Survey};
use crate::{Args, OutputFormat};

pub fn run(args: &Args, out: &mut dyn Write) -> Result<u8, Fail> {
    let backup = args.backup.as_deref();
    if backup.is_none() && !args.dry_run {
        return Err(Fail::trouble(
            "--repair needs --backup DIR (the segment files it cuts are copied there first), \
             or --dry-run",
        ));
    }
    let key_file = args.key_file.as_deref();
    let (keys, target, reader) =
        source::open_target(key_file, &args.kek, &args.path, args.require_mode)?;
    if target.segment.is_some() {
        return Err(Fail::trouble(format!(
            "{}: --repair works on a log directory, not on one segment file",
            args.path.display()
        )));
    }
    let mode = reader.mode();
    if mode == Mode::PageLevel && keys.is_none() {
        return Err(Fail::trouble(format!(
            "{}: a pagelevel log needs --key-file to be repaired: its pages are encrypted \
             whole, so damage inside them is found only by decrypting",
            target.dir.display()
        )));
    }
    // Before the survey the cut is planned on, and so before any copy: a log open in another
    // process is refused with nothing copied.
    let lock = LogLock::take(&target.dir)?;
    let reader = target.open(keys.as_ref(), key_file)?;
    let found = survey::survey(&reader)
        .map_err(|e| survey::fail(&e, &target.key_context(key_file, keys.as_ref())))?;
    let geo = reader.geometry();
    let log_id = reader.log_id();
    drop(reader);
    let mut report = Report::new(args, &found);
    let Some((at, _)) = found.damage.as_ref() else {
        report.result = "no_damage";
        return report.print(args.format, out, |out| {
            writeln!(
                out,
                "no damage found in {}: nothing cut",
                target.dir.display()
            )?;
            if found.pages_after_end > 0 {
                writeln!(
                    out,
                    "note: the valid log ends at {}, but {} later page{} hold data: the next \
                     open takes {} for a torn tail and cuts {}; --verify reports it",
                    fmt_lsn(found.cut_at),
                    found.pages_after_end,
                    if found.pages_after_end == 1 { "" } else { "s" },
                    if found.pages_after_end == 1 {
                        "it"
                    } else {
                        "them"
                    },
                    if found.pages_after_end == 1 {
                        "it"
                    } else {
                        "them"
                    },
                )?;
            }
            Ok(())
        });
    };
    if args.dry_run {
        report.result = "would_cut";
        report.exit_code = EXIT_DAMAGE;
        return report.print(args.format, out, |out| {
            writeln!(out, "dry run: nothing changed")?;
            writeln!(out, "damage: {}", damage_text(&found))?;
            writeln!(out, "would cut: {}", cut_text(&found))
        });
    }
    let Some(backup) = backup else {
        return Err(Fail::trouble("--repair needs --backup DIR"));
    };
    let from = at.segment.min(geo.segment_start(found.cut_at));
    let copied = back_up(&target.dir, backup, |start| start >= from)?;
    report.backup = Some(backup.display().to_string());
    report.backup_files = copied.len();
    let backed_up = format!(
        "backup: {} segment file{} from {} on copied to {}",
        copied.len(),
        if copied.len() == 1 { "" } else { "s" },
        inspect::segment_file_name(from),
        backup.display()
    );

    let cut_at = match keys {
        None if mode != Mode::Plaintext => {
            crate::cut::cut_log(&target.dir, &lock, geo, log_id, found.cut_at)?;
            Some(found.cut_at)
        }
        keys => {
            // The writer takes the lock over from this process.
            let mut config = Config::new(mode)
                .recovery(RecoveryMode::TruncateAtDamage)
                .storage(lock);
            if let Some(keys) = keys.clone() {
                config = config.keys(keys);
            }
            let wal = Wal::open(&target.dir, config).map_err(|e| {
                let context = target.key_context(key_file, keys.as_ref());
                let mut fail = Fail::from_wal_with_keys(&e, &context);
                fail.message = format!("cannot repair: {}", fail.message);
                fail
            })?;
            let salvaged = wal.recovery_summary().and_then(|s| s.salvaged.clone());
            wal.close().map_err(|e| Fail::from_wal(&e))?;
            salvaged.map(|s| s.cut_at)
        }
    };
    match cut_at {
        Some(cut_at) => {
            report.result = "repaired";
            report.cut_at = u64::from(cut_at);
            report.cut_at_text = cut_at.to_string();
            report.print(args.format, out, |out| {
                writeln!(out, "{backed_up}")?;
                writeln!(out, "damage: {}", damage_text(&found))?;
                writeln!(
                    out,
                    "repaired: the log now ends at {cut_at}; cut: {}",
                    cut_text(&found)
                )
            })
        }
        None => {
            report.result = "not_repaired";
            report.exit_code = EXIT_DAMAGE;
            report.print(args.format, out, |out| {
                writeln!(out, "{backed_up}")?;
                writeln!(
                    out,
                    "not repaired: the reader found damage at {at}, the writer's recovery found \
                     nothing to cut; the copies in {} are kept",
                    backup.display()
                )
            })
        }
    }
}

fn damage_text(found: &Survey) -> String {
    match &found.damage {
        Some((at, kind)) => format!("{at}: {kind}"),
        None => "none".into(),
    }
}

/// What a cut removes, in records and bytes of written log.
fn cut_text(found: &Survey) -> String {
    let at_least = if found.cut_uncounted { "at least " } else { "" };
    let records = found.cut_records;
    format!(
        "{at_least}{records} record{} ({} bytes of log, {} .. {}); {} record{} before the \
         damage kept",
        if records == 1 { "" } else { "s" },
        found.cut_bytes(),
        fmt_lsn(found.cut_at),
        fmt_lsn(found.cut_end),
        found.kept,
        if found.kept == 1 { "" } else { "s" },
    )
}

/// `--repair --format json`: one object; the field names are stable (docs/WAL-DUMP.md).
#[derive(Serialize)]
struct Report {
    result: &'static str,
    exit_code: u8,
    dry_run: bool,
    damage: Option<JsonDamage>,
    cut_at: u64,
    cut_at_text: String,
    records_kept: u64,
    records_cut: u64,
    records_cut_is_lower_bound: bool,
    bytes_cut: u64,
    cut_end: u64,
    cut_end_text: String,
    backup: Option<String>,
    backup_files: usize,
    pages_after_end: u64,
}

#[derive(Serialize)]
struct JsonDamage {
    segment: String,
    offset: u64,
    lsn: u64,
    lsn_text: String,
    kind: String,
}

impl Report {
    fn new(args: &Args, found: &Survey) -> Report {
        let damaged = found.damage.is_some();
        Report {
            result: "",
            exit_code: EXIT_OK,
            dry_run: args.dry_run,
            damage: found.damage.as_ref().map(|(at, kind)| JsonDamage {
                segment: inspect::segment_file_name(at.segment),
                offset: at.offset,
                lsn: at.lsn.0,
                lsn_text: at.lsn.to_string(),
                kind: kind.clone(),
            }),
            cut_at: found.cut_at.0,
            cut_at_text: fmt_lsn(found.cut_at),
            records_kept: found.kept,
            records_cut: if damaged { found.cut_records } else { 0 },
            records_cut_is_lower_bound: found.cut_uncounted,
            bytes_cut: if damaged { found.cut_bytes() } else { 0 },
            cut_end: found.cut_end.0,
            cut_end_text: fmt_lsn(found.cut_end),
            backup: None,
            backup_files: 0,
            pages_after_end: found.pages_after_end,
        }
    }

    fn print(
        &self,
        format: OutputFormat,
        out: &mut dyn Write,
        text: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<u8, Fail> {
        match format {
            OutputFormat::Json => write_json(out, self)?,
            OutputFormat::Text => text(out)?,
        }
        Ok(self.exit_code)
    }
}

/// Copies every segment file of `dir` whose start `pick` selects into `backup` (created; it
/// must be empty), and makes the copies durable. Returns the copies.
pub fn back_up(
    dir: &Path,
    backup: &Path,
    pick: impl Fn(Lsn) -> bool,
) -> Result<Vec<PathBuf>, Fail> {
    std::fs::create_dir_all(backup).map_err(|e| Fail::io("create backup directory", backup, &e))?;
    let mut existing =
        std::fs::read_dir(backup).map_err(|e| Fail::io("read backup directory", backup, &e))?;
    if existing.next().is_some() {
        return Err(Fail::trouble(format!(
            "backup directory {} is not empty; name a new one",
            backup.display()
        )));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Fail::io("read log directory", dir, &e))?;
    let mut copied = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Fail::io("read log directory", dir, &e))?;
        let name = entry.file_name();
        let Some(start) = name.to_str().and_then(inspect::parse_segment_file_name) else {
            continue;
        };
        if !pick(start) {
            continue;
        }
        let to = backup.join(&name);
        std::fs::copy(entry.path(), &to)
            .map_err(|e| Fail::io("copy segment", &entry.path(), &e))?;
        std::fs::File::open(&to)
            .and_then(|f| f.sync_all())
            .map_err(|e| Fail::io("fsync backup copy", &to, &e))?;
        copied.push(to);
    }
    std::fs::File::open(backup)
        .and_then(|d| d.sync_all())
        .map_err(|e| Fail::io("fsync backup directory", backup, &e))?;
    copied.sort();
    Ok(copied)
}
