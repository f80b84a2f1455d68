//! Helpers shared by the scenario tests: build small logs through the library and run the
//! binaries.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use walcrypt::{Config, KeyRing, Lsn, Mode, SyncMode, Wal};

/// Page size of test logs: small, so records straddle pages.
pub const PAGE: u64 = 512;
/// Segment size of test logs: eight pages, so a few hundred records fill several segments.
pub const SEGMENT: u64 = 8 * PAGE;

/// One appended record.
#[derive(Debug, Clone)]
pub struct Appended {
    pub lsn: Lsn,
    pub kind: u8,
    pub payload: Vec<u8>,
}

pub fn config(mode: Mode, keys: &KeyRing) -> Config {
    Config::new(mode)
        .keys(keys.clone())
        .page_size(PAGE)
        .segment_size(SEGMENT)
        .buffer_size(8 * PAGE as usize)
        .sync(SyncMode::Durable)
}

/// A payload that tells its record apart, with lengths from 0 to 300 bytes.
pub fn payload(i: usize) -> Vec<u8> {
    let len = (i * 37) % 301;
    let text = format!("record {i} ");
    text.bytes().cycle().take(len).collect()
}

/// Appends `n` records (kinds 1..=4) to the log in `dir`, creating it if needed. Flushes
/// (fdatasync) every 20 records, so later pages carry durable hints and damage in the middle
/// is told apart from a torn tail.
pub fn append(dir: &Path, mode: Mode, keys: &KeyRing, first: usize, n: usize) -> Vec<Appended> {
    let wal = open_when_unlocked(dir, config(mode, keys));
    let mut out = Vec::new();
    for i in first..first + n {
        let kind = (i % 4) as u8 + 1;
        let payload = payload(i);
        let lsn = wal.append(kind, &payload).expect("append");
        out.push(Appended { lsn, kind, payload });
        if i % 20 == 19 {
            wal.flush(lsn).expect("flush");
        }
    }
    let last = out.last().map(|a| a.lsn).unwrap_or_default();
    wal.flush(last).expect("flush");
    wal.close().expect("close");
    out
}

/// Opens the log, waiting while its lock is held. A test thread that spawns a wal-dump while
/// another thread has the log open forks a child that shares the lock file's descriptor until
/// it execs, so the lock can outlive the close of the `Wal` that took it by a moment.
pub fn open_when_unlocked(dir: &Path, config: Config) -> Wal {
    open_retrying(dir, config).expect("open wal")
}

/// `Wal::open`, retried for up to 5 s while the log's lock is held (see `open_when_unlocked`).
pub fn open_retrying(dir: &Path, config: Config) -> walcrypt::Result<Wal> {
    let mut tries = 0;
    loop {
        match Wal::open(dir, config.clone()) {
            Err(walcrypt::Error::Locked(_)) if tries < 500 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// A new key ring, saved as the key file `dir/keys`: the ring and the file's path.
pub fn new_key_file(dir: &Path) -> (KeyRing, PathBuf) {
    let keys = KeyRing::generate().expect("generate keys");
    let key_file = dir.join("keys");
    keys.save(&key_file).expect("save keys");
    (keys, key_file)
}

/// A fresh log of `n` records in `dir/log`, and its key file in `dir/keys` (encrypted modes).
pub fn make_log(dir: &Path, mode: Mode, n: usize) -> (PathBuf, PathBuf, KeyRing, Vec<Appended>) {
    let (keys, key_file) = new_key_file(dir);
    let log = dir.join("log");
    let appended = append(&log, mode, &keys, 0, n);
    (log, key_file, keys, appended)
}

pub fn wal_dump(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wal-dump"));
    for a in args {
        cmd.arg(a);
    }
    cmd.output().expect("run wal-dump")
}

pub fn wal_key(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wal-key"));
    for a in args {
        cmd.arg(a);
    }
    cmd.output().expect("run wal-key")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the exit code and that stderr is exactly one line, with no panic or backtrace.
pub fn assert_fails(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(code),
        "stderr: {err}\nstdout: {}",
        stdout(o)
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "`{needle}` not in: {err}");
}

/// Hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Flips the bits of `mask` in the byte at `offset` of the file at `path` (damage by hand).
pub fn flip_bits(path: &Path, offset: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    file.write_all_at(&[byte[0] ^ mask], offset).unwrap();
}

/// Path of the segment file holding `lsn`, and the offset of `lsn` in it.
pub fn locate(log: &Path, lsn: Lsn) -> (PathBuf, u64) {
    let lsn = u64::from(lsn);
    let seg = lsn - lsn % SEGMENT;
    (
        log.join(walcrypt::inspect::segment_file_name(Lsn(seg))),
        lsn - seg,
    )
}
