//! Opening what the user pointed at (a log directory or one segment file), loading keys, and
//! reading bytes as stored on disk.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use walcrypt::inspect::{
    self, Geometry, PAGE_HEADER_LEN, PageHeader, SEGMENT_HEADER_FIXED, SegmentHeader, SegmentInfo,
};
use walcrypt::{KeyRing, KeyStore, Lsn, Mode, Reader};

use crate::fail::{Fail, KeyContext};
use crate::kek::{KekArgs, is_key_store};

/// The key ring (if any), the target and its reader, opened as the listing commands need them.
pub fn open_target(
    key_file: Option<&Path>,
    kek: &KekArgs,
    path: &Path,
    require_mode: Option<Mode>,
) -> Result<(Option<KeyRing>, Target, Reader), Fail> {
    let (keys, target, reader) = open_target_with_source(key_file, kek, path, require_mode)?;
    Ok((keys.ring, target, reader))
}

/// Like [`open_target`], with the key store the keys came from, if they came from one.
pub fn open_target_with_source(
    key_file: Option<&Path>,
    kek: &KekArgs,
    path: &Path,
    require_mode: Option<Mode>,
) -> Result<(Keys, Target, Reader), Fail> {
    let keys = load_key_source(key_file, kek)?;
    let mut target = Target::resolve(path)?;
    target.require_mode = require_mode;
    let reader = target.open(keys.ring.as_ref(), key_file)?;
    Ok((keys, target, reader))
}

/// The keys `--key-file` names.
pub struct Keys {
    /// The key ring, as read when the tool started.
    pub ring: Option<KeyRing>,
    /// The key store the ring came from, when `--key-file` is one: it can be read again for a
    /// key a live writer added since.
    pub store: Option<Arc<KeyStore>>,
}

/// A key store (told by its magic) is opened with the KEK options; anything else is read
/// as a raw key ring.
pub fn load_keys(path: Option<&Path>, kek: &KekArgs) -> Result<Option<KeyRing>, Fail> {
    Ok(load_key_source(path, kek)?.ring)
}

/// Like [`load_keys`], keeping the key store the keys came from.
pub fn load_key_source(path: Option<&Path>, kek: &KekArgs) -> Result<Keys, Fail> {
    let Some(path) = path else {
        return Ok(Keys {
            ring: None,
            store: None,
        });
    };
    if is_key_store(path) {
        let provider = kek.provider().map_err(Fail::trouble)?;
        let store = KeyStore::open(path, provider).map_err(|e| Fail::from_wal(&e))?;
        return Ok(Keys {
            ring: Some(store.ring()),
            store: Some(Arc::new(store)),
        });
    }
    let ring = KeyRing::load(path).map_err(|e| {
        if walcrypt::KekFile::open(path).is_ok() {
            Fail::trouble(format!(
                "key file {} is a KEK file, not a key store or key ring: give the key store as \
                 --key-file and this file as --kek-file",
                path.display()
            ))
        } else {
            Fail::from_wal(&e)
        }
    })?;
    if let Ok(false) = KeyRing::file_is_private(path) {
        eprintln!(
            "wal-dump: warning: key file {} is readable by group or others (chmod 600 it)",
            path.display()
        );
    }
    Ok(Keys {
        ring: Some(ring),
        store: None,
    })
}

/// Where the log lives and which part of it the user asked for.
#[derive(Debug, Clone)]
pub struct Target {
    /// The log directory.
    pub dir: PathBuf,
    /// When PATH named one segment file: that segment's start LSN.
    pub segment: Option<Lsn>,
    /// `--require-mode`: the mode every reader opened on the log must find.
    pub require_mode: Option<Mode>,
}

impl Target {
    /// Resolves PATH: a directory is the log; a file must be named like a segment, and the
    /// log is its directory.
    pub fn resolve(path: &Path) -> Result<Target, Fail> {
        let meta = std::fs::metadata(path).map_err(|e| Fail::io("open", path, &e))?;
        if meta.is_dir() {
            return Ok(Target {
                dir: path.to_path_buf(),
                segment: None,
                require_mode: None,
            });
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(start) = inspect::parse_segment_file_name(name) else {
            return Err(Fail::trouble(format!(
                "{}: not a walcrypt segment file (names are 16 hex digits and .wal)",
                path.display()
            )));
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok(Target {
            dir,
            segment: Some(start),
            require_mode: None,
        })
    }

    /// The log, key file and keys, to name in key errors.
    pub fn key_context<'a>(
        &'a self,
        key_file: Option<&'a Path>,
        ring: Option<&'a KeyRing>,
    ) -> KeyContext<'a> {
        KeyContext {
            log: Some(&self.dir),
            key_file,
            ring,
        }
    }

