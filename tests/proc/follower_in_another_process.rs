//! A follower reads a log that a `Wal` in another process writes (a child of this test
//! binary): it sees every flushed record, in order, across pages and segments.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use walcrypt::{Config, Follower, KeyRing, Lsn, Mode, SyncMode, Wal};

const RECORDS: usize = 200;
const DIR_VAR: &str = "WALCRYPT_FOLLOW_CHILD_DIR";
const KEYS_VAR: &str = "WALCRYPT_FOLLOW_CHILD_KEYS";

fn payload(i: usize) -> Vec<u8> {
    let len = 8 + (i * 211) % 1500;
    let mut p = vec![(i % 13) as u8; len];
    p[..8].copy_from_slice(&(i as u64).to_le_bytes());
    p
}

fn config(keys: KeyRing) -> Config {
    Config::new(Mode::PerRecord)
        .keys(keys)
        .sync(SyncMode::Durable)
        .page_size(1024)
        .segment_size(8 * 1024)
}

/// The writer, run in the child process only (the parent sets the variables).
#[test]
#[ignore = "run by follower_in_another_process as its child"]
fn child_writes_a_log() {
    let _serial = crate::support::serial();
    let (Some(dir), Some(keys)) = (std::env::var_os(DIR_VAR), std::env::var_os(KEYS_VAR)) else {
        return;
    };
    let keys = KeyRing::load(Path::new(&keys)).unwrap();
    let wal = Wal::open(Path::new(&dir), config(keys)).unwrap();
    for i in 0..RECORDS {
        let lsn = wal.append(1, &payload(i)).unwrap();
        wal.flush(lsn).unwrap();
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let marker = wal.append(2, b"end").unwrap();
    wal.flush(marker).unwrap();
    wal.close().unwrap();
}

#[test]
fn follower_in_another_process() {
    let _serial = crate::support::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let key_file = tmp.path().join("keys");
    let keys = KeyRing::generate().unwrap();
    keys.save(&key_file).unwrap();
    let mut follower = Follower::open(&dir, Some(keys), Lsn::default()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "follower_in_another_process::child_writes_a_log",
            "--quiet",
        ])
        .env(DIR_VAR, &dir)
        .env(KEYS_VAR, &key_file)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while seen.len() < RECORDS && Instant::now() < deadline {
        if let Some(r) = follower.next_timeout(Duration::from_millis(100)).unwrap() {
            seen.push(r);
        }
    }
    assert!(child.wait().unwrap().success(), "the writing child failed");
    assert_eq!(seen.len(), RECORDS);
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.payload, payload(i), "record {i} at {}", r.lsn);
    }
    assert!(follower.segments().len() > 5, "the log spans segments");
}
