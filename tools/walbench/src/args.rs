//! Command-line options, parsed by hand: every bad value is one clear error line.

use std::path::PathBuf;
use std::time::Duration;

use walcrypt::{Mode, SyncMode};

use crate::workload::Workload;

pub const USAGE: &str = "\
walbench: per-record vs page-level WAL encryption, measured side by side

USAGE: walbench [OPTIONS]

OPTIONS:
  --workload LIST     oltp,bulk,fpw (default: all three)
  --mode LIST         plaintext,perrecord,pagelevel (default: all three)
  --threads LIST      appending threads per cell (default: 1,2,4,8)
  --sync none|data    none: flush hands pages to the OS; data: flush fdatasyncs (default: none)
  --duration SECS     measured time of one cell in one round (default: 0.3)
  --rounds N          rounds; every cell runs once per round, modes interleaved,
                      and the report quotes medians over rounds (default: 3)
  --work-us US        simulated engine CPU work per transaction, outside any WAL lock,
                      in microseconds (default: 5)
  --recovery-mib N    size of each log written for the recovery measurement; 0 skips
                      recovery (default: 64)
  --out DIR           where the CSV files and SVG charts go (default: ./walbench-results)
  --keep              keep the logs (under OUT/logs) for wal-dump; default: a temporary
                      directory, removed at exit
  --model-cores N     the scaling model predicts up to N cores (default: 32)
  --no-progress       no progress bar
  -h, --help          this text
";

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub struct Args {
    pub workloads: Vec<Workload>,
    pub modes: Vec<Mode>,
    pub threads: Vec<usize>,
    pub sync: SyncMode,
    pub duration: Duration,
    pub rounds: usize,
    pub work_us: f64,
    pub recovery_mib: u64,
    pub out: PathBuf,
    pub keep: bool,
    pub model_cores: usize,
    pub progress: bool,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            workloads: Workload::ALL.to_vec(),
            modes: Mode::ALL.to_vec(),
            threads: vec![1, 2, 4, 8],
            sync: SyncMode::Buffered,
            duration: Duration::from_millis(300),
            rounds: 3,
            work_us: 5.0,
            recovery_mib: 64,
            out: PathBuf::from("walbench-results"),
            keep: false,
            model_cores: 32,
            progress: true,
        }
    }
}

/// What the command line asked for.
pub enum Parsed {
    Run(Args),
    Help,
}

pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Parsed, String> {
    let mut args = Args::default();
    while let Some(flag) = argv.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (flag, None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| argv.next())
                .ok_or_else(|| format!("{flag} needs a value (see --help)"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--workload" | "--workloads" => {
                args.workloads = list(&value()?, "workload", |s| s.parse())?
            }
            "--mode" | "--modes" => args.modes = list(&value()?, "mode", |s| s.parse())?,
            "--threads" => {
                args.threads = list(&value()?, "thread count", |s| match s.parse::<usize>() {
                    Ok(n) if (1..=1024).contains(&n) => Ok(n),
                    _ => Err(format!("`{s}` is not a thread count from 1 to 1024")),
                })?;
                args.threads.sort_unstable();
                args.threads.dedup();
            }
            "--sync" => {
                args.sync = match value()?.as_str() {
                    "none" => SyncMode::Buffered,
                    "data" => SyncMode::Durable,
                    other => return Err(format!("--sync `{other}`: expected none or data")),
                }
            }
            "--duration" => {
                let v = value()?;
                let secs = positive(&v, "--duration")?;
                args.duration = Duration::from_secs_f64(secs);
            }
            "--rounds" => args.rounds = count(&value()?, "--rounds", 1, 1000)?,
            "--work-us" => {
                let v = value()?;
                args.work_us = match v.parse::<f64>() {
                    Ok(x) if x.is_finite() && (0.0..=1e6).contains(&x) => x,
                    _ => return Err(format!("--work-us `{v}`: expected 0 to 1000000")),
                }
            }
            "--recovery-mib" => {
                args.recovery_mib = count(&value()?, "--recovery-mib", 0, 1 << 20)? as u64
            }
            "--out" => args.out = PathBuf::from(value()?),
            "--keep" => args.keep = true,
            "--model-cores" => args.model_cores = count(&value()?, "--model-cores", 1, 4096)?,
            "--no-progress" => args.progress = false,
            other => return Err(format!("unknown option `{other}` (see --help)")),
        }
    }
    Ok(Parsed::Run(args))
}

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

fn positive(v: &str, flag: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 3600.0 => Ok(x),
        _ => Err(format!(
            "{flag} `{v}`: expected seconds, more than 0 and at most 3600"
        )),
    }
}

fn count(v: &str, flag: &str, min: usize, max: usize) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{flag} `{v}`: expected a whole number from {min} to {max}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Parsed, String> {
        parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_lists_and_rejects_garbage() {
        let Ok(Parsed::Run(a)) = parse_str("--threads 8,1,2 --mode pagelevel --sync=data") else {
            panic!("should parse");
        };
        assert_eq!(a.threads, vec![1, 2, 8]);
        assert_eq!(a.modes, vec![Mode::PageLevel]);
        assert_eq!(a.sync, SyncMode::Durable);
        assert!(parse_str("--threads 0").is_err());
        assert!(parse_str("--duration -1").is_err());
        assert!(parse_str("--workload nope").is_err());
        assert!(parse_str("--bogus").is_err());
        assert!(parse_str("--out").is_err());
    }
}
