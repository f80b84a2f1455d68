//! `wal-key`: manage walcrypt keys. Key stores (data keys wrapped under a KEK from a file or
//! a command), raw key ring files, and KEK files. Key bytes are never printed.

#![forbid(unsafe_code)]

#[path = "../kek.rs"]
mod kek;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kek::{KekArgs, NewKekArgs, is_key_store};
use walcrypt::{KekFile, KeyInfo, KeyRing, KeyStore, Reader};

/// Manage walcrypt keys: key stores (data keys wrapped under a KEK), raw key rings and KEK
/// files. Every file is written with mode 0600, atomically; key bytes are never shown.
#[derive(Debug, Parser)]
#[command(name = "wal-key", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a KEK file (64 random hex digits) for development and tests; never overwrites.
    KekNew {
        /// KEK file to create.
        file: PathBuf,
    },
    /// Create a key store with one fresh data key (id 1), wrapped under the KEK.
    Init {
        /// Key store file to create (never overwritten).
        store: PathBuf,
        #[command(flatten)]
        kek: KekArgs,
    },
    /// Wrap an existing raw key ring into a new key store (ids and the active key kept).
    Wrap {
        /// Raw key ring file to read.
        ring: PathBuf,
        /// Key store file to create (never overwritten).
        store: PathBuf,
        #[command(flatten)]
        kek: KekArgs,
    },
    /// Add a fresh data key with the next id and make it active (a key store needs its KEK;
    /// a raw ring is rewritten). A log picks the key up when it is next opened; a live log
    /// rotates with Wal::rotate_data_key.
    Rotate {
        /// Key store or raw key ring file.
        file: PathBuf,
        #[command(flatten)]
        kek: KekArgs,
    },
    /// Re-wrap every data key of a key store under a new KEK. The log is not touched; keep the
    /// old KEK until this succeeds.
    RotateKek {
        /// Key store file.
        store: PathBuf,
        #[command(flatten)]
        kek: KekArgs,
        #[command(flatten)]
        new_kek: NewKekArgs,
    },
    /// List key ids, state, creation time and fingerprints (a key store lists without its KEK).
    List {
        /// Key store or raw key ring file.
        file: PathBuf,
    },
    /// Check that a key store opens with its KEK and every key unwraps to its fingerprint (or
    /// that a raw ring parses); with --log, that it holds every key the log's segments list,
    /// with matching check values.
    Verify {
        /// Key store or raw key ring file.
        file: PathBuf,
        #[command(flatten)]
        kek: KekArgs,
        /// A log directory to check the keys against.
        #[arg(long, value_name = "DIR")]
        log: Option<PathBuf>,
    },
    /// Generate a new raw key ring with one key (id 1); refuses to overwrite an existing file.
    New {
        /// Key ring file to create.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                let _ = e.print();
                return ExitCode::from(
                    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                        2
                    } else {
                        0
                    },
                );
            }
            let text = e.to_string();
            let head = text.split("Usage:").next().unwrap_or("invalid arguments");
            let head: Vec<&str> = head
                .trim_start_matches("error: ")
                .split_whitespace()
                .collect();
            eprintln!("wal-key: {} (see wal-key --help)", head.join(" "));
            return ExitCode::from(2);
        }
    };
    match run(args.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("wal-key: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(command: Command) -> Result<(), String> {
    let err = |e: walcrypt::Error| e.to_string();
    match command {
        Command::KekNew { file } => {
            let kek = KekFile::create(&file).map_err(err)?;
            println!(
                "created KEK file {} (mode 0600), KEK {}",
                file.display(),
                kek.fingerprint()
            );
        }
        Command::Init { store, kek } => {
            let provider = kek.provider()?;
            let created = KeyStore::create(&store, provider).map_err(err)?;
            println!("created key store {} (mode 0600)", store.display());
            print_store(&created.kek_id(), created.generation(), &created.keys());
        }
        Command::Wrap { ring, store, kek } => {
            let provider = kek.provider()?;
            let raw = load_ring(&ring)?;
            let created = KeyStore::create_from_ring(&store, provider, &raw).map_err(err)?;
            println!(
                "wrapped the {} keys of {} into key store {} (mode 0600); the raw ring file is \
                 left as it was: remove it securely once the log opens with the store",
                raw.len(),
                ring.display(),
                store.display()
            );
            print_store(&created.kek_id(), created.generation(), &created.keys());
        }
        Command::Rotate { file, kek } => {
            if is_key_store(&file) {
                let store = KeyStore::open(&file, kek.provider()?).map_err(err)?;
                let (id, _) = store.rotate_data_key().map_err(err)?;
                println!(
                    "added data key {id} to {} and made it active",
                    file.display()
                );
                print_store(&store.kek_id(), store.generation(), &store.keys());
            } else {
                let mut ring = load_ring(&file)?;
                let id = ring
                    .rotate()
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                ring.save(&file).map_err(err)?;
                println!("added key id {id} to {} and made it active", file.display());
                print_ring(&ring);
            }
        }
        Command::RotateKek {
            store,
            kek,
            new_kek,
        } => {
            let opened = KeyStore::open(&store, kek.provider()?).map_err(err)?;
            let old = opened.kek_id();
            opened.rotate_kek(new_kek.provider()?).map_err(err)?;
            println!(
                "re-wrapped {} data keys of {} from KEK {old} to KEK {}",
                opened.keys().len(),
                store.display(),
                opened.kek_id()
            );
        }
        Command::List { file } => {
            if is_key_store(&file) {
                let (kek_id, generation, keys) = KeyStore::inspect(&file).map_err(err)?;
                print_store(&kek_id, generation, &keys);
            } else {
                print_ring(&load_ring(&file)?);
            }
        }
        Command::Verify { file, kek, log } => {
            let ring = if is_key_store(&file) {
                let store = KeyStore::open(&file, kek.provider()?).map_err(err)?;
                println!(
                    "key store {}: {} data keys unwrap under KEK {} and match their fingerprints",
                    file.display(),
                    store.keys().len(),
                    store.kek_id()
                );
                store.ring()
            } else {
                let ring = load_ring(&file)?;
                println!("key ring {}: {} keys parse", file.display(), ring.len());
                ring
            };
            if let Some(dir) = log {
                verify_log(&dir, &ring)?;
            }
        }
        Command::New { file } => {
            let ring = KeyRing::generate().map_err(err)?;
            ring.save_new(&file).map_err(|e| match e {
                walcrypt::Error::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::AlreadyExists =>
                {
                    format!(
                        "{}: already exists; refusing to overwrite a key ring",
                        file.display()
                    )
                }
                other => other.to_string(),
            })?;
            println!("created {} (mode 0600)", file.display());
            print_ring(&ring);
        }
    }
    Ok(())
}

/// Every key id a segment of the log lists is in `ring`, with the check value the segment
/// records (the reader compares them when it opens).
fn verify_log(dir: &Path, ring: &KeyRing) -> Result<(), String> {
    let reader = Reader::open(dir, Some(ring.clone())).map_err(|e| e.to_string())?;
    let mut missing = Vec::new();
    for seg in reader.segments() {
        for (id, _) in &seg.header.key_checks {
            if ring.get(*id).is_none() && !missing.contains(id) {
                missing.push(*id);
            }
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "log {} needs key ids {missing:?}, which the keys lack",
            dir.display()
        ));
    }
    println!(
        "log {}: every key its {} segments list is present with a matching check value",
        dir.display(),
        reader.segments().len()
    );
    Ok(())
}

