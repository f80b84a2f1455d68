//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::Lsn;
pub use crate::format::CorruptionKind;

/// Result alias used throughout walcrypt.
pub type Result<T> = std::result::Result<T, Error>;

/// Where in the log something went wrong.
///
/// `segment` is the start LSN of the segment file (its name), `offset` the byte offset inside
/// that file and `lsn` the log position of the record or page being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Start LSN of the segment file, which is also its file name.
    pub segment: Lsn,
    /// Byte offset inside the segment file.
    pub offset: u64,
    /// Log position of the record (or page) that was being read.
    pub lsn: Lsn,
}

impl Position {
    /// Where the record or page at `lsn` is in a log of geometry `geo`.
    pub(crate) fn of(geo: &crate::format::Geometry, lsn: crate::Lsn) -> Position {
        let segment = geo.segment_start(lsn);
        Position {
            segment,
            offset: lsn - segment,
            lsn,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "segment {} offset {} (lsn {})",
            crate::format::segment_file_name(self.segment),
            self.offset,
            self.lsn
        )
    }
}

/// What is wrong with a sealed file (see [`Error::SealedFile`]). Chunks are numbered from 0;
/// `offset` is the byte offset of the chunk in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SealedFileProblem {
    /// The file does not start with the sealed-file magic.
    NotSealed,
    /// The file is shorter than a sealed file's header.
    TruncatedHeader {
        /// The file's length.
        len: u64,
    },
    /// The header names a format version this build does not read.
    UnsupportedVersion {
        /// Version found in the file.
        found: u32,
        /// The only version this build reads and writes.
        supported: u32,
    },
    /// A header field holds a value the format does not allow.
    HeaderField(&'static str),
    /// The file is sealed under a key id the key ring or store lacks.
    MissingKey {
        /// The key id the header names.
        key_id: u32,
    },
    /// The key under the header's key id does not match the header's check value: another key
    /// under that id, or a damaged header.
    WrongKey {
        /// The key id the header names.
        key_id: u32,
    },
    /// The file ends after `chunks` chunks, none of them marked final: chunks were cut from
    /// its end, or its writer never called `finish`.
    Truncated {
        /// Chunks present (the last of them authentic, but not final).
        chunks: u64,
        /// Where the file ends.
        offset: u64,
    },
    /// The last chunk is shorter than its tag: the file was cut inside it.
    ShortChunk {
        /// The chunk's index.
        chunk: u64,
        /// Where it starts.
        offset: u64,
    },
    /// A chunk failed its tag check: it was altered, moved, duplicated, taken from another
    /// file, or the header was. Its bytes are never returned.
    AuthenticationFailed {
        /// The chunk's index.
        chunk: u64,
        /// Where it starts.
        offset: u64,
        /// The key id the header names.
        key_id: u32,
    },
    /// The file would need more than 2^32 chunks.
    TooLarge,
    /// An earlier write or sync of this writer failed; it seals nothing more (sealing the
    /// chunk again would reuse its nonce).
    WriterFailed,
}

impl fmt::Display for SealedFileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotSealed => write!(f, "not a sealed file (bad magic)"),
            Self::TruncatedHeader { len } => write!(
                f,
                "file of {len} bytes is shorter than a sealed file's header (cut short?)"
            ),
            Self::UnsupportedVersion { found, supported } => write!(
                f,
                "sealed-file format version {found} is not supported (this build reads version \
                 {supported})"
            ),
            Self::HeaderField(what) => write!(f, "invalid header field: {what}"),
            Self::MissingKey { key_id } => {
                write!(f, "sealed under key id {key_id}, which the key ring lacks")
            }
            Self::WrongKey { key_id } => write!(
                f,
                "wrong key for key id {key_id}: it does not match the header's check value \
                 (another key under that id, or a damaged header)"
            ),
            Self::Truncated { chunks, offset } => write!(
                f,
                "ends at offset {offset} after {chunks} chunks, none of them the final one \
                 (cut short, or its writer never finished)"
            ),
            Self::ShortChunk { chunk, offset } => write!(
                f,
                "chunk {chunk} at offset {offset} is shorter than its tag (cut short)"
            ),
            Self::AuthenticationFailed {
                chunk,
                offset,
                key_id,
            } => write!(
                f,
                "chunk {chunk} at offset {offset} failed authentication under key id {key_id} \
                 (altered, reordered, duplicated, cut, or from another file; contents withheld)"
            ),
            Self::TooLarge => write!(f, "file too large: more than 2^32 chunks"),
            Self::WriterFailed => write!(
                f,
                "an earlier write of this sealed file failed; the writer seals nothing more"
            ),
        }
    }
}

