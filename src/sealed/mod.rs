//! Sealed files: the engine's other files (snapshots, checkpoints, manifests) encrypted and
//! authenticated under the log's data keys.
//!
//! * `layout`: the header and chunk layout (docs/FORMAT.md, "Sealed files"); pure.
//! * `stream`: the per-file key (HKDF from the data key and the file id) and the STREAM
//!   construction over AES-256-GCM.
//! * `writer`: [`SealedWriter`], chunks sealed as they fill, the last one at `finish`.
//! * `reader`: [`SealedReader`], chunks checked and decrypted as they are read.
//!
//! This module holds the entry points ([`SealedFiles`], [`seal_file`], [`open_file`]) and the
//! header scan that tells which key ids a directory of sealed files needs, which
//! `purge_before`'s key retirement consults (`Config::sealed_dirs`).

mod layout;
mod reader;
mod stream;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use layout::{
    CHUNK_TAG_LEN, DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, SEALED_HEADER_LEN,
    SEALED_MAGIC, SEALED_VERSION,
};
pub use reader::SealedReader;
pub use writer::SealedWriter;

use crate::error::{Error, Result, SealedFileProblem};
use crate::keys::{Key, KeyRing, KeyStore};
use crate::storage::{FsStorage, Storage};
use layout::{Header, HeaderError};

/// Where a sealed file's keys come from: a raw key ring or a key store.
///
/// New files are sealed under the active key; a file opens under any key the ring or store
/// still holds (decrypt-only keys included). A store that lacks a file's key id is read
/// again once ([`KeyStore::reload`]) before the open fails, as a follower does after a
/// rotation by another process.
#[derive(Clone, Debug)]
pub enum FileKeys {
    /// A raw key ring held by the caller.
    Ring(KeyRing),
    /// A key store; pass the same one the log uses, so rotation and retirement see one state.
    Store(Arc<KeyStore>),
}

impl From<KeyRing> for FileKeys {
    fn from(ring: KeyRing) -> FileKeys {
        FileKeys::Ring(ring)
    }
}

impl From<&KeyRing> for FileKeys {
    fn from(ring: &KeyRing) -> FileKeys {
        FileKeys::Ring(ring.clone())
    }
}

impl From<Arc<KeyStore>> for FileKeys {
    fn from(store: Arc<KeyStore>) -> FileKeys {
        FileKeys::Store(store)
    }
}

impl From<&Arc<KeyStore>> for FileKeys {
    fn from(store: &Arc<KeyStore>) -> FileKeys {
        FileKeys::Store(store.clone())
    }
}

impl FileKeys {
    /// The active key and its id. A store's newest generation must be durable first, as for a
    /// log that writes with it.
    fn for_sealing(&self) -> Result<(u32, Key)> {
        let ring = match self {
            FileKeys::Ring(ring) => ring.clone(),
            FileKeys::Store(store) => store.ring_for_writing()?,
        };
        ring.active_id()
            .and_then(|id| ring.get(id).map(|key| (id, key.clone())))
            .ok_or_else(|| {
                Error::Config("sealing a file needs a key: the key ring is empty".into())
            })
    }

    /// The key under `key_id`, if the ring or store holds it.
    fn for_opening(&self, key_id: u32) -> Result<Option<Key>> {
        match self {
            FileKeys::Ring(ring) => Ok(ring.get(key_id).cloned()),
            FileKeys::Store(store) => {
                if !store.has_key(key_id) {
                    store.reload()?;
                }
                Ok(store.ring().get(key_id).cloned())
            }
        }
    }

    fn store(&self) -> Option<Arc<KeyStore>> {
        match self {
            FileKeys::Ring(_) => None,
            FileKeys::Store(store) => Some(store.clone()),
        }
    }
}

