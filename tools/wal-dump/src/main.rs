//! `wal-dump`: list, decrypt, summarize and verify a walcrypt log.
//!
//! The log's mode comes from its segment headers. Output formats are described in
//! docs/WAL-DUMP.md; exit codes are 0 (fine), 1 (damage found), 2 (usage, key or I/O problem).

#![forbid(unsafe_code)]

mod dump;
mod fail;
mod kek;
mod repair;
mod source;
mod stats;
mod verify;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use walcrypt::Lsn;

use crate::fail::{EXIT_OK, EXIT_TROUBLE, Fail};

/// Inspect, decrypt and verify a walcrypt log.
#[derive(Debug, Parser)]
#[command(name = "wal-dump", version)]
pub struct Args {
    /// Log directory, or one segment file of a log (then only its records are shown).
    pub path: PathBuf,

    /// Key ring file, or key store file (then with --kek-file or --kek-command): decrypt
    /// payloads (perrecord) or pages (pagelevel).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    #[command(flatten)]
    pub kek: kek::KekArgs,

    /// How to show payloads.
    #[arg(long, value_enum, default_value_t = PayloadFormat::None)]
    pub payload: PayloadFormat,

    /// Show payload bytes as stored on disk (ciphertext in encrypted modes), not decrypted.
    #[arg(long)]
    pub raw: bool,

    /// First LSN to show (HI/LO hex, 0x hex or decimal); records starting before it are skipped.
    #[arg(long, value_name = "LSN")]
    pub start: Option<Lsn>,

    /// Stop before this LSN: only records starting before it are shown.
    #[arg(long, value_name = "LSN")]
    pub end: Option<Lsn>,

    /// Show at most N records (or pages).
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,

    /// Only records of this kind (repeatable).
    #[arg(long = "kind", value_name = "K")]
    pub kinds: Vec<u8>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,

    /// List page headers instead of records (no key needed).
    #[arg(long, conflicts_with_all = ["stats", "verify", "follow"])]
    pub pages: bool,

    /// Summarize the log: records per kind, bytes, key ids, header overhead of encryption.
    #[arg(long, conflicts_with_all = ["verify", "follow"])]
    pub stats: bool,

    /// Check the whole log: page headers, checksums, LSN continuity, key check values and
    /// IV uniqueness. Exit 0 when clean, 1 when anything is wrong.
    #[arg(long, conflicts_with = "follow")]
    pub verify: bool,

    /// After the end, keep showing new records as the writer adds them, until interrupted
    /// (or until --end or --limit is reached). Shows what the writer has written.
    #[arg(long)]
    pub follow: bool,

    /// Cut the log at its first damage so it opens again: every record before the damaged one
    /// is kept. Copies the segment files from the damaged one on into --backup first. Needs
    /// --key-file for an encrypted log. Exit 0 when repaired or nothing was damaged.
    #[arg(long, requires = "backup", conflicts_with_all = ["pages", "stats", "verify", "follow"])]
    pub repair: bool,

    /// With --repair: a new (or empty) directory for copies of the files the cut touches.
    #[arg(long, value_name = "DIR", requires = "repair")]
    pub backup: Option<PathBuf>,
    /// Refuse the log unless its segment headers name this mode (plaintext, perrecord,
    /// pagelevel, perrecord-gcm): a log relabelled with a weaker mode is then an error, not a
    /// clean read. For perrecord-gcm every segment must also be of format version 4 or later.
    #[arg(long, value_name = "MODE")]
    pub require_mode: Option<walcrypt::Mode>,

    /// With --follow: show only records the writer has made durable (fdatasync'ed), as the
    /// page headers' durable hints vouch for them; these trail the writer by one flush.
    #[arg(long, requires = "follow")]
    pub durable: bool,
}

/// `--payload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PayloadFormat {
    /// Do not show payloads.
    None,
    /// Lower-case hex.
    Hex,
    /// Text, with non-printable bytes escaped.
    Text,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// One line per record.
    Text,
    /// JSON Lines: one object per record.
    Json,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let text = e.to_string();
            let head = text.split("Usage:").next().unwrap_or("invalid arguments");
            let head = fail::one_line(head.trim_start_matches("error: "));
            eprintln!("wal-dump: {head} (see wal-dump --help)");
            return ExitCode::from(EXIT_TROUBLE);
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = run(&args, &mut out).and_then(|code| {
        out.flush()?;
        Ok(code)
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(fail) => {
            let _ = out.flush();
            if fail.code != EXIT_OK {
                eprintln!("wal-dump: {}", fail.message);
            }
            ExitCode::from(fail.code)
        }
    }
}

fn run(args: &Args, out: &mut dyn Write) -> Result<u8, Fail> {
    if args.repair {
        return repair::run(args, out);
    }
    if args.raw && args.payload == PayloadFormat::None && !args.stats && !args.verify {
        return Err(Fail::trouble(
            "--raw shows payload bytes: add --payload hex or --payload text",
        ));
    }
    if let (Some(s), Some(e)) = (args.start, args.end)
        && e < s
    {
        return Err(Fail::trouble(format!(
            "--end {e} lies before --start {s}; nothing to show"
        )));
    }
    if args.verify {
        return verify::run(args, out);
    }
    if args.stats {
        return stats::run(args, out);
    }
    dump::run(args, out)
}