fn load_ring(file: &Path) -> Result<KeyRing, String> {
    let ring = KeyRing::load(file).map_err(|e| e.to_string())?;
    if let Ok(false) = KeyRing::file_is_private(file) {
        eprintln!(
            "wal-key: warning: {} is readable by group or others (chmod 600 it)",
            file.display()
        );
    }
    Ok(ring)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Ids and fingerprints only: a fingerprint names a key without revealing it.
fn print_ring(ring: &KeyRing) {
    let active = ring.active_id();
    println!("{:>6}  {:<16}  state", "key id", "fingerprint");
    for id in ring.ids() {
        let fp = ring
            .get(id)
            .map(|k| hex(&k.fingerprint()))
            .unwrap_or_default();
        let state = if Some(id) == active {
            "active"
        } else {
            "decrypt-only"
        };
        println!("{id:>6}  {fp:<16}  {state}");
    }
}

fn print_store(kek_id: &str, generation: u64, keys: &[KeyInfo]) {
    println!("KEK {kek_id}, generation {generation}");
    println!(
        "{:>6}  {:<16}  {:<12}  created (UTC)",
        "key id", "fingerprint", "state"
    );
    for k in keys {
        println!(
            "{:>6}  {:<16}  {:<12}  {}",
            k.id,
            hex(&k.fingerprint),
            k.state.name(),
            utc(k.created)
        );
    }
}

/// `YYYY-MM-DD HH:MM:SS` for seconds since the Unix epoch (civil-from-days, proleptic
/// Gregorian).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}
