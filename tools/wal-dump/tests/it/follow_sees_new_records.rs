//! --follow prints records appended after it started, across segments, until it is stopped;
//! with --durable it prints only the records that page headers vouch for as durable.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::*;
use walcrypt::Mode;

/// A running `wal-dump --follow` and the lines it has printed so far.
struct Follow {
    child: Child,
    rx: mpsc::Receiver<String>,
    lines: Vec<String>,
}

impl Follow {
    fn start(log: &Path, key_file: &Path, extra: &[&str]) -> Follow {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wal-dump"))
            .args(["--follow", "--format", "json", "--payload", "hex"])
            .args(extra)
            .arg("--key-file")
            .arg(key_file)
            .arg(log)
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
        Follow {
            child,
            rx,
            lines: Vec::new(),
        }
    }

    /// Collects lines until there are `n` or `within` has passed.
    fn wait_for(&mut self, n: usize, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        while self.lines.len() < n && Instant::now() < deadline {
            if let Ok(l) = self.rx.recv_timeout(Duration::from_millis(50)) {
                self.lines.push(l);
            }
        }
        self.lines.len()
    }

    fn stop(mut self, appended: &[Appended]) {
        self.child.kill().unwrap();
        let _ = self.child.wait();
        for (line, a) in self.lines.iter().zip(appended) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["lsn"].as_u64(), Some(u64::from(a.lsn)));
            assert_eq!(v["payload"].as_str(), Some(hex(&a.payload).as_str()));
        }
    }
}

#[test]
fn follow_sees_new_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, keys, mut appended) = make_log(tmp.path(), Mode::PerRecord, 20);
    let mut written = Follow::start(&log, &key_file, &[]);
    let mut durable = Follow::start(&log, &key_file, &["--durable"]);
    let long = Duration::from_secs(15);
    assert_eq!(written.wait_for(20, long), 20);
    // The writer's close left the last page's header vouching for its last flush.
    assert_eq!(durable.wait_for(20, long), 20);

    // A second writer session: 60 records across several segments, flushed every 20.
    appended.extend(append(&log, Mode::PerRecord, &keys, 20, 60));
    assert_eq!(written.wait_for(80, long), 80);
    assert_eq!(durable.wait_for(80, long), 80);
    appended.extend(append(&log, Mode::PerRecord, &keys, 80, 1));
    assert_eq!(written.wait_for(82, Duration::from_millis(500)), 81);
    assert_eq!(durable.wait_for(81, long), 81);
    written.stop(&appended);
    durable.stop(&appended);
}
