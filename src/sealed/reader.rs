//! [`SealedReader`]: opens a sealed file, checks its header and key, then checks and decrypts
//! one chunk at a time as the caller reads.

use std::io;
use std::path::{Path, PathBuf};

use zeroize::{Zeroize, Zeroizing};

use super::layout::{CHUNK_TAG_LEN, ChunkPlan, Header, SEALED_HEADER_LEN};
use super::stream::FileCipher;
use super::writer::into_io;
use super::{SealedFiles, read_full_at, read_header, sealed_error};
use crate::error::{Error, Result, SealedFileProblem};
use crate::storage::StorageFile;

/// Reads a sealed file: implements [`io::Read`].
///
/// Each chunk is returned only after its tag checks, so every byte read is authentic and in
/// its place. A file cut after a chunk boundary is detected when the reader reaches its end
/// (the last chunk present is not marked final): the bytes read before that error are
/// authentic but not the whole file. [`SealedFiles::read`] / [`crate::open_file`] return
/// nothing unless the whole file checks.
///
/// Errors from [`io::Read::read`] carry the walcrypt [`Error`] as their inner error
/// (`InvalidData` unless it is an I/O error), naming the file, the chunk and its offset.
pub struct SealedReader {
    file: Box<dyn StorageFile>,
    path: PathBuf,
    header_bytes: [u8; SEALED_HEADER_LEN],
    header: Header,
    cipher: FileCipher,
    plan: ChunkPlan,
    /// Index of the next chunk to load.
    next: u64,
    /// The plaintext of the chunk last loaded; capacity for a whole stored chunk, so it is
    /// never reallocated (and wiped on drop, spare capacity included).
    buf: Zeroizing<Vec<u8>>,
    /// How much of `buf` was returned.
    pos: usize,
}