/// Why a log was poisoned: the I/O operation that failed, on which file, and how.
///
/// Kept structured (rather than as a message) so an embedder can tell, for example, a full disk
/// ([`io::ErrorKind::StorageFull`]) from a failing device without parsing text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoisonCause {
    /// What walcrypt was doing (`"fdatasync segment"`, `"write segment"`, ...).
    pub op: &'static str,
    /// The file or directory involved.
    pub path: PathBuf,
    /// The operating system's error kind.
    pub kind: io::ErrorKind,
    /// The operating system's error message.
    pub message: String,
}

impl PoisonCause {
    /// The cause recorded for `error`; errors other than I/O keep their message and report
    /// [`io::ErrorKind::Other`].
    pub(crate) fn of(error: &Error) -> PoisonCause {
        match error {
            Error::Io { op, path, source } => PoisonCause {
                op,
                path: path.clone(),
                kind: source.kind(),
                message: source.to_string(),
            },
            other => PoisonCause {
                op: "write the log",
                path: PathBuf::new(),
                kind: io::ErrorKind::Other,
                message: other.to_string(),
            },
        }
    }
}

impl fmt::Display for PoisonCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.as_os_str().is_empty() {
            write!(f, "{}: {}", self.op, self.message)
        } else {
            write!(f, "{} {}: {}", self.op, self.path.display(), self.message)
        }
    }
}

impl std::error::Error for PoisonCause {}

