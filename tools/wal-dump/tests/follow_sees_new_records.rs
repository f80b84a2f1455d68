//! --follow prints records appended after it started, until it is stopped.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::*;
use walcrypt::Mode;

#[test]
fn follow_sees_new_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, keys, mut appended) = make_log(tmp.path(), Mode::PerRecord, 20);
    let mut child = Command::new(env!("CARGO_BIN_EXE_wal-dump"))
        .args([
            "--follow",
            "--format",
            "json",
            "--payload",
            "hex",
            "--key-file",
        ])
        .arg(&key_file)
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let wait_for = |n: usize, lines: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while lines.len() < n && Instant::now() < deadline {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
                lines.push(l);
            }
        }
    };
    wait_for(20, &mut lines);
    assert_eq!(lines.len(), 20);
    appended.extend(append(&log, Mode::PerRecord, &keys, 20, 60));
    wait_for(80, &mut lines);
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(lines.len(), 80);
    for (line, a) in lines.iter().zip(&appended) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["lsn"].as_u64(), Some(u64::from(a.lsn)));
        assert_eq!(v["payload"].as_str(), Some(hex(&a.payload).as_str()));
    }
}
