//! The shared-line ledger: how many times the writer's threads write a cache line other
//! threads also write, and how many of those writes take the line from another thread.
//!
//! The writer's atomics that several threads write are `LineU64`, `LineU32`,
//! `LineUsize` and `LineBool` here, and its mutexes are `OrderedMutex` (lock_order.rs).
//! Without the cargo feature `line-ledger` (the default) each wrapper is a
//! `#[repr(transparent)]` newtype over the standard atomic with `#[inline]` methods that call
//! it and nothing else: the same code as the bare atomic. Under `cfg(loom)` they wrap loom's
//! atomics, so the model checker sees every access as before.
//!
//! # The types and their methods
//!
//! `LineU64`, `LineU32`, `LineUsize` (integers) and `LineBool`, each with:
//!
//! - `new(value)` (a `const fn` outside loom builds) and `named(label, value)`: the same
//!   value; the label (`&'static str`, say `"insert_end"`) names the line in
//!   [`take_thread_sites`] and is dropped without the feature. `new` labels it `"unnamed"`.
//! - `load`, `store`, `swap`, `compare_exchange`, `compare_exchange_weak`, `into_inner`, and
//!   outside loom builds `get_mut`, with the standard library's signatures.
//! - integers only: `fetch_add`, `fetch_sub`, `fetch_max`, `fetch_min`; `LineBool`:
//!   `fetch_or`, `fetch_and`.
//! - `raw()`: the atomic itself, for passing its address to a wait (`atomic-wait` on
//!   `GroupCommit`'s round counter). Writes through it are not counted; use it only to wait
//!   and wake.
//!
//! With the feature, and only then, the public [`take_thread_counts`], [`take_thread_sites`]
//! and [`LineCounts`] exist (`walcrypt::line_ledger::...`).
//!
//! # What is counted (feature `line-ledger`)
//!
//! Per thread, in thread-local counters that only the thread itself touches:
//!
//! - a **write**: every `store`, `swap`, `fetch_*`, and every `compare_exchange` or
//!   `compare_exchange_weak`, successful or not (a failed compare-and-swap still takes the
//!   line exclusive); on an `OrderedMutex`, two per hold (the acquisition and the release
//!   each write the lock word; both are counted when `lock` is called, before it waits, or
//!   when `try_lock` succeeds, so a hold's timing holds as little counting as it can), and
//!   two more for each condition-variable wait in the hold (it releases and retakes the
//!   lock).
//! - a **line transfer**: a write whose previous counted write to the same wrapper (or the
//!   same mutex's acquisition) was by another thread. Each wrapper keeps the small number of
//!   its last writing thread for this (a field that exists only with the feature); the first
//!   write to a wrapper is not a transfer. A mutex counts the rule on its acquisition only
//!   (its release is by the same thread).
//!
//! Writes are counted exactly. Transfers are counted in the order the writers record
//! themselves (a load and, if it changed, a store of the writer's number, after the write):
//! when two threads write one line at the same instant, the order recorded may differ from
//! the order the hardware gave the line, but every change of owner that the recorded order
//! shows is counted once.
//!
//! # What is not counted
//!
//! - loads: they share a line, they do not take it (a load after another core's write still
//!   misses, which this ledger does not see);
//! - the bytes copied into the buffer's page slots (a plain memcpy into memory one appender
//!   owns for that page while it copies; it moves lines between cores when the write-out
//!   reads them, but it is data, not a shared control word), and the page images, records
//!   and buffers a thread owns;
//! - a contended mutex's extra writes to its lock word (spinning, the parked bit, the
//!   futex hand-off inside parking_lot), condition variables' own state, the futex wake and
//!   wait of group commit (the kernel's lines), and `Arc` reference counts;
//! - atomics not (yet) wrapped in this type; each file that uses them says which are;
//! - writes made by threads the caller does not ask: each thread takes its own counts.
//!
//! So the counts are a lower bound on the coherence traffic of the control words, and an
//! exact count of the writes the code makes to them.

#[cfg(loom)]
use loom::sync::atomic as imp;
#[cfg(not(loom))]
use std::sync::atomic as imp;
use std::sync::atomic::Ordering;

/// Writes and line transfers counted on one thread (feature `line-ledger`).
#[cfg(feature = "line-ledger")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineCounts {
    /// Writes to shared lines: stores, read-modify-writes, compare-and-swaps (failed ones
    /// too), two per mutex hold.
    pub writes: u64,
    /// Those writes whose line was last written by another thread.
    pub transfers: u64,
}

#[cfg(feature = "line-ledger")]
impl std::ops::AddAssign for LineCounts {
    fn add_assign(&mut self, other: LineCounts) {
        self.writes += other.writes;
        self.transfers += other.transfers;
    }
}

/// The calling thread's counts since its last take, summed over every line; resets them
/// (also the per-line counts of [`take_thread_sites`]).
#[cfg(feature = "line-ledger")]
pub fn take_thread_counts() -> LineCounts {
    let mut total = LineCounts::default();
    for (_, counts) in take_thread_sites() {
        total += counts;
    }
    total
}

