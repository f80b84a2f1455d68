//! The tool's failure type: one line of text and the exit code it maps to.

use std::fmt;

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
}

impl Fail {
    /// A usage, key or I/O problem (exit 2).
    pub fn trouble(message: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_TROUBLE,
            message: message.into(),
        }
    }

    /// Damage in the log (exit 1).
    pub fn damage(message: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_DAMAGE,
            message: message.into(),
        }
    }

    /// Maps a library error: corruption is damage, everything else (I/O, keys, versions,
    /// missing logs) is trouble.
    pub fn from_wal(e: &walcrypt::Error) -> Fail {
        match e {
            walcrypt::Error::Corrupt { .. } | walcrypt::Error::AuthenticationFailed { .. } => {
                Fail::damage(one_line(&e.to_string()))
            }
            _ => Fail::trouble(one_line(&e.to_string())),
        }
    }

    /// Like [`Fail::from_wal`], with the key file named in key errors.
    pub fn from_wal_with_keys(e: &walcrypt::Error, key_file: Option<&std::path::Path>) -> Fail {
        let mut fail = Fail::from_wal(e);
        if let Some(path) = key_file
            && matches!(
                e,
                walcrypt::Error::WrongKey { .. }
                    | walcrypt::Error::MissingKey(_)
                    | walcrypt::Error::MissingSegmentKey { .. }
            )
        {
            fail.message = format!("key file {}: {}", path.display(), fail.message);
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

/// Output errors: a closed pipe ends the output quietly, anything else is trouble.
impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Fail {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Fail {
                code: EXIT_OK,
                message: String::new(),
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