    /// Opens a reader over the log with `keys`.
    pub fn open(&self, keys: Option<&KeyRing>, key_file: Option<&Path>) -> Result<Reader, Fail> {
        let mut reader = Reader::open(&self.dir, keys.cloned())
            .map_err(|e| Fail::from_wal_with_keys(&e, &self.key_context(key_file, keys)))?;
        if let Some(mode) = self.require_mode {
            reader = reader.require_mode(mode).map_err(|e| Fail::from_wal(&e))?;
        }
        if let Some(start) = self.segment
            && !reader.segments().iter().any(|s| s.header.start == start)
        {
            return Err(Fail::trouble(format!(
                "{}: segment {} is not part of the log",
                self.dir.display(),
                inspect::segment_file_name(start)
            )));
        }
        Ok(reader)
    }

    /// The LSN range `[from, to)` that the user's PATH and `--start`/`--end` select.
    pub fn range(&self, reader: &Reader, start: Option<Lsn>, end: Option<Lsn>) -> (Lsn, Lsn) {
        let mut from = start.unwrap_or_default();
        let mut to = end.unwrap_or(Lsn(u64::MAX));
        if let Some(seg) = self.segment {
            from = from.max(seg);
            to = to.min(seg.saturating_add(reader.geometry().segment_size));
        }
        (from, to)
    }
}

/// Reads the log's files as stored: page headers, ciphertext, raw bytes.
pub struct Disk {
    geo: Geometry,
    log_id: u64,
    segments: BTreeMap<Lsn, PathBuf>,
    open: Option<(Lsn, File)>,
}

impl Disk {
    /// Covers the segments `reader` found.
    pub fn new(reader: &Reader) -> Disk {
        Disk::over(reader.geometry(), reader.log_id(), reader.segments())
    }

    /// Covers `segments` of the log with id `log_id`.
    pub fn over(geo: Geometry, log_id: u64, segments: &[SegmentInfo]) -> Disk {
        Disk {
            geo,
            log_id,
            segments: segments
                .iter()
                .map(|s| (s.header.start, s.path.clone()))
                .collect(),
            open: None,
        }
    }

    /// Whether this covers exactly `segments` (a follower finds new ones as the log grows).
    pub fn covers(&self, segments: &[SegmentInfo]) -> bool {
        self.segments.len() == segments.len()
            && segments
                .iter()
                .all(|s| self.segments.contains_key(&s.header.start))
    }

