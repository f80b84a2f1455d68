//! [`SealedWriter`]: seals a file chunk by chunk as the caller writes it.
//!
//! A chunk is sealed once it is full *and* more data follows, so the chunk that `finish`
//! seals, with the last-chunk flag, is never empty unless the whole file is. Each chunk is
//! encrypted in place in the writer's one buffer (plaintext never copied elsewhere) and
//! written with its tag in one write.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zeroize::Zeroizing;

use super::layout::{
    CHUNK_TAG_LEN, ChunkPlan, FILE_ID_LEN, Header, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE,
    NONCE_PREFIX_LEN, SEALED_HEADER_LEN,
};
use super::stream::FileCipher;
use super::{SealedFiles, sealed_error};
use crate::error::{Error, Result, SealedFileProblem};
use crate::keys::KeyStore;
// The key files' own helpers: the same temporary names and directory as every key file.
use crate::keys::{parent_dir, temp_name};
use crate::storage::{Storage, StorageFile};

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// A write or sync failed: nothing more is sealed. Sealing the chunk again would encrypt
    /// its ciphertext (the buffer is encrypted in place) under the same nonce: a nonce reuse.
    Failed,
    Finished,
}

/// Writes a sealed file: implements [`io::Write`]; [`SealedWriter::finish`] is required.
///
/// Made by [`SealedFiles::create`] (straight into the file) or [`SealedFiles::replace`] (into
/// a temporary file renamed over the target at `finish`). Data is sealed in chunks as they
/// fill; `finish` seals the final chunk, marked as final, and makes the file durable. Without
/// `finish` the file never opens: [`SealedFiles::create`]'s file fails as truncated, and
/// [`SealedFiles::replace`]'s temporary file is removed when the writer is dropped.
///
/// [`io::Write::flush`] does nothing: a sealed file is durable only after `finish`.
pub struct SealedWriter {
    storage: Arc<dyn Storage>,
    file: Option<Box<dyn StorageFile>>,
    path: PathBuf,
    /// The temporary file being written, for an atomic replace.
    temp: Option<PathBuf>,
    cipher: FileCipher,
    header: [u8; SEALED_HEADER_LEN],
    key_id: u32,
    chunk_size: usize,
    /// The chunk being filled; capacity for its tag too, so it is never reallocated.
    buf: Zeroizing<Vec<u8>>,
    /// Index of the chunk being filled.
    index: u64,
    state: State,
    store: Option<Arc<KeyStore>>,
}

impl std::fmt::Debug for SealedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedWriter")
            .field("path", &self.path)
            .field("key_id", &self.key_id)
            .field("chunk", &self.index)
            .finish_non_exhaustive()
    }
}

impl SealedWriter {
    /// Creates a new sealed file at `path` under the active key of `keys`, in chunks of the
    /// default size (see [`SealedFiles::create`]).
    pub fn create(
        path: impl AsRef<Path>,
        keys: impl Into<super::FileKeys>,
    ) -> Result<SealedWriter> {
        SealedFiles::new(keys).create(path)
    }

