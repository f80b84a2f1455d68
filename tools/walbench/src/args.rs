//! Command-line options (clap). Every bad value is clap's one error line and exit code 2.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use clap::builder::{PossibleValuesParser, RangedU64ValueParser, TypedValueParser};
use walcrypt::{Mode, SyncMode};

use crate::peers::Shape;
use crate::workload::Workload;

/// walbench: per-record vs page-level WAL encryption, measured side by side.
///
/// Lists are comma-separated (`--threads 1,2,4,8`); repeated items count once, and a later
/// occurrence of an option replaces an earlier one.
#[derive(Parser, Debug, Clone)]
#[command(name = "walbench")]
pub struct Args {
    /// Workloads: oltp, bulk, fpw
    #[arg(
        long = "workload",
        visible_alias = "workloads",
        value_name = "LIST",
        default_value = "oltp,bulk,fpw",
        value_parser = workload_list
    )]
    pub workloads: ::std::vec::Vec<Workload>,

    /// Modes: plaintext, perrecord, pagelevel, perrecord-gcm
    #[arg(
        long = "mode",
        visible_alias = "modes",
        value_name = "LIST",
        default_value = "plaintext,perrecord,pagelevel,perrecord-gcm",
        value_parser = mode_list
    )]
    pub modes: ::std::vec::Vec<Mode>,

    /// Appending threads per cell, each from 1 to 1024 (run in ascending order)
    #[arg(
        long,
        value_name = "LIST",
        default_value = "1,2,4,8",
        value_parser = thread_list
    )]
    pub threads: ::std::vec::Vec<usize>,

    /// none: flush hands pages to the OS; data: flush fdatasyncs
    #[arg(
        long,
        value_name = "none|data",
        default_value = "none",
        value_parser = PossibleValuesParser::new(["none", "data"]).map(|s| sync_mode(&s))
    )]
    pub sync: SyncMode,

    /// Measured time of one cell in one round, in seconds (more than 0, at most 3600)
    #[arg(
        long,
        value_name = "SECS",
        allow_negative_numbers = true,
        default_value = "0.3",
        value_parser = seconds
    )]
    pub duration: Duration,

    /// Rounds: every cell runs once per round, modes interleaved, and the report quotes
    /// medians over rounds
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        default_value_t = 3,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=1000)
    )]
    pub rounds: usize,

    /// Simulated engine CPU work per transaction, outside any WAL lock, in microseconds
    #[arg(long, value_name = "US", default_value_t = 5.0, value_parser = micros, allow_negative_numbers = true)]
    pub work_us: f64,

    /// Simulated redo work per replayed record in the recovery measurement, in microseconds:
    /// the payload is copied into an 8 KiB page image, then this much calibrated CPU work.
    /// Recovery is timed both without it (decode only) and with it; 0 times decode only
    #[arg(long, value_name = "US", default_value_t = 1.0, value_parser = micros, allow_negative_numbers = true)]
    pub apply_us: f64,

    /// Payload MiB of each log written for the recovery measurement (the same records in
    /// every mode); 0 skips recovery
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        default_value_t = 32,
        value_parser = RangedU64ValueParser::<u64>::new().range(0..=1 << 20)
    )]
    pub recovery_mib: u64,

    /// Each timed recovery measurement replays its log again and again until this much wall
    /// time has passed and reports the mean per replay (a 32 MiB log replays in tens of ms)
    #[arg(
        long,
        value_name = "SECS",
        allow_negative_numbers = true,
        default_value = "1",
        value_parser = seconds
    )]
    pub recovery_secs: Duration,

    /// Where the CSV files and SVG charts go
    #[arg(long, value_name = "DIR", default_value = "walbench-results")]
    pub out: PathBuf,

    /// Keep the logs (under OUT/logs) for wal-dump; default: a temporary directory, removed
    /// at exit
    #[arg(long)]
    pub keep: bool,

    /// The scaling model predicts up to N cores
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        default_value_t = 32,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096)
    )]
    pub model_cores: usize,

    /// The projection's assumed cost of one cache-line transfer between cores, in
    /// nanoseconds, added to the serial time per transaction for every line transfer the
    /// ledger counted (feature `line-ledger`)
    #[arg(long, value_name = "NS", default_value_t = 100.0, value_parser = nanos, allow_negative_numbers = true)]
    pub line_ns: f64,

    /// Each transaction appends its records with one `append_batch` call (one reservation
    /// for all of them) instead of one `append` per record
    #[arg(long)]
    pub append_batch: bool,

    /// No progress bar
    #[arg(long)]
    pub no_progress: bool,

    /// Instead of the study: walcrypt's modes beside okaywal and raft-engine (built with
    /// `--features peers`) on one commit workload, durable and not (docs/BENCHMARKS.md, "Peers")
    #[arg(long)]
    pub peers: bool,

    /// Transaction shapes of the peer run: SIZExCOUNT, COUNT records of SIZE bytes per commit
    #[arg(
        long,
        value_name = "LIST",
        default_value = "100x5,8192x1,32768x1",
        value_parser = shape_list
    )]
    pub shapes: ::std::vec::Vec<Shape>,

    /// Commit durability of the peer run: `data` (fdatasync before the commit returns) and/or
    /// `none` (handed to the OS)
    #[arg(
        long,
        value_name = "LIST",
        default_value = "data,none",
        value_parser = durability_list
    )]
    pub peer_sync: ::std::vec::Vec<bool>,

    /// walcrypt's segment size in MiB in every log walbench writes (default: the library's,
    /// 16); in a peer run, 1 compares with okaywal's 1 MiB files
    #[arg(
        long,
        value_name = "MIB",
        value_parser = RangedU64ValueParser::<u64>::new().range(1..=1024)
    )]
    pub segment_mib: Option<u64>,

    /// Compress payloads of at least BYTES with LZ4 before sealing (off by default)
    #[arg(long, value_name = "BYTES")]
    pub compress: Option<usize>,
}