    /// Reads up to `buf.len()` bytes at `lsn` from its segment file, without crossing the
    /// segment's end; returns how many bytes the file held (0 for a missing segment).
    pub fn read(&mut self, lsn: Lsn, buf: &mut [u8]) -> Result<usize, Fail> {
        let seg = self.geo.segment_start(lsn);
        let Some(path) = self.segments.get(&seg) else {
            return Ok(0);
        };
        if self.open.as_ref().is_none_or(|(s, _)| *s != seg) {
            let file = File::open(path).map_err(|e| segment_gone(path, seg, lsn, "open", &e))?;
            self.open = Some((seg, file));
        }
        let Some((_, file)) = self.open.as_ref() else {
            return Ok(0);
        };
        let room = (seg + self.geo.segment_size - lsn).min(buf.len() as u64) as usize;
        let mut done = 0;
        while done < room {
            let n = file
                .read_at(&mut buf[done..room], lsn - seg + done as u64)
                .map_err(|e| {
                    Fail::trouble(format!(
                        "read segment {} offset {}: {e}",
                        path.display(),
                        lsn - seg + done as u64
                    ))
                })?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    /// Whether the file this reads the segment `listed` describes from is still that segment:
    /// its header, read again through the file the reads went to, is the one the listing read.
    /// A writer's purge takes a segment's name away before anything changes its file, and reuse
    /// (`Config::recycle_segments`) rewrites the file's header, naming the new segment, before
    /// it wipes or writes any page of it; a header that still reads as listed after the pages
    /// were read therefore says that every page read before it was the segment's own. (A file
    /// kept open by its old name reads the new segment's pages once its file was reused.)
    pub fn still_holds(&mut self, listed: &SegmentHeader) -> Result<bool, Fail> {
        let start = listed.start;
        let mut fixed = [0u8; SEGMENT_HEADER_FIXED];
        let n = self.read(start, &mut fixed)?;
        let Some(len) = SegmentHeader::len_from_fixed(&fixed[..n]) else {
            return Ok(false);
        };
        let mut bytes = vec![0u8; len];
        let n = self.read(start, &mut bytes)?;
        Ok(SegmentHeader::decode(&bytes[..n]).is_ok_and(|h| h == *listed))
    }

    /// `n` record-stream bytes from the body position `from`, skipping page and segment
    /// headers, as stored on disk (ciphertext in pagelevel).
    pub fn stream(&mut self, from: Lsn, n: usize) -> Result<Vec<u8>, Fail> {
        let mut out = vec![0u8; n];
        let mut pos = from;
        let mut done = 0;
        while done < n {
            pos = self.geo.skip_headers(pos);
            let room = ((self.geo.page_start(pos) + self.geo.page_size) - pos) as usize;
            let step = room.min(n - done);
            let got = self.read(pos, &mut out[done..done + step])?;
            if got < step {
                return Err(Fail::damage(format!(
                    "lsn {}: the file ends inside a record",
                    pos
                )));
            }
            done += step;
            pos += step as u64;
        }
        Ok(out)
    }

    /// The raw 48 bytes where the header of `page` lives (zeros past the end of the file).
    pub fn page_header_bytes(&mut self, page: Lsn) -> Result<[u8; PAGE_HEADER_LEN], Fail> {
        let mut buf = [0u8; PAGE_HEADER_LEN];
        self.read(page, &mut buf)?;
        Ok(buf)
    }

    /// The decoded header of `page`, if valid and at its own address.
    pub fn page_header(&mut self, page: Lsn) -> Result<Option<PageHeader>, Fail> {
        let bytes = self.page_header_bytes(page)?;
        Ok(PageHeader::decode(self.log_id, &bytes).filter(|h| h.page_lsn == page))
    }

    /// The first record boundary in the segment starting at `seg`, from its first page's
    /// continuation length.
    pub fn first_record_in_segment(&mut self, seg: Lsn) -> Result<Option<Lsn>, Fail> {
        let page = seg + self.geo.page_size;
        Ok(self.page_header(page)?.map(|h| {
            self.geo
                .advance(self.geo.skip_headers(page), h.rem_len as u64)
        }))
    }

    /// A record boundary at or before `target` from which reading can start cheaply: the first
    /// record of the segment holding `target` (or an earlier one when a record spans into it).
    /// `Lsn(0)` means the start of the log.
    pub fn boundary_before(&mut self, target: Lsn) -> Result<Lsn, Fail> {
        let starts: Vec<Lsn> = self.segments.keys().copied().collect();
        let Some(&oldest) = starts.first() else {
            return Ok(Lsn(0));
        };
        if target <= oldest {
            return Ok(Lsn(0));
        }
        let seg = self.geo.segment_start(target);
        for &s in starts.iter().rev().filter(|&&s| s <= seg && s > oldest) {
            if let Some(b) = self.first_record_in_segment(s)?
                && b <= target
            {
                return Ok(b);
            }
        }
        Ok(Lsn(0))
    }
}

/// The error for a segment file (starting at `seg`, read at `lsn`) that the log's listing
/// named and that could not be opened or looked at (`what`): [`Fail::purged`] when it is gone
/// because a purge removed it since (see [`purged_since`]), else the I/O error.
pub fn segment_gone(path: &Path, seg: Lsn, lsn: Lsn, what: &str, e: &std::io::Error) -> Fail {
    if e.kind() == std::io::ErrorKind::NotFound
        && let Some(oldest) = purged_since(path, seg)
    {
        return Fail::purged(path, lsn, oldest);
    }
    Fail::io(&format!("{what} segment"), path, e)
}

/// Where the oldest segment file left in the directory of `path` starts, when that lies
/// beyond `seg`: the segment at `path` (starting at `seg`), which a listing named and which is
/// gone, was purged since. A purge removes the oldest segments and never the one holding the
/// end of the log; a segment gone from between segment files still there is no purge (`None`).
pub fn purged_since(path: &Path, seg: Lsn) -> Option<Lsn> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let oldest = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(inspect::parse_segment_file_name)
        })
        .min()?;
    (oldest > seg).then_some(oldest)
}

/// An LSN as the library prints it (`Lsn`'s `Display`: `HI/LO` hex, e.g. `0/1A2C0`), so the
/// tool, the library's errors and the crate's users all print an LSN the same way.
pub fn fmt_lsn(lsn: Lsn) -> String {
    lsn.to_string()
}

/// Where `lsn` lies on disk: `segment <file> offset <n> (lsn <lsn>)`.
pub fn position(geo: Geometry, lsn: Lsn) -> String {
    let seg = geo.segment_start(lsn);
    format!(
        "segment {} offset {} (lsn {lsn})",
        inspect::segment_file_name(seg),
        lsn - seg,
    )
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
