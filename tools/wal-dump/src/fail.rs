//! The tool's failure type: one line of text and the exit code it maps to.

use std::fmt;
use std::path::Path;

use walcrypt::{Key, KeyRing, Lsn};

/// Exit code: the log (or every check asked for) is fine.
pub const EXIT_OK: u8 = 0;
/// Exit code: damage found in the log.
pub const EXIT_DAMAGE: u8 = 1;
/// Exit code: usage, key or I/O problem; the log could not be judged.
pub const EXIT_TROUBLE: u8 = 2;
/// Exit code: the log has pages but no record in them could be checked (a pagelevel log
/// without its key), so it is neither clean nor damaged.
pub const EXIT_UNCHECKED: u8 = 3;

/// Why the tool stops: a one-line message and an exit code.
#[derive(Debug)]
pub struct Fail {
    /// [`EXIT_DAMAGE`] or [`EXIT_TROUBLE`].
    pub code: u8,
    /// One line, naming the file and offset where that applies.
    pub message: String,
    /// For a segment file that a listing named and a purge has removed since: where the oldest
    /// segment left starts (see [`Fail::purged`]).
    pub purged: Option<Lsn>,
}

impl Fail {
    /// A usage, key or I/O problem (exit 2).
    pub fn trouble(message: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_TROUBLE,
            message: message.into(),
            purged: None,
        }
    }

    /// Damage in the log (exit 1).
    pub fn damage(message: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_DAMAGE,
            message: message.into(),
            purged: None,
        }
    }

    /// The segment file at `path`, holding `lsn`, was removed by a purge after the tool listed
    /// the log's files: the oldest segment left starts at `oldest` (exit 2, as the library's
    /// [`walcrypt::Error::Purged`] from a reader).
    pub fn purged(path: &Path, lsn: Lsn, oldest: Lsn) -> Fail {
        let e = walcrypt::Error::Purged {
            needed: lsn,
            oldest,
        };
        Fail {
            purged: Some(oldest),
            ..Fail::trouble(format!("segment {}: {e}", path.display()))
        }
    }

    /// Maps a library error: corruption is damage, everything else (I/O, keys, versions,
    /// missing logs) is trouble.
    pub fn from_wal(e: &walcrypt::Error) -> Fail {
        match e {
            walcrypt::Error::Purged { oldest, .. } => Fail {
                purged: Some(*oldest),
                ..Fail::trouble(one_line(&e.to_string()))
            },
            walcrypt::Error::Corrupt { .. } | walcrypt::Error::AuthenticationFailed { .. } => {
                Fail::damage(one_line(&e.to_string()))
            }
            _ => Fail::trouble(one_line(&e.to_string())),
        }
    }

    /// Like [`Fail::from_wal`], with the log, the key file and the key named in key errors.
    pub fn from_wal_with_keys(e: &walcrypt::Error, keys: &KeyContext<'_>) -> Fail {
        let mut fail = Fail::from_wal(e);
        if let Some(context) = keys.describe(e) {
            fail.message = format!("{context}: {}", fail.message);
        }
        fail
    }

    /// An I/O error on `path` while doing `what`.
    pub fn io(what: &str, path: &std::path::Path, e: &std::io::Error) -> Fail {
        Fail::trouble(format!("{what} {}: {e}", path.display()))
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<walcrypt::Error> for Fail {
    fn from(e: walcrypt::Error) -> Fail {
        Fail::from_wal(&e)
    }
}

/// What a tool knows about the keys it gave the library, to name them in key errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyContext<'a> {
    /// The log directory (or the segment file the user named).
    pub log: Option<&'a Path>,
    /// The key file or key store given with `--key-file`.
    pub key_file: Option<&'a Path>,
    /// The keys loaded from it, for the fingerprint of the key that did not match.
    pub ring: Option<&'a KeyRing>,
}

impl KeyContext<'_> {
    /// "log DIR, key file FILE (key id N, fingerprint F)" for a key error, or `None` for
    /// every other error. Only a data key's fingerprint is shown: data keys are random, so it
    /// names the key without revealing it.
    pub fn describe(&self, e: &walcrypt::Error) -> Option<String> {
        let key_id = match e {
            walcrypt::Error::WrongKey { key_id, .. }
            | walcrypt::Error::MissingSegmentKey { key_id, .. }
            | walcrypt::Error::MissingKey { key_id, .. } => *key_id,
            _ => return None,
        };
        let mut parts = Vec::new();
        if let Some(log) = self.log {
            parts.push(format!("log {}", log.display()));
        }
        match self.key_file {
            Some(file) => parts.push(format!("key file {}", file.display())),
            None => parts.push("no --key-file".to_string()),
        }
        let mut text = parts.join(", ");
        if let Some(key) = self.ring.and_then(|r| r.get(key_id)) {
            text.push_str(&format!(" ({})", key_identity(key_id, key)));
        }
        Some(text)
    }
}

/// A data key's identity as every tool shows it: its id and its fingerprint (the one
/// `wal-key list` shows).
pub fn key_identity(key_id: u32, key: &Key) -> String {
    format!("key id {key_id}, fingerprint {}", fingerprint(key))
}

/// A data key's fingerprint in hex.
pub fn fingerprint(key: &Key) -> String {
    key.fingerprint()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Output errors: a closed pipe ends the output quietly, anything else is trouble.
impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Fail {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Fail {
                code: EXIT_OK,
                message: String::new(),
                purged: None,
            }
        } else {
            Fail::trouble(format!("write output: {e}"))
        }
    }
}

/// Folds a message onto one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
