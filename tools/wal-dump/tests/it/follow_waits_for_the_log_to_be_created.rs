//! --follow on a directory that does not exist yet waits, then shows the records of the log a
//! writer creates there.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::*;
use walcrypt::Mode;

#[test]
fn follow_waits_for_the_log_to_be_created() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("later");
    let (keys, key_file) = new_key_file(tmp.path());
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
        .stderr(Stdio::null())
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
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "wal-dump waits for the log"
    );
    let appended = append(&log, Mode::PageLevel, &keys, 0, 30);
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while lines.len() < appended.len() && Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(50)) {
            lines.push(l);
        }
    }
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(lines.len(), appended.len());
    for (line, a) in lines.iter().zip(&appended) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["lsn"].as_u64(), Some(u64::from(a.lsn)));
        assert_eq!(v["payload"].as_str(), Some(hex(&a.payload).as_str()));
    }
}
