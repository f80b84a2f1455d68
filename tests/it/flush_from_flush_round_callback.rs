//! A listener's `on_flush_round` may call `flush` on the same log, in both sync modes: the
//! round it hears of has ended, so the nested flush leads a round of its own (for a record
//! appended from inside the callback) instead of waiting for its own thread. The records
//! appended from the callback are durable and readable after a reopen.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use support::{config_4k_pages, try_read_records};
use walcrypt::{EventListener, FlushRound, KeyRing, Mode, SyncMode, Wal};

#[derive(Default)]
struct Nested {
    wal: OnceLock<Weak<Wal>>,
    /// Rounds heard, including the nested ones.
    rounds: AtomicUsize,
    /// What each nested flush returned.
    nested: Mutex<Vec<walcrypt::Result<()>>>,
}

struct Listener(Arc<Nested>);

impl EventListener for Listener {
    fn on_flush_round(&self, event: &FlushRound) {
        let n = self.0.rounds.fetch_add(1, Ordering::SeqCst);
        let Some(wal) = self.0.wal.get().and_then(Weak::upgrade) else {
            return;
        };
        // Already covered by the round that just ended: returns at once.
        let again = wal.flush(event.flushed_to);
        self.0.nested.lock().unwrap().push(again);
        // Only from the outer rounds, so the nesting stops one level down.
        if n.is_multiple_of(2) {
            let lsn = wal.append(7, format!("from callback {n}").as_bytes());
            let flushed = lsn.and_then(|lsn| wal.flush(lsn));
            self.0.nested.lock().unwrap().push(flushed);
        }
    }
}

fn nested_flushes_complete(sync: SyncMode) {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let heard = Arc::new(Nested::default());
    let config =
        config_4k_pages(Mode::PerRecord, &keys, sync).listener(Arc::new(Listener(heard.clone())));
    let wal = Arc::new(Wal::open(dir.path(), config).unwrap());
    heard.wal.set(Arc::downgrade(&wal)).unwrap();

    // The flushes run on another thread: were a nested flush to wait for its own thread, the
    // test reports it instead of hanging.
    let (done, finished) = mpsc::channel();
    let worker = {
        let wal = wal.clone();
        std::thread::spawn(move || {
            for i in 0..3u8 {
                let lsn = wal.append(1, &[i; 100]).unwrap();
                wal.flush(lsn).unwrap();
            }
            done.send(()).unwrap();
        })
    };
    assert!(
        finished.recv_timeout(Duration::from_secs(60)).is_ok(),
        "a flush called from on_flush_round ({sync:?}) never returned"
    );
    worker.join().unwrap();

    // Three outer rounds, each with one nested round for the record it appended.
    assert_eq!(heard.rounds.load(Ordering::SeqCst), 6);
    let nested = std::mem::take(&mut *heard.nested.lock().unwrap());
    assert_eq!(nested.len(), 9);
    for result in nested {
        result.unwrap();
    }
    Arc::try_unwrap(wal).ok().unwrap().close().unwrap();

    let records = try_read_records(dir.path(), &keys).unwrap();
    let from_callback = records.iter().filter(|r| r.kind == 7).count();
    assert_eq!(records.len(), 6);
    assert_eq!(from_callback, 3);
}

#[test]
fn flush_from_on_flush_round_in_durable_mode() {
    nested_flushes_complete(SyncMode::Durable);
}

#[test]
fn flush_from_on_flush_round_in_buffered_mode() {
    nested_flushes_complete(SyncMode::Buffered);
}
