//! Poisoning: the one flag every operation checks first, why it was set, and whether the log
//! was closed (a closed log refuses work as a poisoned one does, with [`Error::Closed`]).
//!
//! Invariants this part keeps, whatever the caller:
//! - the cause is recorded before the flag is set, so a thread that sees the flag finds a
//!   cause (the first one: later failures never replace it);
//! - the flag never clears;
//! - the listener hears of a poisoning at most once (`take_unreported`).
//!
//! The cause's mutex is private here: it is taken only to set or clone the cause, with any
//! lock of the log held but the in-flight lock, and nothing is taken while it is held.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::line_ledger::LineBool;

use crate::error::{Error, PoisonCause, Result};
use crate::lock_order::{self, Domain, OrderedMutex};

pub(super) struct Poison {
    /// Set once the log may not be written any more; checked first by every operation.
    poisoned: LineBool,
    /// Why, set before `poisoned`.
    cause: OrderedMutex<Option<PoisonCause>, { lock_order::POISON }>,
    /// Whether the listener was told.
    reported: AtomicBool,
    /// Set by `shutdown` before `poisoned`: later calls get [`Error::Closed`].
    closed: AtomicBool,
}

impl Poison {
    pub(super) fn new(domain: Domain) -> Poison {
        Poison {
            poisoned: LineBool::named("poisoned", false),
            cause: OrderedMutex::new(None, domain),
            reported: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// True once the log is poisoned (or closed).
    pub(super) fn is_set(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// The flag itself, for the in-flight list's waits, which stop when it is set.
    pub(super) fn flag(&self) -> &LineBool {
        &self.poisoned
    }

    /// The cause, once the log is poisoned; `None` while it is not, and after `shutdown` of a
    /// healthy log (which sets the flag with no cause).
    pub(super) fn cause(&self) -> Option<PoisonCause> {
        if !self.is_set() {
            return None;
        }
        self.cause.lock().clone()
    }

    /// `Ok` while the log may be written; otherwise why not ([`Error::Closed`] after
    /// `shutdown`, else [`Error::Poisoned`] with the first cause). `dir` names the log.
    pub(super) fn check(&self, dir: &Path) -> Result<()> {
        if !self.is_set() {
            return Ok(());
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed(dir.to_path_buf()));
        }
        let cause = self.cause.lock().clone();
        Err(Error::Poisoned(cause.unwrap_or_else(|| PoisonCause {
            op: "write the log",
            path: dir.to_path_buf(),
            kind: std::io::ErrorKind::Other,
            message: "an earlier operation failed".into(),
        })))
    }

    /// Poisons the log with `error` as its cause (unless it has one already) and returns the
    /// error.
    pub(super) fn set(&self, error: Error) -> Error {
        self.cause
            .lock()
            .get_or_insert_with(|| PoisonCause::of(&error));
        self.poisoned.store(true, Ordering::Release);
        error
    }

    /// Marks the log closed: every later call gets [`Error::Closed`].
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.poisoned.store(true, Ordering::Release);
    }

    /// The cause, the first time this is asked after the log was poisoned; `None` before and
    /// after.
    pub(super) fn take_unreported(&self) -> Option<PoisonCause> {
        if self.is_set() && !self.reported.swap(true, Ordering::AcqRel) {
            return self.cause.lock().clone();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Poison;
    use crate::error::Error;
    use crate::lock_order::Domain;
    use std::path::Path;

    fn failure(what: &str) -> Error {
        Error::io(
            "write segment",
            Path::new("/log").join(what),
            std::io::Error::other(what.to_string()),
        )
    }

    #[test]
    fn the_first_cause_stays_and_is_reported_once() {
        let poison = Poison::new(Domain::new());
        let dir = Path::new("/log");
        assert!(poison.check(dir).is_ok());
        assert!(poison.take_unreported().is_none());
        let _ = poison.set(failure("first"));
        let _ = poison.set(failure("second"));
        match poison.check(dir) {
            Err(Error::Poisoned(cause)) => assert!(cause.message.contains("first"), "{cause:?}"),
            other => panic!("expected the first cause, got {other:?}"),
        }
        let reported = poison.take_unreported();
        assert!(reported.is_some_and(|cause| cause.message.contains("first")));
        assert!(poison.take_unreported().is_none(), "reported twice");
    }

    #[test]
    fn a_closed_log_says_closed() {
        let poison = Poison::new(Domain::new());
        poison.close();
        assert!(poison.is_set());
        assert!(matches!(
            poison.check(Path::new("/log")),
            Err(Error::Closed(_))
        ));
    }
}
