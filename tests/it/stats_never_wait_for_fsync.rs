//! `Wal::stats` reads atomic counters: it answers while another thread holds the write lock
//! inside a slow fdatasync.

use crate::support;

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::hooked::{Hooked, Hooks};
use walcrypt::{Config, KeyRing, Mode, Wal};

/// Once armed, an fdatasync reports that it started and then waits to be released.
#[derive(Default)]
struct Gate {
    armed: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

impl Hooks for Gate {
    fn syncing(&self, _path: &Path) {
        if let Some((started, release)) = self.armed.lock().unwrap().take() {
            started.send(()).unwrap();
            release.recv().unwrap();
        }
    }
}

#[test]
fn stats_answer_while_a_flush_is_inside_fdatasync() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let config = Config::new(Mode::PerRecord)
        .keys(KeyRing::generate().unwrap())
        .storage(Arc::new(Hooked(gate.clone())));
    let wal = Wal::open(dir.path(), config).unwrap();
    let lsn = wal.append(1, &[5; 1000]).unwrap();

    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    *gate.armed.lock().unwrap() = Some((started_tx, release_rx));
    std::thread::scope(|s| {
        let flusher = s.spawn(|| wal.flush(lsn));
        started.recv().unwrap(); // the flusher holds the write lock, inside fdatasync
        let (answer_tx, answer) = mpsc::channel();
        let wal = &wal;
        s.spawn(move || answer_tx.send(wal.stats()).unwrap());
        // A generous deadline only to turn a hang into a failure; no timing is measured.
        let stats = answer
            .recv_timeout(Duration::from_secs(60))
            .expect("stats() waited for the fdatasync");
        assert_eq!(stats.appends, 1);
        assert_eq!(stats.payload_bytes, 1000);
        // The appender is not blocked either: the insert lock is free.
        wal.append(1, b"meanwhile").unwrap();
        release.send(()).unwrap();
        flusher.join().unwrap().unwrap();
    });
    let stats = wal.stats();
    assert_eq!(stats.appends, 2);
    assert!(stats.fsyncs >= 1);
    assert!(stats.write_lock_acquisitions >= 1);
    wal.close().unwrap();
}
