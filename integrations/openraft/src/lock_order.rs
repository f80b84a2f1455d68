//! The crate's mutexes, each with a fixed level, and the one order they are taken in.
//!
//! # Lock order
//!
//! 1. [`READER`]: the follower kept for reads below the cache (`Inner::reader`). Held for a
//!    whole read from the log, and by a purge while it removes segment files.
//! 2. [`STATE`]: the in-memory state (`Inner::state`). Held for short steps: an append or a
//!    truncation with its record, a look at the index or the cache.
//! 3. [`SNAPSHOT_FILE`]: the key-value state machine's snapshot file (`kv::SnapshotDir`).
//!    Held, on a blocking thread, while a snapshot is sealed into the file, so that snapshots
//!    are written one at a time and an older one never replaces a newer one.
//! 4. [`MACHINE`]: the key-value state machine's data and current snapshot. Held for short
//!    steps, never across an `.await`.
//!
//! The store's locks and the state machine's are never held together today; their levels
//! still put them in one order.
//!
//! A thread holding a lock takes only locks of a higher level: `STATE` may be taken while
//! `READER` is held, never `READER` while `STATE` is held. So a truncation that must read
//! from the log takes `READER` before `STATE`, and a read below the cache may look at the
//! state while it holds `READER`. Two threads can then never each hold the lock the other
//! waits for.
//!
//! In debug builds every acquisition checks the order: a thread-local set of the levels held
//! by this thread, asserted on acquire (with `debug_assert!`) and cleared on release by the
//! guard, so every test that takes the locks checks the order for free. In release builds
//! the guard is the `parking_lot` guard alone and the check is compiled out.

use std::ops::{Deref, DerefMut};

use parking_lot::{Mutex, MutexGuard};

/// The level of the reader's lock: taken first.
pub(crate) const READER: u8 = 0;
/// The level of the state lock: taken after [`READER`], never before it.
pub(crate) const STATE: u8 = 1;
/// The level of the state machine's snapshot file lock: taken before [`MACHINE`].
pub(crate) const SNAPSHOT_FILE: u8 = 2;
/// The level of the state machine's data lock: taken last.
pub(crate) const MACHINE: u8 = 3;

/// A mutex at level `LEVEL` of the lock order.
pub(crate) struct OrderedMutex<T, const LEVEL: u8> {
    mutex: Mutex<T>,
}

impl<T, const LEVEL: u8> OrderedMutex<T, LEVEL> {
    pub(crate) fn new(value: T) -> Self {
        OrderedMutex {
            mutex: Mutex::new(value),
        }
    }

    /// Takes the lock; in debug builds, asserts that this thread holds no lock of this level
    /// or a higher one.
    pub(crate) fn lock(&self) -> OrderedGuard<'_, T, LEVEL> {
        #[cfg(debug_assertions)]
        held::acquire(LEVEL);
        OrderedGuard {
            guard: self.mutex.lock(),
        }
    }
}

/// A held [`OrderedMutex`]; dropping it releases the lock (and, in debug builds, its level).
pub(crate) struct OrderedGuard<'a, T, const LEVEL: u8> {
    guard: MutexGuard<'a, T>,
}

impl<T, const LEVEL: u8> Deref for OrderedGuard<'_, T, LEVEL> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T, const LEVEL: u8> DerefMut for OrderedGuard<'_, T, LEVEL> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(debug_assertions)]
impl<T, const LEVEL: u8> Drop for OrderedGuard<'_, T, LEVEL> {
    fn drop(&mut self) {
        held::release(LEVEL);
    }
}

/// The levels held by the current thread, one bit each (debug builds only).
#[cfg(debug_assertions)]
mod held {
    use std::cell::Cell;

    thread_local! {
        static HELD: Cell<u32> = const { Cell::new(0) };
    }

    pub(super) fn acquire(level: u8) {
        HELD.with(|held| {
            let mask = held.get();
            // Bits of this level and every higher one.
            let same_or_higher = !((1u32 << level) - 1);
            debug_assert!(
                mask & same_or_higher == 0,
                "lock order broken: taking the lock of level {level} while holding levels \
                 {mask:#b} (see lock_order.rs: reader, state, snapshot file, machine)"
            );
            held.set(mask | 1 << level);
        });
    }

    pub(super) fn release(level: u8) {
        HELD.with(|held| held.set(held.get() & !(1u32 << level)));
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn taking_the_locks_in_order_and_again_after_release_passes() {
        let reader = OrderedMutex::<u32, READER>::new(0);
        let state = OrderedMutex::<u32, STATE>::new(0);
        {
            let _r = reader.lock();
            let _s = state.lock();
        }
        let s = state.lock();
        drop(s);
        let _r = reader.lock();
    }

    #[test]
    #[should_panic(expected = "lock order broken")]
    fn taking_the_reader_lock_while_holding_the_state_lock_panics_in_debug_builds() {
        let reader = OrderedMutex::<u32, READER>::new(0);
        let state = OrderedMutex::<u32, STATE>::new(0);
        let _s = state.lock();
        let _r = reader.lock();
    }
}