impl Args {
    /// walcrypt's segment size in bytes, when `--segment-mib` set one.
    pub fn segment_bytes(&self) -> Option<u64> {
        self.segment_mib.map(|mib| mib << 20)
    }

    /// The compression setting every log of the run uses.
    pub fn compression(&self) -> walcrypt::Compression {
        match self.compress {
            Some(min_len) => walcrypt::Compression::Lz4 { min_len },
            None => walcrypt::Compression::Off,
        }
    }
}

/// Comma-separated items, blanks skipped, each kept once in first-seen order.
fn list<T: PartialEq>(
    v: &str,
    what: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let x = parse(item)?;
        if !out.contains(&x) {
            out.push(x);
        }
    }
    if out.is_empty() {
        return Err(format!("an empty {what} list"));
    }
    Ok(out)
}

fn workload_list(v: &str) -> Result<Vec<Workload>, String> {
    list(v, "workload", str::parse)
}

fn shape_list(v: &str) -> Result<Vec<Shape>, String> {
    list(v, "shape", str::parse)
}

fn durability_list(v: &str) -> Result<Vec<bool>, String> {
    list(v, "sync", |s| match s {
        "data" => Ok(true),
        "none" => Ok(false),
        _ => Err(format!("`{s}` is not `data` or `none`")),
    })
}

fn mode_list(v: &str) -> Result<Vec<Mode>, String> {
    list(v, "mode", str::parse)
}

fn thread_list(v: &str) -> Result<Vec<usize>, String> {
    let mut threads = list(v, "thread count", |s| match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a thread count from 1 to 1024")),
    })?;
    threads.sort_unstable();
    Ok(threads)
}

fn sync_mode(v: &str) -> SyncMode {
    if v == "data" {
        SyncMode::Durable
    } else {
        SyncMode::Buffered
    }
}

