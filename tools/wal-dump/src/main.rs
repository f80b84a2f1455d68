//! `wal-dump`: list, decrypt, summarize and verify a walcrypt log.
//!
//! The log's mode comes from its segment headers. Output formats are described in
//! docs/WAL-DUMP.md; exit codes are 0 (fine), 1 (damage found), 2 (usage, key or I/O problem),
//! 3 (`--verify`: nothing but page headers could be checked).

#![forbid(unsafe_code)]

mod cli;
mod cut;
mod dump;
mod fail;
mod kek;
mod kinds;
mod lock;
mod offline;
mod output;
mod progress;
#[cfg(test)]
mod purged_while_read;
mod repair;
mod source;
mod stats;
mod survey;
mod verify;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use walcrypt::Lsn;

use crate::fail::{EXIT_OK, EXIT_TROUBLE, Fail};

/// Inspect, decrypt and verify a walcrypt log.
#[derive(Debug, Parser)]
#[command(
    name = "wal-dump",
    version,
    after_help = "Exit codes: 0 done (--verify: clean as far as checked); 1 damage found \
                  (--repair --dry-run: damage a cut would remove); 2 usage, key or I/O \
                  problem (--verify: wrong key or missing key id); 3 --verify could check no \
                  record although the log has pages (pagelevel without its key). On a \
                  terminal, --verify, --stats and --repair show a progress line on stderr \
                  once a pass has run for a second. Records are selected by LSN (--start, \
                  --end), kind (--kind) and key id (--key-id); a log carries no time, so \
                  there is no time filter."
)]
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

    /// Only records of this kind: a number (0 to 255, decimal or 0x hex) or a name from
    /// --kinds (repeatable).
    #[arg(long = "kind", value_name = "K")]
    pub kinds: Vec<String>,

    /// Names for record kinds, and how to describe their payloads: a file with lines
    /// `<kind> <name> [utf8|hex|u64le]` (`#` starts a comment). Listings show the name beside
    /// the kind and, for kinds with a payload format, a `desc:` line when the payload is
    /// readable; --stats names the kinds in its table.
    #[arg(long = "kinds", value_name = "FILE")]
    pub kinds_file: Option<PathBuf>,

    /// Only records encrypted under this key id: the record's own key (perrecord) or that of
    /// the page where it starts (pagelevel); plaintext records have none (repeatable).
    #[arg(long = "key-id", value_name = "N")]
    pub key_ids: Vec<u32>,

    /// Output format: text, or json (JSON Lines, one object per record or page, for listings;
    /// one object for --stats, --verify, --repair, --truncate-to and --purge-before).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,

    /// List page headers instead of records (no key needed).
    #[arg(long, conflicts_with_all = ["stats", "verify", "follow"])]
    pub pages: bool,

    /// Summarize the log: records per kind, bytes, key ids, header overhead of encryption. On a
    /// damaged log, what lies before the damage, and where the damage is (exit 1).
    #[arg(long, conflicts_with_all = ["verify", "follow"])]
    pub stats: bool,

    /// Check the whole log: page headers, checksums, LSN continuity, key check values and
    /// IV uniqueness, and say what could not be checked. Exit 0 when clean, 1 when damage is
    /// found, 2 on a key problem (wrong key, missing key id), 3 when the log has pages but no
    /// record could be checked (a pagelevel log without its key).
    #[arg(long, conflicts_with = "follow")]
    pub verify: bool,

    /// After the end, keep showing new records as the writer adds them, until interrupted
    /// (or until --end or --limit is reached). Shows what the writer has written.
    #[arg(long)]
    pub follow: bool,

    /// Cut the log at its first damage so it opens again: every record before the damaged one
    /// is kept. Copies the segment files from the damaged one on into --backup first (or, with
    /// --dry-run, only reports the cut). Reports the records and bytes of log cut. A pagelevel
    /// log needs --key-file; perrecord logs are checked and cut by their plaintext record
    /// checksums without it. Exit 0 when repaired or nothing was damaged, 1 when --dry-run
    /// found damage or the cut could not be made.
    #[arg(long, conflicts_with_all = ["pages", "stats", "verify", "follow"])]
    pub repair: bool,

    /// Cut the log so that it ends at LSN, a record boundary: every record from LSN on is
    /// removed. Copies the segment files from the one holding LSN on into --backup first.
    /// Needs --key-file for a pagelevel log. The log must not be open.
    #[arg(long, value_name = "LSN", conflicts_with_all = ["pages", "stats", "verify", "follow", "repair"])]
    pub truncate_to: Option<Lsn>,

    /// Remove the segment files that lie wholly before LSN, as Wal::purge_before does (the
    /// segment holding the end of the log is always kept). Copies them into --backup first.
    /// Needs --key-file for an encrypted log. The log must not be open.
    #[arg(long, value_name = "LSN", conflicts_with_all = ["pages", "stats", "verify", "follow", "repair", "truncate_to"])]
    pub purge_before: Option<Lsn>,

    /// With --repair, --truncate-to or --purge-before: a new (or empty) directory for copies
    /// of the segment files the operation changes or removes.
    #[arg(long, value_name = "DIR")]
    pub backup: Option<PathBuf>,

    /// With --repair, --truncate-to or --purge-before: report what would be cut or removed;
    /// change nothing.
    #[arg(long, conflicts_with = "backup")]
    pub dry_run: bool,

    /// Refuse the log unless its segment headers name this mode (plaintext, perrecord,
    /// pagelevel, perrecord-gcm): a log relabelled with a weaker mode is then an error, not a
    /// clean read. For perrecord-gcm every segment must also be of format version 5 or later.
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
    /// JSON: one object per record or page, or one object for the other commands.
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
            eprintln!("wal-dump: {}", cli::usage_error("wal-dump", &e));
            return ExitCode::from(EXIT_TROUBLE);
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = run(&args, &mut out).and_then(|code| match out.flush() {
        // The reader of the output went away: the code (a verdict, for --verify) stands.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(code),
        other => other.map(|()| code).map_err(Fail::from),
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
    let changes = args.repair || args.truncate_to.is_some() || args.purge_before.is_some();
    if !changes && (args.backup.is_some() || args.dry_run) {
        let flag = if args.dry_run {
            "--dry-run"
        } else {
            "--backup"
        };
        return Err(Fail::trouble(format!(
            "{flag} goes with --repair, --truncate-to or --purge-before"
        )));
    }
    if args.repair {
        return repair::run(args, &mut output::Verdict::new(out));
    }
    if let Some(lsn) = args.truncate_to {
        return offline::truncate(args, lsn, &mut output::Verdict::new(out));
    }
    if let Some(lsn) = args.purge_before {
        return offline::purge(args, lsn, &mut output::Verdict::new(out));
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
        return verify::run(args, &mut output::Verdict::new(out));
    }
    if args.stats {
        return stats::run(args, out);
    }
    dump::run(args, out)
}