impl std::fmt::Debug for SealedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedReader")
            .field("path", &self.path)
            .field("key_id", &self.header.key_id)
            .field("chunks", &self.plan.chunks)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl SealedReader {
    /// Opens the sealed file at `path` with `keys` (see [`SealedFiles::open`]).
    pub fn open(path: impl AsRef<Path>, keys: impl Into<super::FileKeys>) -> Result<SealedReader> {
        SealedFiles::new(keys).open(path)
    }

    pub(super) fn start(files: &SealedFiles, path: &Path) -> Result<SealedReader> {
        let (header, read) = read_header(files.storage.as_ref(), path)?;
        let key_id = header.key_id;
        let key = files
            .keys
            .for_opening(key_id)?
            .ok_or_else(|| sealed_error(path, SealedFileProblem::MissingKey { key_id }))?;
        let cipher = FileCipher::new(&key, key_id, &header.file_id, header.nonce_prefix, path)?;
        if cipher.check_value() != header.kcv {
            return Err(sealed_error(path, SealedFileProblem::WrongKey { key_id }));
        }
        let body = read.len.saturating_sub(SEALED_HEADER_LEN as u64);
        let plan = ChunkPlan::of(body, header.chunk_size).ok_or_else(|| {
            let offset = SEALED_HEADER_LEN as u64;
            sealed_error(path, SealedFileProblem::Truncated { chunks: 0, offset })
        })?;
        if plan.chunks > u64::from(u32::MAX) + 1 {
            return Err(sealed_error(path, SealedFileProblem::TooLarge));
        }
        if plan.last_len < CHUNK_TAG_LEN as u64 {
            let chunk = plan.chunks - 1;
            let offset = ChunkPlan::offset(chunk, header.chunk_size);
            return Err(sealed_error(
                path,
                SealedFileProblem::ShortChunk { chunk, offset },
            ));
        }
        // One stored chunk, but never more than the file holds: a hostile chunk size in a
        // small file allocates nothing beyond the file's own length.
        let stored = match plan.chunks {
            1 => plan.last_len as usize,
            _ => header.chunk_size as usize + CHUNK_TAG_LEN,
        };
        Ok(SealedReader {
            file: read.file,
            path: path.to_path_buf(),
            header_bytes: read.bytes,
            header,
            cipher,
            plan,
            next: 0,
            buf: Zeroizing::new(Vec::with_capacity(stored)),
            pos: 0,
        })
    }

    /// The key id the file is sealed under.
    pub fn key_id(&self) -> u32 {
        self.header.key_id
    }

    /// The plaintext length the file's size implies (checked only as the chunks are read).
    pub fn len_hint(&self) -> u64 {
        (self.plan.chunks - 1) * u64::from(self.header.chunk_size) + self.plan.last_len
            - CHUNK_TAG_LEN as u64
    }

    /// Reads into `out`; `Ok(0)` only after the final chunk checked.
    fn read_some(&mut self, out: &mut [u8]) -> Result<usize> {
        loop {
            if self.pos < self.buf.len() {
                let n = (self.buf.len() - self.pos).min(out.len());
                out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if self.next == self.plan.chunks || out.is_empty() {
                return Ok(0);
            }
            self.load(self.next)?;
        }
    }

    /// Reads, checks and decrypts chunk `index` into `buf`. On failure `buf` is left empty
    /// and `next` unchanged, so a later read fails the same way.
    fn load(&mut self, index: u64) -> Result<()> {
        self.buf.zeroize();
        self.pos = 0;
        let chunk_size = self.header.chunk_size;
        let offset = ChunkPlan::offset(index, chunk_size);
        let last = index + 1 == self.plan.chunks;
        let stored = if last {
            self.plan.last_len as usize
        } else {
            chunk_size as usize + CHUNK_TAG_LEN
        };
        self.buf.resize(stored, 0);
        let got = read_full_at(self.file.as_ref(), &mut self.buf, offset)
            .map_err(|e| Error::io("read sealed file", &self.path, e))?;
        if got < stored {
            // The file shrank since it was opened.
            self.buf.zeroize();
            let offset = offset + got as u64;
            let chunks = index;
            return Err(sealed_error(
                &self.path,
                SealedFileProblem::Truncated { chunks, offset },
            ));
        }
        let mut tag = [0u8; CHUNK_TAG_LEN];
        tag.copy_from_slice(&self.buf[stored - CHUNK_TAG_LEN..]);
        self.buf.truncate(stored - CHUNK_TAG_LEN);
        // Chunk indices fit: `start` refused files of more than 2^32 chunks.
        let at = u32::try_from(index).unwrap_or(u32::MAX);
        if self
            .cipher
            .open(&self.header_bytes, at, last, &mut self.buf, &tag)
        {
            self.next = index + 1;
            return Ok(());
        }
        // Authentic as a chunk that is not the final one: chunks after it were cut away. A
        // failed open zeroes what it was given, so the ciphertext is read again for this look.
        let cut = last && self.authentic_as_inner(index, offset, &tag)?;
        self.buf.zeroize();
        let problem = if cut {
            let chunks = index + 1;
            let offset = offset + stored as u64;
            SealedFileProblem::Truncated { chunks, offset }
        } else {
            let key_id = self.header.key_id;
            SealedFileProblem::AuthenticationFailed {
                chunk: index,
                offset,
                key_id,
            }
        };
        Err(sealed_error(&self.path, problem))
    }

    /// Whether the final chunk `index` at `offset`, whose tag is `tag`, is authentic as a chunk
    /// that is not the final one: read again (its bytes were zeroed by the failed open) into
    /// `buf`, which is left holding either its plaintext or zeros.
    fn authentic_as_inner(
        &mut self,
        index: u64,
        offset: u64,
        tag: &[u8; CHUNK_TAG_LEN],
    ) -> Result<bool> {
        let len = self.buf.len();
        let got = read_full_at(self.file.as_ref(), &mut self.buf, offset)
            .map_err(|e| Error::io("read sealed file", &self.path, e))?;
        let at = u32::try_from(index).unwrap_or(u32::MAX);
        Ok(got == len
            && self
                .cipher
                .open(&self.header_bytes, at, false, &mut self.buf, tag))
    }

    /// Reads the rest of the file into a buffer sized once (never reallocated, so no copy of
    /// the plaintext is left in freed memory), checking that the final chunk ends it.
    pub(super) fn read_all(mut self) -> Result<Vec<u8>> {
        let len = usize::try_from(self.len_hint())
            .map_err(|_| sealed_error(&self.path, SealedFileProblem::TooLarge))?;
        let mut out = Zeroizing::new(vec![0u8; len]);
        let mut done = 0;
        while done < len {
            match self.read_some(&mut out[done..])? {
                0 => break,
                n => done += n,
            }
        }
        // Only the final chunk of an empty file holds no byte to read: check it too.
        while self.next < self.plan.chunks && self.buf.len() == self.pos {
            self.load(self.next)?;
        }
        // The final chunk checked and nothing follows it (the plan ends there).
        if done != len || self.next != self.plan.chunks || self.pos != self.buf.len() {
            let offset = ChunkPlan::offset(self.next, self.header.chunk_size);
            let chunks = self.next;
            return Err(sealed_error(
                &self.path,
                SealedFileProblem::Truncated { chunks, offset },
            ));
        }
        Ok(std::mem::take(&mut *out))
    }
}

impl io::Read for SealedReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.read_some(out).map_err(into_io)
    }
}