    pub(super) fn start(files: &SealedFiles, path: &Path, atomic: bool) -> Result<SealedWriter> {
        let chunk_size = files.chunk_size;
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size) {
            return Err(Error::Config(format!(
                "sealed-file chunk size {chunk_size} is outside {MIN_CHUNK_SIZE} ..= {MAX_CHUNK_SIZE} bytes"
            )));
        }
        let (key_id, key) = files.keys.for_sealing()?;
        let mut random = Zeroizing::new([0u8; FILE_ID_LEN + NONCE_PREFIX_LEN]);
        getrandom::fill(&mut random[..]).map_err(|e| Error::RandomSource {
            what: "a sealed file's id and nonce prefix",
            reason: e.to_string(),
        })?;
        let mut file_id = [0u8; FILE_ID_LEN];
        file_id.copy_from_slice(&random[..FILE_ID_LEN]);
        let mut nonce_prefix = [0u8; NONCE_PREFIX_LEN];
        nonce_prefix.copy_from_slice(&random[FILE_ID_LEN..]);
        let cipher = FileCipher::new(&key, key_id, &file_id, nonce_prefix, path)?;
        let header = Header {
            key_id,
            chunk_size: chunk_size as u32,
            file_id,
            nonce_prefix,
            kcv: cipher.check_value(),
        }
        .encode();
        let target = if atomic {
            temp_name(path)?
        } else {
            path.to_path_buf()
        };
        let storage = files.storage.clone();
        let file = storage
            .create_private(&target)
            .map_err(|e| Error::io("create sealed file", &target, e))?;
        let mut writer = SealedWriter {
            storage,
            file: Some(file),
            path: path.to_path_buf(),
            temp: atomic.then_some(target.clone()),
            cipher,
            header,
            key_id,
            chunk_size,
            buf: Zeroizing::new(Vec::with_capacity(chunk_size + CHUNK_TAG_LEN)),
            index: 0,
            state: State::Open,
            store: files.keys.store(),
        };
        if let Err(e) = writer.write_at(&header, 0) {
            if !atomic {
                // Our own new file, holding not even a header: take it away again.
                let _ = writer.storage.remove(&target);
            }
            return Err(e);
        }
        Ok(writer)
    }

    /// The key id the file is sealed under.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The file this writer makes (for [`SealedFiles::replace`], the name it gets at `finish`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `data`, sealing and writing every chunk that fills up and is followed by more.
    pub(super) fn push(&mut self, mut data: &[u8]) -> Result<()> {
        self.check_open()?;
        while !data.is_empty() {
            if self.buf.len() == self.chunk_size {
                self.seal_chunk(false)?;
            }
            let take = (self.chunk_size - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        Ok(())
    }

    /// Seals the final chunk, fdatasyncs the file, renames it into place (for a replace) and
    /// syncs the directory. Only then is the file complete and durable. Sealed under a key
    /// store, it then checks that the key is still in the store (a rotation and a purge that
    /// retired it while the file was written would leave a file nobody can open) and fails,
    /// naming the key, if it is not: write the file again.
    pub fn finish(mut self) -> Result<()> {
        self.check_open()?;
        self.seal_chunk(true)?;
        let file = self.file.take();
        if let Some(file) = &file {
            let synced = file.sync_data();
            synced.map_err(|e| self.fail(Error::io("fdatasync sealed file", self.written(), e)))?;
        }
        drop(file);
        if let Some(temp) = &self.temp {
            let renamed = self.storage.rename(temp, &self.path);
            renamed.map_err(|e| self.fail(Error::io("rename sealed file into", &self.path, e)))?;
            self.temp = None;
        }
        self.state = State::Finished;
        let dir = parent_dir(&self.path);
        self.storage
            .sync_dir(&dir)
            .map_err(|e| Error::io("sync directory of sealed file", &dir, e))?;
        if let Some(store) = &self.store
            && !store.has_key(self.key_id)
        {
            return Err(Error::KeyStore {
                path: store.path().to_path_buf(),
                reason: format!(
                    "key id {} was retired while {} was being sealed under it; seal the file again",
                    self.key_id,
                    self.path.display()
                ),
            });
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        match self.state {
            State::Open => Ok(()),
            State::Failed | State::Finished => {
                Err(sealed_error(&self.path, SealedFileProblem::WriterFailed))
            }
        }
    }

    /// The file being written (the temporary one for a replace).
    fn written(&self) -> &Path {
        self.temp.as_deref().unwrap_or(&self.path)
    }

    fn fail(&mut self, e: Error) -> Error {
        self.state = State::Failed;
        e
    }

    /// Seals the buffer as chunk `index` in place and writes it with its tag.
    fn seal_chunk(&mut self, last: bool) -> Result<()> {
        let Ok(index) = u32::try_from(self.index) else {
            let e = sealed_error(&self.path, SealedFileProblem::TooLarge);
            return Err(self.fail(e));
        };
        let Some(tag) = self.cipher.seal(&self.header, index, last, &mut self.buf) else {
            let e = sealed_error(&self.path, SealedFileProblem::TooLarge);
            return Err(self.fail(e));
        };
        self.buf.extend_from_slice(&tag);
        let offset = ChunkPlan::offset(self.index, self.chunk_size as u32);
        let chunk = std::mem::take(&mut *self.buf);
        let written = self.write_at(&chunk, offset);
        *self.buf = chunk; // ciphertext: clearing it keeps the allocation for the next chunk
        self.buf.clear();
        written?;
        self.index += 1;
        Ok(())
    }

    fn write_at(&mut self, bytes: &[u8], offset: u64) -> Result<()> {
        let Some(file) = &self.file else {
            return Err(self.fail(sealed_error(&self.path, SealedFileProblem::WriterFailed)));
        };
        match file.write_all_at(bytes, offset) {
            Ok(()) => Ok(()),
            Err(e) => {
                let e = Error::io("write sealed file", self.written(), e);
                Err(self.fail(e))
            }
        }
    }
}

impl io::Write for SealedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.push(data).map_err(into_io)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SealedWriter {
    fn drop(&mut self) {
        if self.state != State::Finished
            && let Some(temp) = self.temp.take()
        {
            self.file = None;
            let _ = self.storage.remove(&temp);
        }
    }
}

/// An [`Error`] as an [`io::Error`] for the `Read` and `Write` impls: I/O errors keep their
/// kind, everything else is `InvalidData`; the walcrypt error is the inner error.
pub(super) fn into_io(e: Error) -> io::Error {
    let kind = match &e {
        Error::Io { source, .. } => source.kind(),
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, e)
}
