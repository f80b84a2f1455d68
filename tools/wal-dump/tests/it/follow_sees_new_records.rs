//! --follow prints records appended after it started, across segments, until it is stopped;
//! with --durable it prints only the records that page headers vouch for as durable. Given a key
//! store, it reads on past a data-key rotation of the live writer.

use crate::support;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use support::*;
use walcrypt::{Config, KekFile, KeyStore, Mode, SyncMode, Wal};

/// A running `wal-dump --follow` and the lines it has printed so far.
struct Follow {
    child: Child,
    rx: mpsc::Receiver<String>,
    lines: Vec<String>,
}

impl Follow {
    fn start(log: &Path, key_file: &Path, extra: &[&str]) -> Follow {
        let mut args: Vec<OsString> = extra.iter().map(OsString::from).collect();
        args.extend(["--key-file".into(), key_file.into()]);
        Follow::spawn(log, &args)
    }

    /// Runs `wal-dump --follow` (JSON, hex payloads) with `args` on `log`.
    fn spawn(log: &Path, args: &[OsString]) -> Follow {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wal-dump"))
            .args(["--follow", "--format", "json", "--payload", "hex"])
            .args(args)
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

    /// What the tool wrote on stderr, if it has exited (it should not have).
    fn exited(&mut self) -> String {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                format!("wal-dump exited ({status}): {err}")
            }
            _ => "wal-dump still running".into(),
        }
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

/// The writer rotates its data key (into the key store) while `--follow` runs with that store:
/// the follow reads the store again and prints the records under the new key, in every
/// encrypted mode (pagelevel needs the key for every record; perrecord for the payloads).
#[test]
fn follow_with_a_key_store_reads_on_after_a_key_rotation() {
    let long = Duration::from_secs(15);
    for mode in [Mode::PerRecord, Mode::PerRecordGcm, Mode::PageLevel] {
        let tmp = tempfile::tempdir().unwrap();
        let kek = tmp.path().join("kek");
        let store = tmp.path().join("keys.store");
        let log = tmp.path().join("log");
        for o in [
            wal_key(&[&"kek-new", &kek]),
            wal_key(&[&"init", &store, &"--kek-file", &kek]),
        ] {
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        }
        let keys = KeyStore::open(&store, Arc::new(KekFile::open(&kek).unwrap())).unwrap();
        let config = Config::new(mode)
            .key_store(Arc::new(keys))
            .page_size(PAGE)
            .segment_size(SEGMENT)
            .buffer_size(8 * PAGE as usize)
            .sync(SyncMode::Durable);
        let wal = Wal::open(&log, config).unwrap();
        let mut appended = Vec::new();
        let mut add = |wal: &Wal, range: std::ops::Range<usize>| {
            for i in range {
                let payload = payload(i);
                let lsn = wal.append(1, &payload).unwrap();
                appended.push(Appended {
                    lsn,
                    kind: 1,
                    payload,
                });
            }
            wal.flush(appended.last().unwrap().lsn).unwrap();
        };
        add(&wal, 0..10);
        let mut follow = Follow::spawn(
            &log,
            &[
                "--key-file".into(),
                store.into(),
                "--kek-file".into(),
                kek.into(),
            ],
        );
        assert_eq!(follow.wait_for(10, long), 10, "{mode}: {}", follow.exited());
        assert_eq!(wal.rotate_data_key().unwrap(), 2);
        add(&wal, 10..30);
        assert_eq!(follow.wait_for(30, long), 30, "{mode}: {}", follow.exited());
        wal.close().unwrap();
        follow.stop(&appended);
    }
}
