//! Group commit for the log store: one thread makes appended records durable and only then
//! reports them flushed.
//!
//! Appends (and votes, purges) queue a waiter after their records are in the log. The thread
//! takes every waiter queued so far, calls `Wal::sync` once (a flush to the end of the log as
//! it is then, which covers every record of every waiter taken: one fdatasync for all of
//! them), and completes the waiters in the order they were queued. A waiter is completed only
//! after `sync` returned: never before the fdatasync.

use std::io;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use openraft::RaftTypeConfig;
use openraft::storage::LogFlushed;
use tokio::sync::oneshot;
use walcrypt::Wal;

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

/// The flush thread and the queue to it. Dropping it ends the thread after the queued jobs.
pub(crate) struct Flusher<C: RaftTypeConfig> {
    tx: Option<mpsc::Sender<Waiter<C>>>,
    thread: Option<JoinHandle<()>>,
}

impl<C: RaftTypeConfig> Flusher<C> {
    pub(crate) fn start(wal: Arc<Wal>) -> io::Result<Flusher<C>> {
        let (tx, rx) = mpsc::channel::<Waiter<C>>();
        let thread = std::thread::Builder::new()
            .name("walcrypt-raft-flush".into())
            .spawn(move || run(&wal, &rx))?;
        Ok(Flusher {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues a waiter for every record appended so far.
    pub(crate) fn submit(&self, waiter: Waiter<C>) {
        let sent = match &self.tx {
            Some(tx) => tx.send(waiter).map_err(|e| e.0),
            None => Err(waiter),
        };
        if let Err(waiter) = sent {
            waiter.complete(&Err("the log store's flush thread has stopped".into()));
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

fn run<C: RaftTypeConfig>(wal: &Wal, rx: &mpsc::Receiver<Waiter<C>>) {
    while let Ok(first) = rx.recv() {
        let mut waiters = vec![first];
        waiters.extend(rx.try_iter());
        // Every waiter taken was queued after its records were appended, so the end of the
        // log as `sync` sees it lies past all of them.
        let end = wal.end_lsn();
        let result = wal
            .sync()
            .map_err(|e| format!("flush to the end of the log ({end} or later): {e}"));
        for waiter in waiters {
            waiter.complete(&result);
        }
    }
}
