//! `--repair`: cut a damaged log at its first damage, after copying every segment file the cut
//! touches into a backup directory.
//!
//! The cut itself is the library's: the log is opened for writing with
//! `RecoveryMode::TruncateAtDamage`, which keeps every record before the first damaged one and
//! zeroes or removes the rest. Nothing is changed before the copies are durable.

use std::io::Write;
use std::path::{Path, PathBuf};

use walcrypt::inspect;
use walcrypt::{Config, Error, Lsn, RecoveryMode, Wal};

use crate::Args;
use crate::fail::{EXIT_DAMAGE, EXIT_OK, Fail};
use crate::source;

pub fn run(args: &Args, out: &mut dyn Write) -> Result<u8, Fail> {
    let Some(backup) = args.backup.as_deref() else {
        return Err(Fail::trouble(
            "--repair needs --backup DIR: the segment files it cuts are copied there first",
        ));
    };
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
    if mode.is_encrypted() && keys.is_none() {
        return Err(Fail::trouble(format!(
            "{}: a {mode} log needs --key-file to be repaired",
            target.dir.display()
        )));
    }
    let damage = reader.records_from(Lsn::default()).find_map(|r| r.err());
    drop(reader);
    let at = match damage {
        None => {
            writeln!(
                out,
                "no damage found in {}: nothing cut",
                target.dir.display()
            )?;
            return Ok(EXIT_OK);
        }
        Some(Error::Corrupt { at, .. }) => at,
        Some(e) => return Err(Fail::from_wal_with_keys(&e, key_file)),
    };

    let copied = back_up(&target.dir, backup, u64::from(at.segment))?;
    writeln!(
        out,
        "backup: {} segment file(s) from {} on copied to {}",
        copied.len(),
        inspect::segment_file_name(at.segment),
        backup.display()
    )?;

    let mut config = Config::new(mode).recovery(RecoveryMode::TruncateAtDamage);
    if let Some(keys) = keys {
        config = config.keys(keys);
    }
    let wal = Wal::open(&target.dir, config).map_err(|e| {
        let mut fail = Fail::from_wal_with_keys(&e, key_file);
        fail.message = format!("cannot repair: {}", fail.message);
        fail
    })?;
    let salvaged = wal.recovery_summary().and_then(|s| s.salvaged.clone());
    wal.close().map_err(|e| Fail::from_wal(&e))?;
    match salvaged {
        Some(cut) => {
            writeln!(
                out,
                "repaired: the log now ends at {} (damage at {}: {}); {} bytes of log from there to {} cut away",
                cut.cut_at,
                cut.at,
                cut.kind,
                u64::from(cut.files_ended_at).saturating_sub(u64::from(cut.cut_at)),
                cut.files_ended_at,
            )?;
            Ok(EXIT_OK)
        }
        None => {
            writeln!(
                out,
                "not repaired: the reader found damage at {at}, the writer's recovery found \
                 nothing to cut; the copies in {} are kept",
                backup.display()
            )?;
            Ok(EXIT_DAMAGE)
        }
    }
}

/// Copies every segment file of `dir` starting at or after `from` into `backup` (created; it
/// must be empty), and makes the copies durable. Returns the copies.
fn back_up(dir: &Path, backup: &Path, from: u64) -> Result<Vec<PathBuf>, Fail> {
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
        if u64::from(start) < from {
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