/// Seals and opens files under the log's keys, through a [`Storage`] (the real file system by
/// default) with a chosen chunk size ([`DEFAULT_CHUNK_SIZE`], 64 KiB, by default).
///
/// ```
/// # fn main() -> walcrypt::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// use walcrypt::{KeyRing, SealedFiles};
/// let keys = KeyRing::generate()?;
/// let files = SealedFiles::new(&keys);
/// let path = dir.path().join("checkpoint");
/// files.write(&path, b"checkpoint at 0/1A2C0")?; // atomic: temp, fsync, rename, dir fsync
/// assert_eq!(files.read(&path)?, b"checkpoint at 0/1A2C0");
/// assert_eq!(walcrypt::sealed_key_id(&path)?, 1); // from the header, no key needed
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct SealedFiles {
    keys: FileKeys,
    storage: Arc<dyn Storage>,
    chunk_size: usize,
}

impl SealedFiles {
    /// Sealed files under `keys` (a `KeyRing` or an `Arc<KeyStore>`), on the real file system,
    /// in chunks of [`DEFAULT_CHUNK_SIZE`].
    pub fn new(keys: impl Into<FileKeys>) -> SealedFiles {
        SealedFiles {
            keys: keys.into(),
            storage: Arc::new(FsStorage),
            chunk_size: DEFAULT_CHUNK_SIZE,
        }
    }

    /// Does every file operation through `storage` (tests inject faults this way).
    pub fn storage(mut self, storage: Arc<dyn Storage>) -> SealedFiles {
        self.storage = storage;
        self
    }

    /// Plaintext bytes per chunk for files sealed from now on, from [`MIN_CHUNK_SIZE`] to
    /// [`MAX_CHUNK_SIZE`] (checked when a file is created). A file records its own chunk size,
    /// so files of any size open whatever this says.
    pub fn chunk_size(mut self, bytes: usize) -> SealedFiles {
        self.chunk_size = bytes;
        self
    }

    /// Creates a new sealed file at `path` (mode 0600; fails if something is there) and
    /// returns its writer. Chunks go straight into `path`: a writer dropped without
    /// [`SealedWriter::finish`] leaves a file that fails to open as truncated. Prefer
    /// [`SealedFiles::replace`] to write a file whole or not at all.
    pub fn create(&self, path: impl AsRef<Path>) -> Result<SealedWriter> {
        SealedWriter::start(self, path.as_ref(), false)
    }

    /// Writes a sealed file that replaces `path` atomically: the chunks go into a fresh
    /// temporary file beside it (mode 0600, created exclusively); [`SealedWriter::finish`]
    /// fsyncs it, renames it over `path` and fsyncs the directory. Until then `path` keeps its
    /// old contents; a writer dropped or failed removes its temporary file.
    pub fn replace(&self, path: impl AsRef<Path>) -> Result<SealedWriter> {
        SealedWriter::start(self, path.as_ref(), true)
    }

    /// Seals `bytes` into `path`, replacing it atomically (see [`SealedFiles::replace`]).
    pub fn write(&self, path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        let mut writer = self.replace(path)?;
        writer.push(bytes)?;
        writer.finish()
    }

    /// Opens the sealed file at `path` for reading (header and key checked now, each chunk
    /// as it is read).
    pub fn open(&self, path: impl AsRef<Path>) -> Result<SealedReader> {
        SealedReader::start(self, path.as_ref())
    }

    /// Opens, checks and decrypts the whole file: every chunk, through the final one, is
    /// authentic, or an error names the first that is not, and nothing is returned. The
    /// returned buffer is the caller's to wipe.
    pub fn read(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        self.open(path)?.read_all()
    }

    /// The key id the file at `path` is sealed under, from its header (no key needed).
    pub fn key_id(&self, path: impl AsRef<Path>) -> Result<u32> {
        read_header(self.storage.as_ref(), path.as_ref()).map(|(header, _)| header.key_id)
    }

    /// The key ids the sealed files directly in `dir` use, sorted, each once; other files
    /// are ignored. What `Config::sealed_dirs` makes key retirement consult.
    pub fn key_ids_in(&self, dir: impl AsRef<Path>) -> Result<Vec<u32>> {
        key_ids_in(self.storage.as_ref(), dir.as_ref())
    }
}

/// Seals `bytes` into `path` under the active key of `keys`, replacing the file atomically
/// (temporary file with mode 0600, fsync, rename, directory fsync).
pub fn seal_file(path: impl AsRef<Path>, bytes: &[u8], keys: impl Into<FileKeys>) -> Result<()> {
    SealedFiles::new(keys).write(path, bytes)
}

