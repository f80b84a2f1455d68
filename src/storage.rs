//! The small file-system interface the log uses, so tests can inject faults.
//!
//! [`FsStorage`] is the real file system. Every path is a directory plus a file name; the log
//! never needs more than these operations.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// An open segment file.
pub trait StorageFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes written data durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// Sets the file length; new bytes read as zeros.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Current file length.
    fn file_len(&self) -> io::Result<u64>;
    /// Writes `len` zero bytes at `offset`, so the file system allocates those blocks now (a
    /// later fdatasync that reaches them then commits no allocation, and a full disk shows
    /// here). Called only over bytes that read as zeros already (a new file, the end of a file
    /// cut short), so a storage may treat it as allocation alone; bytes that may hold data are
    /// zeroed with [`write_zeros`]. The default is [`write_zeros`].
    fn fill_zeros(&self, offset: u64, len: u64) -> io::Result<()> {
        write_zeros(self, offset, len)
    }
}

/// The most a key or KEK file may hold: far more than any ring of keys needs, and a bound on
/// what a file put in its place makes the library read.
pub(crate) const MAX_KEY_FILE: u64 = 16 << 20;

/// Reads a small file whole (a key file, a KEK file): opened non-blocking and refused unless
/// it is a regular file of at most `limit` bytes, so a FIFO put in its place is an error, not
/// a wait, and a huge file is not read. The buffer is sized once, so no partial copy of the
/// contents is left in a freed allocation; the caller wipes it.
pub(crate) fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = open_regular(OpenOptions::new().read(true), path)?;
    let meta = file.metadata()?;
    if meta.len() > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} bytes, more than the {limit} a key file may hold",
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut file).take(meta.len()).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Opens `path` with `options`, non-blocking, and refuses anything but a regular file: a FIFO
/// (or a device) put under a log file's or key file's name is an error, not a wait for a
/// writer on the pipe; a directory is `IsADirectory`. The flag changes nothing for a regular
/// file's reads and writes.
fn open_regular(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = options
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_dir() {
        return Err(io::Error::new(io::ErrorKind::IsADirectory, "a directory"));
    }
    if !kind.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Reads as much of `buf` as the file holds at `offset`.
pub(crate) fn read_full(file: &dyn StorageFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// Writes `len` zero bytes at `offset` of `file` through [`StorageFile::write_all_at`], in
/// 1 MiB pieces.
pub fn write_zeros<F: StorageFile + ?Sized>(file: &F, offset: u64, len: u64) -> io::Result<()> {
    const PIECE: u64 = 1 << 20;
    let zeros = vec![0u8; PIECE.min(len) as usize];
    let mut done = 0;
    while done < len {
        let n = PIECE.min(len - done);
        file.write_all_at(&zeros[..n as usize], offset + done)?;
        done += n;
    }
    Ok(())
}

/// A directory of segment files.
pub trait Storage: Send + Sync {
    /// Names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens an existing file for reading (and writing when `write`).
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>>;
    /// Creates a new file that must not exist yet, for writing. The real file system makes it
    /// readable and writable by its owner only (mode 0600), whatever the umask.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Creates a new file readable by its owner only (mode 0600), for key files. The default
    /// calls [`Storage::create_new`]; the real file system sets the mode on the handle.
    fn create_private(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.create_new(path)
    }
    /// Renames a file (atomically replacing `to`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates the directory (and parents) if missing. The real file system makes each new
    /// directory accessible to its owner only (mode 0700), whatever the umask.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether `path` exists. The log asks before creating its directory, to learn which new
    /// directory entries it must make durable.
    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }
    /// Takes an exclusive lock on the directory for one writer; dropping the guard releases it.
    /// `Ok(None)` means another writer holds it.
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>>;
    /// Renames `from` to `to` unless `to` exists, in which case it fails with
    /// [`io::ErrorKind::AlreadyExists`] and leaves both alone. A key store is created this way,
    /// so two processes creating the same store never both succeed. The default asks
    /// [`Storage::exists`] and then renames, which two racing callers can both pass; the real
    /// file system links the new name (which fails if it exists) and then removes the old one.
    fn rename_no_replace(&self, from: &Path, to: &Path) -> io::Result<()> {
        if self.exists(to)? {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", to.display()),
            ));
        }
        self.rename(from, to)
    }
    /// Takes an exclusive lock on the file at `path` (created empty, mode 0600, if missing),
    /// waiting while another process or handle holds it; dropping the guard releases it. A key
    /// store holds it while it writes a new generation. `Ok(None)` means this storage cannot
    /// lock files (the default): writers are then serialized only by the store's generation
    /// check, and leftover temporary files are never removed.
    fn lock_file(&self, path: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        let _ = path;
        Ok(None)
    }
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsStorage;

/// Name of the lock file in a log directory.
pub const LOCK_FILE: &str = "LOCK";

struct FsFile(File);

impl StorageFile for FsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        loop {
            match self.0.read_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn file_len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Storage for FsStorage {
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Box<dyn StorageFile>> {
        // A FIFO under a segment's or the control file's name would block the open, a reader
        // or wal-dump forever.
        let file = open_regular(OpenOptions::new().read(true).write(write), path)?;
        Ok(Box::new(FsFile(file)))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        // 0600 whatever the umask (which only removes bits): segments hold the log.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        Ok(Box::new(FsFile(file)))
    }
    fn create_private(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // create_new: never through a symlink or into a leftover file.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        Ok(Box::new(FsFile(file)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        // 0700 whatever the umask, for every directory it creates (missing parents too).
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    fn rename_no_replace(&self, from: &Path, to: &Path) -> io::Result<()> {
        // link(2) never replaces an existing name; the old name is then dropped. A crash
        // between the two leaves the temporary as a second name of the same file.
        fs::hard_link(from, to)?;
        fs::remove_file(from)
    }
    fn lock_file(&self, path: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        file.lock()?;
        Ok(Some(Box::new(file)))
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<Box<dyn Send + Sync>>> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(LOCK_FILE))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Box::new(file))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

impl fmt::Debug for dyn Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Storage")
    }
}
