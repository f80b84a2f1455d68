//! `wal-key`: manage walcrypt keys. Key stores (data keys wrapped under a KEK from a file or
//! a command), raw key ring files, and KEK files. Key bytes are never printed.

#![forbid(unsafe_code)]

#[path = "../cli.rs"]
mod cli;
#[path = "../kek.rs"]
mod kek;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use kek::{KekArgs, NewKekArgs, is_key_store};
use serde_json::{Value, json};
use walcrypt::{KekFile, KeyInfo, KeyRing, KeyStore, Reader};

/// Manage walcrypt keys: key stores (data keys wrapped under a KEK), raw key rings and KEK
/// files. Every file is written with mode 0600, atomically; key bytes are never shown.
#[derive(Debug, Parser)]
#[command(
    name = "wal-key",
    version,
    after_help = "Exit codes: 0 done; 2 usage, key or I/O problem; 3 verify --log checked \
                  nothing (a plaintext log lists no keys)."
)]
struct Args {
    #[command(subcommand)]
    command: Command,

    /// Output format: text, or json (one object per command; field names in docs/WAL-DUMP.md).
    #[arg(long, global = true, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Lines of text.
    Text,
    /// One JSON object.
    Json,
}

/// Exit code: a usage, key or I/O problem, or a check that failed.
const EXIT_TROUBLE: u8 = 2;
/// Exit code: `verify --log` found nothing to check (a plaintext log lists no keys).
const EXIT_UNCHECKED: u8 = 3;

/// What a command reports: lines of text, and the same as one JSON object.
struct Out {
    lines: Vec<String>,
    json: serde_json::Map<String, Value>,
    code: u8,
}

impl Out {
    fn new(command: &str) -> Out {
        let mut json = serde_json::Map::new();
        json.insert("command".into(), command.into());
        Out {
            lines: Vec::new(),
            json,
            code: 0,
        }
    }

    fn line(&mut self, line: String) {
        self.lines.push(line);
    }

    fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.json.insert(key.into(), value.into());
    }

    fn print(self, format: Format) -> u8 {
        match format {
            Format::Text => {
                for l in &self.lines {
                    println!("{l}");
                }
            }
            Format::Json => println!("{}", Value::Object(self.json)),
        }
        self.code
    }
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
    /// rotates with Wal::rotate_data_key. A store that a live log rotates or retires keys of
    /// meanwhile gets the key on top of that change; one replaced or re-wrapped under another
    /// KEK meanwhile is refused, with nothing written.
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
    /// with matching check values (a plaintext log lists no keys: nothing is checked, exit 3).
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
                        EXIT_TROUBLE
                    } else {
                        0
                    },
                );
            }
            eprintln!("wal-key: {}", cli::usage_error("wal-key", &e));
            return ExitCode::from(EXIT_TROUBLE);
        }
    };
    match run(args.command) {
        Ok(out) => ExitCode::from(out.print(args.format)),
        Err(message) => {
            eprintln!("wal-key: {message}");
            ExitCode::from(EXIT_TROUBLE)
        }
    }
}

