//! `wal-key`: create, rotate and list walcrypt key ring files. Key bytes are never printed.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use walcrypt::KeyRing;

/// Create, rotate and list walcrypt key ring files (mode 0600; key bytes are never shown).
#[derive(Debug, Parser)]
#[command(name = "wal-key", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate a new key ring with one key (id 1); refuses to overwrite an existing file.
    New {
        /// Key ring file to create.
        file: PathBuf,
    },
    /// Add a fresh key with the next id and make it the active key.
    Rotate {
        /// Key ring file to update.
        file: PathBuf,
    },
    /// List key ids and their check values.
    List {
        /// Key ring file to read.
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
    match command {
        Command::New { file } => {
            if std::fs::symlink_metadata(&file).is_ok() {
                return Err(format!(
                    "{}: already exists; refusing to overwrite a key ring",
                    file.display()
                ));
            }
            let ring = KeyRing::generate().map_err(|e| e.to_string())?;
            ring.save(&file).map_err(|e| e.to_string())?;
            println!("created {} (mode 0600)", file.display());
            print_ring(&ring);
        }
        Command::Rotate { file } => {
            let mut ring = load(&file)?;
            let id = ring
                .rotate()
                .map_err(|e| format!("{}: {e}", file.display()))?;
            ring.save(&file).map_err(|e| e.to_string())?;
            println!("added key id {id} to {} and made it active", file.display());
            print_ring(&ring);
        }
        Command::List { file } => {
            let ring = load(&file)?;
            print_ring(&ring);
        }
    }
    Ok(())
}

fn load(file: &Path) -> Result<KeyRing, String> {
    let ring = KeyRing::load(file).map_err(|e| e.to_string())?;
    if let Ok(false) = KeyRing::file_is_private(file) {
        eprintln!(
            "wal-key: warning: {} is readable by group or others (chmod 600 it)",
            file.display()
        );
    }
    Ok(ring)
}

/// Ids and check values only: the check value identifies a key without revealing it.
fn print_ring(ring: &KeyRing) {
    let active = ring.active_id();
    println!("{:>6}  {:<16}  status", "key id", "check value");
    for id in ring.ids() {
        let kcv = ring
            .get(id)
            .map(|k| {
                k.check_value()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            })
            .unwrap_or_default();
        let status = if Some(id) == active { "active" } else { "" };
        println!("{id:>6}  {kcv:<16}  {status}");
    }
}
