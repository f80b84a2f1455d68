//! Group commit for the log store: one thread makes appended records durable and only then
//! reports them flushed.
//!
//! Appends queue a waiter with the LSN of their last record. The thread takes every waiter
//! queued so far, calls `Wal::flush` once with the highest LSN (one fdatasync for all of them),
//! and completes the waiters in the order they were queued. A waiter is completed only after
//! `flush` returned: never before the fdatasync.

use std::io;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use openraft::RaftTypeConfig;
use openraft::storage::LogFlushed;
use tokio::sync::oneshot;
use walcrypt::{Lsn, Wal};

/// Someone waiting for records to become durable.
pub(crate) enum Waiter<C: RaftTypeConfig> {
    /// openraft's append callback.
    Log(LogFlushed<C>),
    /// An async caller (save_vote, purge) waiting for the result.
    Reply(oneshot::Sender<Result<(), String>>),
    /// A caller's own callback (`WalLogStore::append_entries`).
    Call(Box<dyn FnOnce(io::Result<()>) + Send>),
}

impl<C: RaftTypeConfig> Waiter<C> {
    fn complete(self, result: &Result<(), String>) {
        match self {
            Waiter::Log(callback) => {
                callback.log_io_completed(result.clone().map_err(io::Error::other));
            }
            Waiter::Reply(tx) => {
                // The caller may have gone away (its task was cancelled): nothing to tell.
                let _ = tx.send(result.clone());
            }
            Waiter::Call(f) => f(result.clone().map_err(io::Error::other)),
        }
    }
}

/// A flush request: make everything up to and including the record at `lsn` durable.
/// `lsn` is `None` when nothing was ever appended: complete at once.
struct Job<C: RaftTypeConfig> {
    lsn: Option<Lsn>,
    waiter: Waiter<C>,
}

/// The flush thread and the queue to it. Dropping it ends the thread after the queued jobs.
pub(crate) struct Flusher<C: RaftTypeConfig> {
    tx: Option<mpsc::Sender<Job<C>>>,
    thread: Option<JoinHandle<()>>,
}

impl<C: RaftTypeConfig> Flusher<C> {
    pub(crate) fn start(wal: Arc<Wal>) -> io::Result<Flusher<C>> {
        let (tx, rx) = mpsc::channel::<Job<C>>();
        let thread = std::thread::Builder::new()
            .name("walcrypt-raft-flush".into())
            .spawn(move || run(&wal, &rx))?;
        Ok(Flusher {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues a waiter for the record at `lsn` (and everything before it).
    pub(crate) fn submit(&self, lsn: Option<Lsn>, waiter: Waiter<C>) {
        let job = Job { lsn, waiter };
        let sent = match &self.tx {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        if let Err(job) = sent {
            job.waiter
                .complete(&Err("the log store's flush thread has stopped".into()));
        }
    }
}

impl<C: RaftTypeConfig> Drop for Flusher<C> {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            // The last clone of a store can be dropped by a callback running on the flush
            // thread itself: that thread ends on its own once the queue is closed.
            if thread.thread().id() != std::thread::current().id() {
                // A panic in the thread has already been reported by the panic hook.
                let _ = thread.join();
            }
        }
    }
}

fn run<C: RaftTypeConfig>(wal: &Wal, rx: &mpsc::Receiver<Job<C>>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        let result = match jobs.iter().filter_map(|j| j.lsn).max() {
            Some(lsn) => wal.flush(lsn).map_err(|e| format!("flush to {lsn}: {e}")),
            None => Ok(()),
        };
        for job in jobs {
            job.waiter.complete(&result);
        }
    }
}