fn run(command: Command) -> Result<Out, String> {
    let err = |e: walcrypt::Error| e.to_string();
    let mut o;
    match command {
        Command::KekNew { file } => {
            o = Out::new("kek-new");
            let kek = KekFile::create(&file).map_err(err)?;
            o.line(format!(
                "created KEK file {} (mode 0600), KEK {}",
                file.display(),
                kek.fingerprint()
            ));
            o.set("file", file.display().to_string());
            o.set("kek", kek.fingerprint());
        }
        Command::Init { store, kek } => {
            o = Out::new("init");
            let provider = kek.provider()?;
            let created = KeyStore::create(&store, provider).map_err(err)?;
            o.line(format!("created key store {} (mode 0600)", store.display()));
            o.set("file", store.display().to_string());
            print_store(
                &mut o,
                &created.kek_id(),
                created.generation(),
                &created.keys(),
            );
        }
        Command::Wrap { ring, store, kek } => {
            o = Out::new("wrap");
            let provider = kek.provider()?;
            let raw = load_ring(&ring)?;
            let created = KeyStore::create_from_ring(&store, provider, &raw).map_err(err)?;
            o.line(format!(
                "wrapped the {} of {} into key store {} (mode 0600); the raw ring file is \
                 left as it was: remove it securely once the log opens with the store",
                count(raw.len(), "key"),
                ring.display(),
                store.display()
            ));
            o.set("ring", ring.display().to_string());
            o.set("file", store.display().to_string());
            print_store(
                &mut o,
                &created.kek_id(),
                created.generation(),
                &created.keys(),
            );
        }
        Command::Rotate { file, kek } => {
            o = Out::new("rotate");
            o.set("file", file.display().to_string());
            if is_key_store(&file) {
                let store = KeyStore::open(&file, kek.provider()?).map_err(err)?;
                let (id, _) = store.rotate_data_key().map_err(err)?;
                o.line(format!(
                    "added data key {id} to {} and made it active",
                    file.display()
                ));
                o.set("added_key_id", id);
                print_store(&mut o, &store.kek_id(), store.generation(), &store.keys());
            } else {
                let mut ring = load_ring(&file)?;
                let id = ring
                    .rotate()
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                ring.save(&file).map_err(err)?;
                o.line(format!(
                    "added key id {id} to {} and made it active",
                    file.display()
                ));
                o.set("added_key_id", id);
                print_ring(&mut o, &ring);
            }
        }
        Command::RotateKek {
            store,
            kek,
            new_kek,
        } => {
            o = Out::new("rotate-kek");
            let opened = KeyStore::open(&store, kek.provider()?).map_err(err)?;
            let old = opened.kek_id();
            opened.rotate_kek(new_kek.provider()?).map_err(err)?;
            o.line(format!(
                "re-wrapped {} of {} from KEK {old} to KEK {}",
                count(opened.keys().len(), "data key"),
                store.display(),
                opened.kek_id()
            ));
            o.set("file", store.display().to_string());
            o.set("key_count", opened.keys().len());
            o.set("old_kek", old);
            o.set("kek", opened.kek_id());
        }
        Command::List { file } => {
            o = Out::new("list");
            o.set("file", file.display().to_string());
            if is_key_store(&file) {
                let (kek_id, generation, keys) = KeyStore::inspect(&file).map_err(err)?;
                print_store(&mut o, &kek_id, generation, &keys);
            } else {
                print_ring(&mut o, &load_ring(&file)?);
            }
        }
        Command::Verify { file, kek, log } => {
            o = Out::new("verify");
            o.set("file", file.display().to_string());
            let ring = if is_key_store(&file) {
                let store = KeyStore::open(&file, kek.provider()?).map_err(err)?;
                o.line(format!(
                    "key store {}: {} unwrap under KEK {} and match their fingerprints",
                    file.display(),
                    count(store.keys().len(), "data key"),
                    store.kek_id()
                ));
                o.set("kind", "key_store");
                o.set("key_count", store.keys().len());
                o.set("kek", store.kek_id());
                store.ring()
            } else {
                let ring = load_ring(&file)?;
                o.line(format!(
                    "key ring {}: {} parse{}",
                    file.display(),
                    count(ring.len(), "key"),
                    if ring.len() == 1 { "s" } else { "" }
                ));
                o.set("kind", "key_ring");
                o.set("key_count", ring.len());
                ring
            };
            print_identities(&mut o, &ring);
            o.set("result", "ok");
            if let Some(dir) = log {
                verify_log(&mut o, &dir, &file, &ring)?;
            }
        }
        Command::New { file } => {
            o = Out::new("new");
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
            o.line(format!("created {} (mode 0600)", file.display()));
            o.set("file", file.display().to_string());
            print_ring(&mut o, &ring);
        }
    }
    Ok(o)
}

