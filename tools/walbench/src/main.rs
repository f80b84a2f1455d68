//! walbench: reproduces the per-record vs page-level WAL encryption study on walcrypt.
//!
//! Runs every (workload, mode, threads) cell for a few rounds with the modes interleaved,
//! reports medians and ratios to plaintext measured side by side, times crash recovery of a
//! large log per mode (decode only and with simulated redo per record), fits a scaling model
//! to the measured lock hold times, and writes CSV files and SVG charts. See
//! docs/BENCHMARKS.md.

mod args;
mod charts;
mod cpu;
mod lines;
mod model;
mod peers;
mod recovery;
mod report;
mod run;
mod syscalls;
mod workload;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use walcrypt::KeyRing;

use crate::args::Args;
use crate::recovery::{Apply, RECOVERY_REPEATS};
use crate::run::{BoxError, CellSpec};
use crate::workload::EngineWork;

fn main() -> ExitCode {
    // Bad options: clap prints one error line and exits with code 2.
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("walbench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), BoxError> {
    fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create output directory {}: {e}", args.out.display()))?;
    let temp;
    let log_base: PathBuf = if args.keep {
        let p = args.out.join("logs");
        fs::create_dir_all(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        p
    } else {
        temp = tempfile::Builder::new()
            .prefix("walbench-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        temp.path().to_path_buf()
    };
    let keys = KeyRing::generate()?;
    if args.peers {
        return run_peers(args, &keys, &log_base);
    }
    let work = EngineWork::calibrate(args.work_us);
    // Recovery is timed decode-only and, unless --apply-us is 0, with simulated redo.
    let mut applies = vec![Apply::DECODE_ONLY];
    if args.apply_us > 0.0 {
        applies.push(Apply {
            us: args.apply_us,
            work: Some(EngineWork::calibrate(args.apply_us)),
        });
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    print_header(args, work, &applies, cores);

    let cells_total = args.rounds * args.workloads.len() * args.threads.len() * args.modes.len();
    let recovery_total = if args.recovery_mib > 0 {
        args.workloads.len() * args.modes.len() * (RECOVERY_REPEATS * applies.len() + 2)
    } else {
        0
    };
    let bar = progress_bar(!args.no_progress, (cells_total + recovery_total) as u64);

    let mut cells = Vec::with_capacity(cells_total);
    for round in 0..args.rounds {
        for &workload in &args.workloads {
            for (ti, &threads) in args.threads.iter().enumerate() {
                for mode in rotated(&args.modes, round + ti) {
                    bar.set_message(format!(
                        "round {}/{} {} {} x{}",
                        round + 1,
                        args.rounds,
                        workload.name(),
                        mode.name(),
                        threads
                    ));
                    let dir = log_base.join(format!("{}-{}-t{threads}", workload.name(), mode));
                    fresh_dir(&dir)?;
                    let cell = run::run_cell(&CellSpec {
                        dir: &dir,
                        keys: &keys,
                        workload,
                        mode,
                        threads,
                        round,
                        sync: args.sync,
                        duration: args.duration,
                        work,
                        compression: args.compression(),
                        batch: args.append_batch,
                        segment_bytes: args.segment_bytes(),
                    })
                    .map_err(|e| format!("{} {} x{threads}: {e}", workload.name(), mode))?;
                    cells.push(cell);
                    if !(args.keep && round + 1 == args.rounds) {
                        remove_dir(&dir);
                    }
                    bar.inc(1);
                }
            }
        }
    }

    let mut recoveries = Vec::new();
    if args.recovery_mib > 0 {
        for &workload in &args.workloads {
            recoveries.extend(recovery::run(
                args, &keys, &log_base, workload, &applies, &bar,
            )?);
        }
    }
    bar.finish_and_clear();

    let summary = report::summarize(&cells);
    println!(
        "THROUGHPUT (medians over {} rounds; x_pt = ratio to plaintext, same threads, per round, median)",
        args.rounds
    );
    println!("{}", report::throughput_table(&summary));
    println!(
        "LEDGER (per transaction, medians over {} rounds)",
        args.rounds
    );
    println!(
        "  ser ns = ins + wr of each round, median (the model's t_ser); sync ns = fdatasync (Durable commits: in the sync turn, after the write lock, not in wr ns); wouts = write-outs (ranges written; a flush that finds its record in one under way makes none); txn/wo = commits per write-out;"
    );
    println!(
        "  syncs = fdatasyncs; pages = page images written; full = write-outs by an appender facing a full buffer; vcsw, ivcsw = voluntary, involuntary context switches (process);"
    );
    println!(
        "  futex, sysc = the workers' futex calls and all their system calls (kernel tracepoints; — where the kernel does not allow counting them)"
    );
    println!(
        "  lw/txn, lx/txn = shared-line writes, line transfers (a write to a line another thread wrote last) per txn, by the workers; own/rec = writes to the thread's own lines (its lane, its statistics shard) per record; sh/rec = writes to lines every appender writes per record; lw/wo = commit-path writes per write-out;"
    );
    println!(
        "  budget = writes but the own lines' / (1 per record + 4 per write-out), met when <= 1; {}",
        if lines::COUNTING {
            "counted (feature line-ledger): exact counts of the wrapped atomics and mutexes, see docs/BENCHMARKS.md"
        } else {
            "— = not counted: build with --features line-ledger"
        }
    );
    println!(
        "  clock: an empty section timed as the holds are timed (an Instant read, then its elapsed time) reads {:.0} ns here (median of 5 x 100k); ins ns counts one such section per append (5 per oltp transaction), wr ns one per write-out",
        empty_timed_section_ns()
    );
    println!("{}", report::ledger_table(&summary));
    if lines::COUNTING {
        println!("LINES BY SITE (per txn: label writes/transfers, most written first)");
        println!("{}", report::line_sites_table(&summary));
    }
    let fits = model::fit(&summary, cores);
    println!(
        "SCALING MODEL (a prediction, not a measurement): X(n) = n / (t_par + n*t_ser), t_ser = measured insert+write lock hold per txn at {} threads, t_par = the rest of a txn at the smallest thread count",
        fits.first().map_or(cores, |f| f.ser_from)
    );
    println!("{}", model::table(&fits, args.model_cores));
    let projections = model::project(&summary, cores, args.line_ns);
    println!(
        "PROJECTION (a model, not a measurement; \"measured\" rows are this machine's {cores} cores, oversubscribed above {cores} threads):"
    );
    println!(
        "  amdahl: X(n) = n / (t_par + n*t_ser), t_ser = ser ns and t_par = cpu per txn - t_ser, both from the base row (largest thread count <= cores);"
    );
    println!(
        "  +lines: the same with t_ser + L*t_line, t_line = {} ns (--line-ns), L = line transfers per txn counted at the largest thread count (few cores: a lower bound);",
        args.line_ns
    );
    println!(
        "  +all: L = every write to a line other threads write too (all but the threads' own), each moving its line (an upper bound); — = not counted"
    );
    println!("{}", model::projection_table(&projections));
    let rec_summary = report::summarize_recovery(&recoveries);
    if !rec_summary.is_empty() {
        println!(
            "RECOVERY (open_and_replay of a log of {} MiB payload, the same records in every mode, written without checkpoints and dropped without close; each measurement replays the log reps times, at least {:.1} s, and gives the mean per replay; medians of {RECOVERY_REPEATS} measurements; cpu ns/B = user+system CPU per log byte; apply = simulated redo per record (none = decode only; else an 8 KiB page copy + that much CPU); x_ = ratio to plaintext, same apply)",
            args.recovery_mib,
            args.recovery_secs.as_secs_f64()
        );
        println!("{}", report::recovery_table(&rec_summary));
    }

    let out = &args.out;
    write(
        &out.join("throughput.csv"),
        &report::throughput_csv(&summary),
    )?;
    write(&out.join("rounds.csv"), &report::rounds_csv(&cells))?;
    write(&out.join("model.csv"), &model::csv(&fits, args.model_cores))?;
    write(
        &out.join("projection.csv"),
        &model::projection_csv(&projections),
    )?;
    write(&out.join("lines.csv"), &report::lines_csv(&cells))?;
    if !rec_summary.is_empty() {
        write(
            &out.join("recovery.csv"),
            &report::recovery_csv(&rec_summary),
        )?;
    }
    charts::draw_study(args, &summary, &fits, &rec_summary)?;
    println!("wrote CSV files and SVG charts to {}", out.display());
    if args.keep {
        println!("kept the logs under {}", log_base.display());
    }
    Ok(())
}

/// The peer run: every (shape, sync, threads) cell for each system, interleaved by round.
fn run_peers(args: &Args, keys: &KeyRing, log_base: &Path) -> Result<(), BoxError> {
    let systems = peers::System::available(&args.modes);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cmd: Vec<String> = std::env::args().collect();
    println!("walbench {} (UTC)  {}", utc_now(), cmd.join(" "));
    println!(
        "peers: {} cores ({}); {:.2} s per cell x {} rounds; threads {:?}; systems {}",
        cores,
        idle_driver(),
        args.duration.as_secs_f64(),
        args.rounds,
        args.threads,
        systems
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !cfg!(feature = "peers") {
        println!(
            "okaywal and raft-engine are not compiled in: cargo run --release -p walbench --features peers -- --peers"
        );
    }
    println!();
    let cells_total =
        args.rounds * args.shapes.len() * args.peer_sync.len() * args.threads.len() * systems.len();
    let bar = progress_bar(!args.no_progress, cells_total as u64);
    let mut cells = Vec::new();
    for round in 0..args.rounds {
        for &shape in &args.shapes {
            for &durable in &args.peer_sync {
                for (ti, &threads) in args.threads.iter().enumerate() {
                    for system in rotated(&systems, round + ti) {
                        let label = format!(
                            "{} {} sync {} x{threads}",
                            system.name(),
                            shape.name(),
                            peers::sync_name(durable)
                        );
                        bar.set_message(format!("round {}/{} {label}", round + 1, args.rounds));
                        let dir = log_base.join(format!("peer-{}", system.name()));
                        fresh_dir(&dir)?;
                        let cell = peers::run_peer_cell(&peers::PeerSpec {
                            dir: &dir,
                            keys,
                            system,
                            shape,
                            durable,
                            threads,
                            duration: args.duration,
                            segment_bytes: args.segment_bytes(),
                        })
                        .map_err(|e| format!("{label}: {e}"))?;
                        cells.extend(cell);
                        remove_dir(&dir);
                        bar.inc(1);
                    }
                }
            }
        }
    }
    bar.finish_and_clear();
    let summary = peers::summarize(&cells);
    println!(
        "PEERS (txn/s, medians over {} rounds; a txn appends COUNT records of SIZE bytes, then commits; sync data = durable commit, none = handed to the OS; X/best = ratio to the best peer of the row)",
        args.rounds
    );
    println!("{}", peers::table(&summary, &systems));
    write(&args.out.join("peers.csv"), &peers::csv(&summary))?;
    charts::draw_peers(args, &summary, &systems, cores)?;
    println!(
        "wrote peers.csv and peers-sync-*.svg to {}",
        args.out.display()
    );
    Ok(())
}

/// `items` starting at `by % len`: each round and thread count starts with another mode (and
/// each recovery repeat with another apply kind), so none always runs first (or last) on a
/// machine whose load drifts.
fn rotated<T: Copy>(items: &[T], by: usize) -> Vec<T> {
    let k = by % items.len().max(1);
    items[k..].iter().chain(&items[..k]).copied().collect()
}

fn progress_bar(enabled: bool, total: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn print_header(args: &Args, work: EngineWork, applies: &[Apply], cores: usize) {
    let cmd: Vec<String> = std::env::args().collect();
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, v)| v.trim());
    let flags = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags"))
        .unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    println!("walbench {} (UTC)  {}", utc_now(), cmd.join(" "));
    println!(
        "machine: {model}, {cores} cores ({}), aes-ni {}, vaes {}; build: {}",
        idle_driver(),
        yes(has("aes")),
        yes(has("vaes")),
        if cfg!(target_feature = "aes") {
            "AES-NI compiled in (target-cpu/target-feature)"
        } else {
            "portable (AES-NI/VAES detected at run time)"
        }
    );
    println!(
        "sync {}, {:.2} s per cell x {} rounds, engine work {} us/txn ({} loop iterations), threads {:?}{}",
        args.sync.name(),
        args.duration.as_secs_f64(),
        args.rounds,
        args.work_us,
        work.iterations(),
        args.threads,
        match args.append_batch {
            true => ", records appended with one append_batch per txn",
            false => "",
        }
    );
    if let Some(mib) = args.segment_mib {
        println!("segments of {mib} MiB (--segment-mib)");
    }
    if args.recovery_mib > 0 {
        let with: Vec<String> = applies
            .iter()
            .map(|a| match a.work {
                Some(w) => format!(
                    "apply {} us/record (8 KiB page copy + {} loop iterations)",
                    a.us,
                    w.iterations()
                ),
                None => "decode only".to_string(),
            })
            .collect();
        println!(
            "recovery: {} MiB of payload per workload and mode, replayed {}",
            args.recovery_mib,
            with.join(" and ")
        );
    }
    for w in &args.workloads {
        let recs: Vec<String> = w.records().iter().map(|(_, l)| l.to_string()).collect();
        println!(
            "  {:<5} records per txn (payload bytes): {}",
            w.name(),
            recs.join(" + ")
        );
    }
    println!();
}

/// The kernel's idle driver, and for a guest's `haltpoll` how long an idle core polls before
/// it halts: Durable cells, full of wake-ups on idle cores, moved with it by 4-36% on the
/// 2-core virtual machine of docs/BENCHMARKS.md ("Durable cells and the machine's idle
/// driver").
fn idle_driver() -> String {
    let read = |path: &str| fs::read_to_string(path).map(|s| s.trim().to_string());
    match read("/sys/devices/system/cpu/cpuidle/current_driver") {
        Ok(driver) if driver == "haltpoll" => {
            match read("/sys/module/haltpoll/parameters/guest_halt_poll_ns") {
                Ok(ns) => format!("idle driver haltpoll, polls {ns} ns before halting"),
                Err(_) => "idle driver haltpoll".to_string(),
            }
        }
        Ok(driver) => format!("idle driver {driver}"),
        Err(_) => "idle driver unknown".to_string(),
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// `YYYY-MM-DD HH:MM` in UTC, without a date crate.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

fn fresh_dir(dir: &Path) -> Result<(), BoxError> {
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
    }
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(())
}

fn remove_dir(dir: &Path) {
    let _ = fs::remove_dir_all(dir);
}

fn write(path: &Path, text: &str) -> Result<(), BoxError> {
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

/// What the clock adds to a timed section: the mean reading of an empty section timed as the
/// library times its holds (an `Instant` read before, its elapsed time after), median of five
/// batches of 100,000.
fn empty_timed_section_ns() -> f64 {
    let mut batches: Vec<f64> = (0..5)
        .map(|_| {
            let mut total: u128 = 0;
            for _ in 0..100_000 {
                let since = std::time::Instant::now();
                total += std::hint::black_box(since).elapsed().as_nanos();
            }
            total as f64 / 100_000.0
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[2]
}
