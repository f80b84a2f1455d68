//! Command-line options that name a KEK provider, shared by wal-dump and wal-key.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use walcrypt::{KeyProvider, ProviderSpec};

/// Where the KEK that unwraps a key store comes from.
#[derive(Debug, Clone, clap::Args)]
pub struct KekArgs {
    /// KEK file (64 hex digits) that wraps the key store's data keys.
    #[arg(long, value_name = "FILE", conflicts_with = "kek_command")]
    pub kek_file: Option<PathBuf>,
    /// Program that prints the KEK (run directly, without a shell; its output is never shown).
    #[arg(long, value_name = "PROGRAM")]
    pub kek_command: Option<PathBuf>,
    /// An argument for --kek-command (repeat for several).
    #[arg(long = "kek-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub kek_args: Vec<String>,
    /// How long --kek-command may run before it is killed, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub kek_timeout_ms: u64,
}

impl KekArgs {
    /// The provider the options name, if any.
    pub fn spec(&self) -> Option<ProviderSpec> {
        spec(
            &self.kek_file,
            &self.kek_command,
            &self.kek_args,
            self.kek_timeout_ms,
        )
    }

    /// Builds the provider; an error when none was named.
    pub fn provider(&self) -> Result<Arc<dyn KeyProvider>, String> {
        provider(self.spec())
    }
}

/// The provider of the new KEK, for `wal-key rotate-kek`.
#[derive(Debug, Clone, clap::Args)]
pub struct NewKekArgs {
    /// KEK file of the new KEK.
    #[arg(long, value_name = "FILE", conflicts_with = "new_kek_command")]
    pub new_kek_file: Option<PathBuf>,
    /// Program that prints the new KEK.
    #[arg(long, value_name = "PROGRAM")]
    pub new_kek_command: Option<PathBuf>,
    /// An argument for --new-kek-command (repeat for several).
    #[arg(long = "new-kek-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub new_kek_args: Vec<String>,
    /// How long --new-kek-command may run, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub new_kek_timeout_ms: u64,
}

#[allow(
    dead_code,
    reason = "wal-dump reads with one KEK; only wal-key rotates to a new one"
)]
impl NewKekArgs {
    /// Builds the new provider; an error when none was named.
    pub fn provider(&self) -> Result<Arc<dyn KeyProvider>, String> {
        provider(spec(
            &self.new_kek_file,
            &self.new_kek_command,
            &self.new_kek_args,
            self.new_kek_timeout_ms,
        ))
        .map_err(|e| e.replace("--kek-", "--new-kek-"))
    }
}

fn spec(
    file: &Option<PathBuf>,
    command: &Option<PathBuf>,
    args: &[String],
    timeout_ms: u64,
) -> Option<ProviderSpec> {
    if let Some(file) = file {
        return Some(ProviderSpec::File(file.clone()));
    }
    command.as_ref().map(|program| ProviderSpec::Command {
        program: program.clone(),
        args: args.to_vec(),
        timeout: Duration::from_millis(timeout_ms),
    })
}

fn provider(spec: Option<ProviderSpec>) -> Result<Arc<dyn KeyProvider>, String> {
    let spec =
        spec.ok_or("a key store needs its KEK: add --kek-file FILE or --kek-command PROGRAM")?;
    let kek = spec.provider().map_err(|e| e.to_string())?;
    Ok(Arc::new(kek))
}

/// True when the file at `path` starts like a key store (otherwise it is a raw key ring).
pub fn is_key_store(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == walcrypt::STORE_MAGIC)
}