/// Every error walcrypt returns.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed; `path` names the file or directory.
    Io {
        /// What walcrypt was doing.
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The log is damaged at `at`. Records before that position are intact.
    Corrupt {
        /// Where the damage is.
        at: Position,
        /// What is wrong.
        kind: CorruptionKind,
    },
    /// An authenticated record (mode `perrecord-gcm`) failed its tag check although its
    /// checksum matched: it was altered, moved to another position, replayed from older log,
    /// or copied from another log. Its payload is never returned.
    AuthenticationFailed {
        /// Where the record is.
        at: Position,
        /// The key id its header names.
        key_id: u32,
    },
    /// A segment was written by a format version this build does not read.
    UnsupportedVersion {
        /// The segment file.
        path: PathBuf,
        /// Version found in the file.
        found: u32,
        /// Newest version this build reads, the one it writes. It also reads every version
        /// from [`crate::inspect::OLDEST_READ_VERSION`] on.
        supported: u32,
    },
    /// A key in the ring does not match the key check value recorded in the log for its id.
    WrongKey {
        /// The key id whose check value did not match.
        key_id: u32,
        /// The segment whose header recorded the check value.
        segment: Lsn,
    },
    /// The log uses a key id the key ring does not contain (or no key ring was given).
    MissingKey {
        /// The key id the record, page or control file names.
        key_id: u32,
        /// Where the record or page sealed under it is; `None` where no log position applies
        /// (a checkpoint's metadata in the control file, a key looked up by id).
        at: Option<Position>,
        /// True when the reader is a follower made with [`crate::Follower::attach`] whose `Wal`
        /// has been closed or dropped, of a log without a key store: it took its keys from that
        /// `Wal`, has nowhere left to take new ones from, and only
        /// [`crate::Follower::set_keys`] gives it the key. False for every other reader.
        attached_wal_gone: bool,
    },
    /// A segment lists a key id the key ring or store given to [`crate::Wal::open`] lacks, or
    /// (met by the writer later, at a segment switch) none of the ids it lists is among the
    /// log's current keys with the check value the segment records.
    MissingSegmentKey {
        /// The key id the segment's header lists.
        key_id: u32,
        /// The segment whose header lists it.
        segment: Lsn,
    },
    /// A key file or key ring is malformed.
    KeyFile {
        /// The key file (empty when the ring was not loaded from a file).
        path: PathBuf,
        /// Line number (1-based), 0 when not tied to a line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A key store file is malformed, damaged, or does not fit its provider.
    KeyStore {
        /// The key store file.
        path: PathBuf,
        /// What is wrong (never key material).
        reason: String,
    },
    /// A key provider (KEK file, command, KMS) failed. Never carries key material or a
    /// command's output.
    KeyProvider {
        /// The provider, as it names itself (`kek file /etc/wal.kek`, `command /usr/bin/kms`).
        provider: String,
        /// What went wrong.
        reason: String,
    },
    /// A write-out, flush, purge or rotation came from another process than the one that
    /// opened the log (a forked child): its IVs would repeat the opener's, so it is refused.
    ForeignProcess {
        /// Process id that opened the log.
        opener: u32,
        /// Process id that tried to write.
        caller: u32,
    },
    /// The configuration cannot be used.
    Config(String),
    /// A call was refused because of its arguments, or because this log cannot do what it
    /// asks (a plaintext log has no keys to rotate): nothing was changed. The call can be made
    /// again with other arguments; the log is as it was.
    InvalidArgument {
        /// The call (`"checkpoint"`, `"hold"`, `"rotate_data_key"`, ...).
        op: &'static str,
        /// What is wrong, and what would do.
        reason: String,
    },
    /// The log on disk was created with another mode or geometry than the configuration asks for.
    Mismatch {
        /// Which setting differs.
        what: &'static str,
        /// Value on disk.
        on_disk: String,
        /// Value in the configuration.
        configured: String,
    },
    /// Another process (or another `Wal` in this process) holds the log directory open for writing.
    Locked(PathBuf),
    /// An earlier write or fsync failed; the log refuses further work until it is reopened.
    ///
    /// After a failed fsync the kernel may have dropped the dirty pages, so retrying the fsync
    /// and reporting success could lose acknowledged data. Reopening re-reads what is durable.
    /// The cause names the failed operation, its file and the operating system's error kind.
    Poisoned(PoisonCause),
    /// The operating system's random source failed, so no key, IV prefix or log id could be
    /// drawn. Nothing was written with a weaker value.
    RandomSource {
        /// What was being drawn (`"a key"`, `"an IV prefix"`, `"a log id"`).
        what: &'static str,
        /// The random source's own description of the failure.
        reason: String,
    },
    /// The cipher library could not set up a key's state (AWS-LC refuses only when it cannot
    /// allocate it). Nothing was sealed or opened with that key.
    CipherSetup {
        /// Which key, of what (`"working key 2 of log 5f3a…"`, `"the key of sealed file
        /// /data/x.sealed (key id 1)"`, ...).
        what: String,
    },
    /// The record is larger than the format allows.
    RecordTooLarge {
        /// Payload length asked for.
        len: usize,
        /// The largest payload a record can carry.
        max: usize,
    },
    /// The requested LSN is not in the log: beyond its end. The log ends at or before `end`:
    /// for a call on a `Wal`, `end` is its `end_lsn()` when the call looked; for a reader or
    /// follower, the farthest position the files it listed could hold (the end of the last
    /// segment file, which may be one prepared ahead, plus one segment), usually well past the
    /// last record: finding the log's real end would mean reading its tail.
    LsnNotAvailable {
        /// The position asked for.
        lsn: Lsn,
        /// A position the log does not reach past.
        end: Lsn,
    },
    /// The requested LSN lies inside the log but no record starts there.
    NotRecordStart(Lsn),
    /// The log was shut down ([`crate::Wal::shutdown`]); it takes no more calls.
    Closed(PathBuf),
    /// The control file (the engine's last checkpoint and the log's retention holds) is
    /// damaged, belongs to another log, or its checkpoint failed authentication.
    Control {
        /// The control file.
        path: PathBuf,
        /// What is wrong (never key material).
        reason: String,
    },
    /// A position a reader, follower or hold asked for lies before the oldest segment left:
    /// a purge removed it. A replica that needed it must be rebuilt from a snapshot.
    Purged {
        /// The position asked for.
        needed: Lsn,
        /// Where the oldest segment left starts.
        oldest: Lsn,
    },
    /// A replay was asked to start from a checkpoint beyond the end of the log: the log is
    /// shorter than the engine's checkpoint says (files lost, an older copy restored, another
    /// directory), or there is no log at all. Nothing was created, truncated or replayed: a
    /// new log there would hand out positions below the checkpoint.
    CheckpointBeyondEnd {
        /// The log directory.
        dir: PathBuf,
        /// The position the replay was asked to start from.
        checkpoint: Lsn,
        /// Where the log ends; `None` when the directory holds no log.
        end: Option<Lsn>,
    },
    /// The directory holds no walcrypt log.
    NoLog(PathBuf),
    /// A sealed file (see `walcrypt::SealedFiles`) cannot be written or opened.
    SealedFile {
        /// The sealed file.
        path: PathBuf,
        /// What is wrong.
        problem: SealedFileProblem,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            Self::Corrupt { at, kind } => write!(f, "{at}: {kind}"),
            Self::AuthenticationFailed { at, key_id } => write!(
                f,
                "{at}: record failed authentication under key id {key_id} \
                 (altered, moved, replayed or from another log; payload withheld)"
            ),
            Self::UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{}: format version {found} is not supported (this build reads versions {} to \
                 {supported})",
                path.display(),
                crate::format::OLDEST_READ_VERSION
            ),
            Self::WrongKey { key_id, segment } => write!(
                f,
                "wrong key for key id {key_id}: it does not match the key the log in segment {} \
                 was written with (the log's check value for that id differs); check that the \
                 key file or store is this log's",
                crate::format::segment_file_name(*segment)
            ),
            Self::InvalidArgument { op, reason } => write!(f, "{op}: {reason}"),
            Self::MissingKey {
                key_id,
                at,
                attached_wal_gone: true,
            } => {
                match at {
                    Some(at) => write!(
                        f,
                        "the record or page at {at} is sealed under key id {key_id}, "
                    )?,
                    None => write!(f, "the log needs key id {key_id}, ")?,
                }
                write!(
                    f,
                    "which this follower's keys lack: it took its keys from the Wal it was \
                     attached to (Follower::attach), that Wal is closed or dropped, and the log \
                     has no key store to read new keys from; give it a key ring holding the key \
                     with Follower::set_keys"
                )
            }
            Self::MissingKey {
                key_id, at: None, ..
            } => write!(
                f,
                "the log needs key id {key_id}, which the key ring lacks; give the key file \
                 or store that holds it"
            ),
            Self::MissingKey {
                key_id,
                at: Some(at),
                ..
            } => write!(
                f,
                "the record or page at {at} is sealed under key id {key_id}, which the key \
                 ring lacks; give the key file or store that holds it"
            ),
            Self::MissingSegmentKey { key_id, segment } => write!(
                f,
                "segment {} lists key id {key_id}, which the key ring lacks; give the key file \
                 or store that holds it",
                crate::format::segment_file_name(*segment)
            ),
            Self::KeyFile { path, line, reason } => {
                if *line > 0 {
                    write!(f, "key file {} line {line}: {reason}", path.display())
                } else {
                    write!(f, "key file {}: {reason}", path.display())
                }
            }
            Self::KeyStore { path, reason } => {
                write!(f, "key store {}: {reason}", path.display())
            }
            Self::KeyProvider { provider, reason } => {
                write!(f, "key provider {provider}: {reason}")
            }
            Self::ForeignProcess { opener, caller } => write!(
                f,
                "write from process {caller} refused: the log was opened by process {opener} \
                 (a forked writer would repeat its IVs); open the log in this process"
            ),
            Self::Config(why) => write!(f, "invalid configuration: {why}"),
            Self::Mismatch {
                what,
                on_disk,
                configured,
            } => write!(
                f,
                "the log on disk has {what} {on_disk}, the configuration asks for {configured}"
            ),
            Self::Locked(path) => write!(
                f,
                "log directory {} is already open for writing by another Wal",
                path.display()
            ),
            Self::Poisoned(cause) => write!(
                f,
                "the log refuses further work after an earlier I/O failure ({cause}); reopen it"
            ),
            Self::RandomSource { what, reason } => write!(
                f,
                "the operating system's random source failed while drawing {what}: {reason}"
            ),
            Self::CipherSetup { what } => {
                write!(f, "the AES-GCM state of {what} could not be set up")
            }
            Self::RecordTooLarge { len, max } => {
                write!(
                    f,
                    "record payload of {len} bytes exceeds the maximum of {max}"
                )
            }
            Self::LsnNotAvailable { lsn, end } => {
                write!(
                    f,
                    "lsn {lsn} is not in the log: the log ends at or before {end}"
                )
            }
            Self::NotRecordStart(lsn) => write!(f, "no record starts at lsn {lsn}"),
            Self::NoLog(path) => write!(f, "{} holds no walcrypt log", path.display()),
            Self::Closed(dir) => write!(f, "the log in {} was shut down", dir.display()),
            Self::Control { path, reason } => {
                write!(f, "control file {}: {reason}", path.display())
            }
            Self::Purged { needed, oldest } => write!(
                f,
                "lsn {needed} was purged: the oldest segment left starts at {oldest}"
            ),
            Self::SealedFile { path, problem } => {
                write!(f, "sealed file {}: {problem}", path.display())
            }
            Self::CheckpointBeyondEnd {
                dir,
                checkpoint,
                end: Some(end),
            } => write!(
                f,
                "checkpoint at lsn {checkpoint} lies beyond the end of the log in {} \
                 (it ends at lsn {end})",
                dir.display()
            ),
            Self::CheckpointBeyondEnd {
                dir,
                checkpoint,
                end: None,
            } => write!(
                f,
                "checkpoint at lsn {checkpoint}, but {} holds no log (a new one would start \
                 below the checkpoint)",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Poisoned(cause) => Some(cause),
            _ => None,
        }
    }
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A key id the key ring lacks, at no position yet ([`Error::located`] adds one).
    pub(crate) fn missing_key(key_id: u32) -> Self {
        Self::MissingKey {
            key_id,
            at: None,
            attached_wal_gone: false,
        }
    }

    /// Says where: a [`Error::MissingKey`] without a position gets `at`; other errors pass.
    pub(crate) fn located(self, at: Position) -> Self {
        match self {
            Self::MissingKey {
                key_id,
                at: None,
                attached_wal_gone,
            } => Self::MissingKey {
                key_id,
                at: Some(at),
                attached_wal_gone,
            },
            other => other,
        }
    }

    pub(crate) fn corrupt(segment: Lsn, offset: u64, lsn: Lsn, kind: CorruptionKind) -> Self {
        Self::Corrupt {
            at: Position {
                segment,
                offset,
                lsn,
            },
            kind,
        }
    }
}