/// `n` and `noun`, in the plural unless `n` is 1.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Every key id a segment of the log lists is in `ring`, with the check value the segment
/// records (the reader compares them when it opens). A log that lists no key (plaintext)
/// proves nothing about the keys: that is reported, with its own exit code.
fn verify_log(o: &mut Out, dir: &Path, file: &Path, ring: &KeyRing) -> Result<(), String> {
    let reader = Reader::open(dir, Some(ring.clone())).map_err(|e| {
        let key = match &e {
            walcrypt::Error::WrongKey { key_id, .. } => ring
                .get(*key_id)
                .map(|k| format!(" (key id {key_id}, fingerprint {})", hex(&k.fingerprint()))),
            _ => None,
        };
        format!(
            "log {}, key file {}{}: {e}",
            dir.display(),
            file.display(),
            key.unwrap_or_default()
        )
    })?;
    let mut missing = Vec::new();
    let mut used = Vec::new();
    let mut listed = 0usize;
    for seg in reader.segments() {
        for (id, _) in &seg.header.key_checks {
            listed += 1;
            if ring.get(*id).is_none() {
                if !missing.contains(id) {
                    missing.push(*id);
                }
            } else if !used.contains(id) {
                used.push(*id);
            }
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "log {} needs key ids {missing:?}, which key file {} lacks; give the key file or \
             store that holds them",
            dir.display(),
            file.display()
        ));
    }
    used.sort_unstable();
    let segments = reader.segments().len();
    o.set("log", dir.display().to_string());
    o.set("log_mode", reader.mode().to_string());
    o.set("log_segments", segments);
    if listed == 0 {
        o.line(format!(
            "log {}: nothing checked: its {} ({} mode) list no keys",
            dir.display(),
            count(segments, "segment"),
            reader.mode()
        ));
        o.set("result", "nothing_checked");
        o.code = EXIT_UNCHECKED;
        return Ok(());
    }
    o.line(format!(
        "log {}: every key its {} list is present with a matching check value",
        dir.display(),
        count(segments, "segment")
    ));
    let mut keys = Vec::new();
    for id in used {
        if let Some(key) = ring.get(id) {
            let fp = hex(&key.fingerprint());
            o.line(format!(
                "log {}: uses key id {id}, fingerprint {fp}",
                dir.display()
            ));
            keys.push(json!({"id": id, "fingerprint": fp}));
        }
    }
    o.set("log_keys", keys);
    Ok(())
}

/// Reads a raw key ring; a KEK file given instead is named as such.
fn load_ring(file: &Path) -> Result<KeyRing, String> {
    let ring = KeyRing::load(file).map_err(|e| {
        if KekFile::open(file).is_ok() {
            format!(
                "{} is a KEK file, not a key store or key ring: it holds no data keys (a key \
                 store made with `wal-key init STORE --kek-file {}` does)",
                file.display(),
                file.display()
            )
        } else {
            e.to_string()
        }
    })?;
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

/// Each key's id and fingerprint, the identity every tool shows for a data key.
fn print_identities(o: &mut Out, ring: &KeyRing) {
    let mut keys = Vec::new();
    for id in ring.ids() {
        if let Some(key) = ring.get(id) {
            let fp = hex(&key.fingerprint());
            o.line(format!("  key id {id}, fingerprint {fp}"));
            keys.push(json!({"id": id, "fingerprint": fp}));
        }
    }
    o.set("keys", keys);
}

/// Ids and fingerprints only: a fingerprint names a key without revealing it.
fn print_ring(o: &mut Out, ring: &KeyRing) {
    let active = ring.active_id();
    o.line(format!("{:>6}  {:<16}  state", "key id", "fingerprint"));
    let mut keys = Vec::new();
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
        o.line(format!("{id:>6}  {fp:<16}  {state}"));
        keys.push(json!({"id": id, "fingerprint": fp, "state": state}));
    }
    o.set("kind", "key_ring");
    o.set("active_key_id", json!(active));
    o.set("keys", keys);
}

fn print_store(o: &mut Out, kek_id: &str, generation: u64, keys: &[KeyInfo]) {
    o.line(format!("KEK {kek_id}, generation {generation}"));
    o.line(format!(
        "{:>6}  {:<16}  {:<12}  created (UTC)",
        "key id", "fingerprint", "state"
    ));
    let mut list = Vec::new();
    for k in keys {
        let fp = hex(&k.fingerprint);
        o.line(format!(
            "{:>6}  {:<16}  {:<12}  {}",
            k.id,
            fp,
            k.state.name(),
            utc(k.created)
        ));
        list.push(json!({
            "id": k.id,
            "fingerprint": fp,
            "state": k.state.name(),
            "created": k.created,
            "created_utc": utc(k.created),
        }));
    }
    o.set("kind", "key_store");
    o.set("kek", kek_id);
    o.set("generation", generation);
    o.set("keys", list);
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