/// The calling thread's counts since its last take, per line label (the wrapper's `named`
/// label, a mutex's level name), in the order first written; resets them.
#[cfg(feature = "line-ledger")]
pub fn take_thread_sites() -> Vec<(&'static str, LineCounts)> {
    let by_address = counting::SITES
        .try_with(|sites| std::mem::take(&mut *sites.borrow_mut()))
        .unwrap_or_default();
    // The same label may sit at several addresses (one per crate or codegen unit).
    let mut sites: Vec<(&'static str, LineCounts)> = Vec::with_capacity(by_address.len());
    for (label, counts) in by_address {
        match sites.iter_mut().find(|(l, _)| *l == label) {
            Some((_, total)) => *total += counts,
            None => sites.push((label, counts)),
        }
    }
    sites
}

#[cfg(feature = "line-ledger")]
mod counting {
    use super::LineCounts;
    use std::cell::{Cell, RefCell};
    use std::sync::atomic::{AtomicU32, Ordering};

    thread_local! {
        /// This thread's number, drawn at its first counted write (0: not drawn yet).
        static ME: Cell<u32> = const { Cell::new(0) };
        pub(super) static SITES: RefCell<Vec<(&'static str, LineCounts)>> =
            const { RefCell::new(Vec::new()) };
    }

    fn me() -> u32 {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        ME.try_with(|me| {
            if me.get() == 0 {
                me.set(NEXT.fetch_add(1, Ordering::Relaxed).max(1));
            }
            me.get()
        })
        .unwrap_or(u32::MAX)
    }

    /// The number of the thread that last wrote a line (0: nobody yet).
    #[derive(Debug, Default)]
    pub(crate) struct LastWriter(AtomicU32);

    impl LastWriter {
        pub(crate) const fn new() -> LastWriter {
            LastWriter(AtomicU32::new(0))
        }

        /// Counts a write by this thread, and a transfer if another thread wrote last.
        #[inline]
        pub(crate) fn wrote(&self, label: &'static str) {
            self.wrote_n(label, 1);
        }

        /// Counts `writes` writes by this thread, and one transfer if another thread wrote
        /// last (a mutex hold: the acquisition may take the line, the release finds it here).
        #[inline]
        pub(crate) fn wrote_n(&self, label: &'static str, writes: u64) {
            let me = me();
            let last = self.0.load(Ordering::Relaxed);
            let transfer = last != me && last != 0;
            if last != me {
                self.0.store(me, Ordering::Relaxed);
            }
            count(label, writes, u64::from(transfer));
        }
    }

    /// Counts `writes` writes (and `transfers` transfers) on `label` for this thread. Looked
    /// up by the label's address, a few pointer comparisons; [`super::take_thread_sites`]
    /// merges equal labels.
    #[inline]
    fn count(label: &'static str, writes: u64, transfers: u64) {
        let _ = SITES.try_with(|sites| {
            let mut sites = sites.borrow_mut();
            let site = match sites.iter().position(|(l, _)| std::ptr::eq(*l, label)) {
                Some(i) => &mut sites[i].1,
                None => {
                    sites.push((label, LineCounts::default()));
                    let last = sites.len() - 1;
                    &mut sites[last].1
                }
            };
            site.writes += writes;
            site.transfers += transfers;
        });
    }
}

#[cfg(feature = "line-ledger")]
pub(crate) use counting::LastWriter;

/// Defines a wrapper around one atomic type; `$int` adds the integer read-modify-writes,
/// `$bool` the boolean ones.
macro_rules! line_type {
    ($(#[$doc:meta])* $name:ident, $atomic:ident, $t:ty, $kind:ident) => {
        $(#[$doc])*
        #[cfg_attr(not(feature = "line-ledger"), repr(transparent))]
        #[derive(Debug)]
        pub(crate) struct $name {
            value: imp::$atomic,
            #[cfg(feature = "line-ledger")]
            last: LastWriter,
            #[cfg(feature = "line-ledger")]
            label: &'static str,
        }

        impl Default for $name {
            fn default() -> Self {
                $name::new(<$t>::default())
            }
        }

        #[allow(dead_code)] // each wrapper offers the whole subset; not every one uses it all
        impl $name {
            /// A line holding `value`, labelled `"unnamed"` in the ledger.
            #[cfg(not(loom))]
            #[inline]
            pub(crate) const fn new(value: $t) -> Self {
                Self::named("unnamed", value)
            }

            /// A line holding `value`, labelled `label` in the ledger.
            #[cfg(not(loom))]
            #[inline]
            pub(crate) const fn named(label: &'static str, value: $t) -> Self {
                #[cfg(not(feature = "line-ledger"))]
                let _ = label;
                $name {
                    value: imp::$atomic::new(value),
                    #[cfg(feature = "line-ledger")]
                    last: LastWriter::new(),
                    #[cfg(feature = "line-ledger")]
                    label,
                }
            }

            /// A line holding `value`, labelled `"unnamed"` in the ledger.
            #[cfg(loom)]
            pub(crate) fn new(value: $t) -> Self {
                Self::named("unnamed", value)
            }

            /// A line holding `value`, labelled `label` in the ledger.
            #[cfg(loom)]
            pub(crate) fn named(label: &'static str, value: $t) -> Self {
                #[cfg(not(feature = "line-ledger"))]
                let _ = label;
                $name {
                    value: imp::$atomic::new(value),
                    #[cfg(feature = "line-ledger")]
                    last: LastWriter::new(),
                    #[cfg(feature = "line-ledger")]
                    label,
                }
            }

            #[inline]
            fn wrote(&self) {
                #[cfg(feature = "line-ledger")]
                self.last.wrote(self.label);
            }

            /// The atomic itself, to wait and wake on its address; writes through it are not
            /// counted.
            #[inline]
            pub(crate) fn raw(&self) -> &imp::$atomic {
                &self.value
            }

            #[inline]
            pub(crate) fn load(&self, order: Ordering) -> $t {
                self.value.load(order)
            }

            #[inline]
            pub(crate) fn store(&self, value: $t, order: Ordering) {
                self.value.store(value, order);
                self.wrote();
            }

            #[inline]
            pub(crate) fn swap(&self, value: $t, order: Ordering) -> $t {
                let old = self.value.swap(value, order);
                self.wrote();
                old
            }

            #[inline]
            pub(crate) fn compare_exchange(
                &self,
                current: $t,
                new: $t,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$t, $t> {
                let result = self.value.compare_exchange(current, new, success, failure);
                self.wrote();
                result
            }

            #[inline]
            pub(crate) fn compare_exchange_weak(
                &self,
                current: $t,
                new: $t,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$t, $t> {
                let result = self.value.compare_exchange_weak(current, new, success, failure);
                self.wrote();
                result
            }

            #[inline]
            pub(crate) fn into_inner(self) -> $t {
                self.value.into_inner()
            }

            #[cfg(not(loom))]
            #[inline]
            pub(crate) fn get_mut(&mut self) -> &mut $t {
                self.value.get_mut()
            }

            line_type!(@$kind $t);
        }
    };
    (@int $t:ty) => {
        line_type!(@rmw $t, fetch_add, fetch_sub, fetch_max, fetch_min);
    };
    (@bool $t:ty) => {
        line_type!(@rmw $t, fetch_or, fetch_and);
    };
    (@rmw $t:ty, $($op:ident),+) => {
        $(
            #[inline]
            pub(crate) fn $op(&self, value: $t, order: Ordering) -> $t {
                let old = self.value.$op(value, order);
                self.wrote();
                old
            }
        )+
    };
}

line_type!(
    /// An `AtomicU64` several threads write; its writes are counted with `line-ledger`.
    LineU64, AtomicU64, u64, int
);
line_type!(
    /// An `AtomicU32` several threads write; its writes are counted with `line-ledger`.
    LineU32, AtomicU32, u32, int
);
line_type!(
    /// An `AtomicUsize` several threads write; its writes are counted with `line-ledger`.
    LineUsize, AtomicUsize, usize, int
);
line_type!(
    /// An `AtomicBool` several threads write; its writes are counted with `line-ledger`.
    LineBool, AtomicBool, bool, bool
);

#[cfg(all(test, feature = "line-ledger", not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_write_by_one_thread_then_another_counts_a_transfer() {
        let line = LineU64::named("test line", 0);
        take_thread_counts();
        line.store(1, Ordering::Relaxed);
        line.fetch_add(1, Ordering::Relaxed);
        assert_eq!(
            take_thread_counts(),
            LineCounts {
                writes: 2,
                transfers: 0
            },
            "the first writer takes no line from anyone"
        );
        let other = std::thread::scope(|s| {
            s.spawn(|| {
                take_thread_counts();
                line.fetch_max(5, Ordering::Relaxed);
                line.store(6, Ordering::Relaxed);
                take_thread_counts()
            })
            .join()
            .unwrap()
        });
        assert_eq!(
            other,
            LineCounts {
                writes: 2,
                transfers: 1
            }
        );
        line.swap(7, Ordering::Relaxed);
        assert_eq!(
            take_thread_sites(),
            vec![(
                "test line",
                LineCounts {
                    writes: 1,
                    transfers: 1
                }
            )],
            "the line came back from the other thread"
        );
    }

    #[test]
    fn a_failed_compare_and_swap_counts_as_a_write_and_a_load_does_not() {
        let flag = LineBool::new(true);
        take_thread_counts();
        assert!(flag.load(Ordering::Relaxed));
        assert!(
            flag.compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
                .is_err()
        );
        assert_eq!(take_thread_counts().writes, 1);
    }
}
