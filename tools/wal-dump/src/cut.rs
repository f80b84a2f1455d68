//! Cutting a log at a record boundary on the files: for a perrecord log repaired without its
//! key (the writer's `RecoveryMode::TruncateAtDamage` needs the key ring to open) and for
//! `--truncate-to`. It is what the writer's recovery does to the files after the end it found.
//!
//! The segment holding the end keeps its bytes before the end and reads as zeros from there to
//! its size (zeros written only over bytes that are not zero already); later segments are
//! removed; files and directory are made durable. The page holding the end keeps its header,
//! with a durable hint no higher than the end: a hint beyond the end would make the next open
//! take the end for damage. The caller holds the writer's directory lock throughout
//! (`crate::lock`), so a live writer is never cut under.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use walcrypt::Lsn;
use walcrypt::inspect::{self, Geometry, PAGE_HEADER_LEN, PageHeader};

use crate::fail::Fail;
use crate::lock::LogLock;

/// How much of the tail segment is read, and at most written, at a time.
const CHUNK: usize = 1 << 20;

/// Cuts the log with id `log_id` in `dir` at `end`, a record boundary, holding its lock.
pub fn cut_log(
    dir: &Path,
    _held: &LogLock,
    geo: Geometry,
    log_id: u64,
    end: Lsn,
) -> Result<(), Fail> {
    let tail_segment = if end.0.is_multiple_of(geo.segment_size) {
        end - geo.segment_size
    } else {
        geo.segment_start(end)
    };
    let entries = std::fs::read_dir(dir).map_err(|e| Fail::io("read log directory", dir, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Fail::io("read log directory", dir, &e))?;
        let name = entry.file_name();
        let Some(start) = name.to_str().and_then(inspect::parse_segment_file_name) else {
            continue;
        };
        let path = entry.path();
        if start > tail_segment {
            std::fs::remove_file(&path)
                .map_err(|e| Fail::io("remove segment after the cut", &path, &e))?;
        } else if start == tail_segment {
            zero_after(&path, end - start, geo.segment_size)?;
            lower_hint(&path, geo.page_start(end) - start, log_id, end)?;
        }
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Fail::io("fsync log directory", dir, &e))
}

/// Makes `[keep, size)` of the segment file at `path` read as zeros, and makes it durable.
fn zero_after(path: &Path, keep: u64, size: u64) -> Result<(), Fail> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Fail::io("open segment", path, &e))?;
    let len = file
        .metadata()
        .map_err(|e| Fail::io("stat segment", path, &e))?
        .len();
    if len > size {
        file.set_len(size)
            .map_err(|e| Fail::io("cut segment to its size", path, &e))?;
    }
    let mut buf = vec![0u8; CHUNK];
    let zeros = vec![0u8; CHUNK];
    let mut at = keep;
    while at < size {
        let n = (size - at).min(CHUNK as u64) as usize;
        let chunk = &mut buf[..n];
        let got = read_full(&file, chunk, at)
            .map_err(|e| Fail::trouble(format!("read {} offset {at}: {e}", path.display())))?;
        if got < n || chunk.iter().any(|&b| b != 0) {
            file.write_all_at(&zeros[..n], at)
                .map_err(|e| Fail::trouble(format!("zero {} offset {at}: {e}", path.display())))?;
        }
        at += n as u64;
    }
    file.sync_data()
        .map_err(|e| Fail::io("fdatasync segment", path, &e))
}

/// Lowers the durable hint of the page header at `offset` of the segment file at `path` to
/// `end` when it lies beyond, and makes the change durable.
fn lower_hint(path: &Path, offset: u64, log_id: u64, end: Lsn) -> Result<(), Fail> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Fail::io("open segment", path, &e))?;
    let mut bytes = [0u8; PAGE_HEADER_LEN];
    read_full(&file, &mut bytes, offset)
        .map_err(|e| Fail::trouble(format!("read {} offset {offset}: {e}", path.display())))?;
    let Some(mut header) = PageHeader::decode(log_id, &bytes) else {
        return Ok(());
    };
    if header.durable_hint <= end {
        return Ok(());
    }
    header.durable_hint = end;
    header.encode(log_id, &mut bytes);
    file.write_all_at(&bytes, offset)
        .map_err(|e| Fail::trouble(format!("write {} offset {offset}: {e}", path.display())))?;
    file.sync_data()
        .map_err(|e| Fail::io("fdatasync segment", path, &e))
}

/// Reads until `buf` is full or the file ends; returns how many bytes were read.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