fn seconds(v: &str) -> Result<Duration, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 3600.0 => Ok(Duration::from_secs_f64(x)),
        _ => Err("expected seconds, more than 0 and at most 3600".into()),
    }
}

fn nanos(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=1e6).contains(&x) => Ok(x),
        _ => Err("expected nanoseconds from 0 to 1000000".into()),
    }
}

fn micros(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=1e6).contains(&x) => Ok(x),
        _ => Err("expected microseconds from 0 to 1000000".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    fn parse_str(s: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("walbench").chain(s.split_whitespace()))
    }

    #[test]
    fn command_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let a = parse_str("").expect("no options should parse");
        assert_eq!(a.workloads, Workload::ALL.to_vec());
        assert_eq!(a.modes, Mode::ALL.to_vec());
        assert_eq!(a.threads, vec![1, 2, 4, 8]);
        assert_eq!(a.sync, SyncMode::Buffered);
        assert_eq!(a.duration, Duration::from_millis(300));
        assert_eq!(a.rounds, 3);
        assert_eq!(a.work_us, 5.0);
        assert_eq!(a.apply_us, 1.0);
        assert_eq!(a.recovery_mib, 32);
        assert_eq!(a.recovery_secs, Duration::from_secs(1));
        assert_eq!(a.out, PathBuf::from("walbench-results"));
        assert!(!a.keep && !a.no_progress);
        assert_eq!(a.model_cores, 32);
        assert_eq!(a.line_ns, 100.0);
    }

    #[test]
    fn parses_lists_and_rejects_garbage() {
        let a = parse_str(
            "--threads 8,1,2,1 --mode pagelevel --sync=data --workload fpw,oltp,fpw --apply-us 0 \
             --duration 0.1 --rounds 1 --recovery-mib 0 --keep --no-progress --out x",
        )
        .expect("should parse");
        assert_eq!(a.threads, vec![1, 2, 8]);
        assert_eq!(a.modes, vec![Mode::PageLevel]);
        assert_eq!(a.workloads, vec![Workload::Fpw, Workload::Oltp]);
        assert_eq!(a.sync, SyncMode::Durable);
        assert_eq!(a.apply_us, 0.0);
        assert_eq!(a.duration, Duration::from_millis(100));
        assert_eq!((a.rounds, a.recovery_mib), (1, 0));
        assert!(a.keep && a.no_progress);
        assert_eq!(a.out, PathBuf::from("x"));
        // The old spellings still work.
        let a = parse_str("--workloads bulk --modes plaintext,perrecord").expect("aliases");
        assert_eq!(a.workloads, vec![Workload::Bulk]);
        assert_eq!(a.modes, vec![Mode::Plaintext, Mode::PerRecord]);
        // More threads than cores (oversubscription) are allowed.
        let a = parse_str("--threads 64,16,32,1024").expect("many threads");
        assert_eq!(a.threads, vec![16, 32, 64, 1024]);

        for bad in [
            "--threads 0",
            "--threads 1,x",
            "--threads ,",
            "--threads 1025",
            "--duration -1",
            "--duration 0",
            "--rounds 0",
            "--work-us nan",
            "--apply-us -1",
            "--sync full",
            "--workload nope",
            "--mode aes",
            "--model-cores 0",
            "--bogus",
            "--out",
        ] {
            let Err(e) = parse_str(bad) else {
                panic!("`{bad}` should fail");
            };
            assert_eq!(e.exit_code(), 2, "`{bad}`: {e}");
        }
    }

    #[test]
    fn help_is_not_an_error_exit() {
        let e = parse_str("--help").expect_err("help stops parsing");
        assert_eq!(e.kind(), ErrorKind::DisplayHelp);
        assert_eq!(e.exit_code(), 0);
        let help = e.to_string();
        for opt in ["--threads", "--apply-us", "--recovery-mib", "--no-progress"] {
            assert!(help.contains(opt), "help lacks {opt}");
        }
    }
}