/// Opens the sealed file at `path` and returns its contents once every chunk, the final one
/// included, is authentic. The returned buffer is the caller's to wipe.
pub fn open_file(path: impl AsRef<Path>, keys: impl Into<FileKeys>) -> Result<Vec<u8>> {
    SealedFiles::new(keys).read(path)
}

/// The key id the sealed file at `path` is sealed under, read from its plaintext header.
pub fn sealed_key_id(path: impl AsRef<Path>) -> Result<u32> {
    read_header(&FsStorage, path.as_ref()).map(|(header, _)| header.key_id)
}

/// The key ids the sealed files directly in `dir` use (sorted, each once).
pub fn sealed_key_ids(dir: impl AsRef<Path>) -> Result<Vec<u32>> {
    key_ids_in(&FsStorage, dir.as_ref())
}

pub(crate) fn sealed_error(path: &Path, problem: SealedFileProblem) -> Error {
    Error::SealedFile {
        path: path.to_path_buf(),
        problem,
    }
}

fn header_error(path: &Path, e: HeaderError, len: u64) -> Error {
    let problem = match e {
        HeaderError::Short => SealedFileProblem::TruncatedHeader { len },
        HeaderError::BadMagic => SealedFileProblem::NotSealed,
        HeaderError::Version(found) => SealedFileProblem::UnsupportedVersion {
            found,
            supported: SEALED_VERSION,
        },
        HeaderError::Field(what) => SealedFileProblem::HeaderField(what),
    };
    sealed_error(path, problem)
}

/// Reads up to `buf.len()` bytes at `offset`, stopping early only at the end of the file.
pub(crate) fn read_full_at(
    file: &dyn crate::storage::StorageFile,
    buf: &mut [u8],
    offset: u64,
) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// Opens `path` and decodes its header; returns it with the header bytes and the open file.
fn read_header(storage: &dyn Storage, path: &Path) -> Result<(Header, HeaderRead)> {
    let file = storage
        .open(path, false)
        .map_err(|e| Error::io("open sealed file", path, e))?;
    let len = file
        .file_len()
        .map_err(|e| Error::io("stat sealed file", path, e))?;
    let mut bytes = [0u8; SEALED_HEADER_LEN];
    let got = read_full_at(file.as_ref(), &mut bytes, 0)
        .map_err(|e| Error::io("read sealed file header", path, e))?;
    let header = Header::decode(&bytes[..got]).map_err(|e| header_error(path, e, len))?;
    Ok((header, HeaderRead { bytes, file, len }))
}

/// What reading a header leaves: its bytes (the chunks' associated data), the open file and
/// the file's length when it was opened.
pub(crate) struct HeaderRead {
    pub bytes: [u8; SEALED_HEADER_LEN],
    pub file: Box<dyn crate::storage::StorageFile>,
    pub len: u64,
}

/// The key ids of the sealed files directly in `dir`. A file that does not start with the
/// magic (or is a prefix of it: a writer's file before its header) is not a sealed file and is
/// skipped, and so are subdirectories and files removed meanwhile; a file that starts with
/// the magic but whose header does not decode is an error, so that nothing is retired on a
/// guess.
pub(crate) fn key_ids_in(storage: &dyn Storage, dir: &Path) -> Result<Vec<u32>> {
    let names = storage
        .list(dir)
        .map_err(|e| Error::io("list sealed-file directory", dir, e))?;
    let mut ids = Vec::new();
    for name in names {
        let path: PathBuf = dir.join(name);
        match read_header(storage, &path) {
            Ok((header, _)) => ids.push(header.key_id),
            Err(Error::SealedFile {
                problem: SealedFileProblem::NotSealed,
                ..
            }) => {}
            Err(Error::SealedFile {
                problem: SealedFileProblem::TruncatedHeader { len },
                ..
            }) if len < SEALED_MAGIC.len() as u64 => {}
            Err(Error::Io { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory
                ) => {}
            Err(e) => return Err(e),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}
