//! Once warmed, `append` and a Buffered `flush` make no heap allocation in any mode (without
//! compression, within one segment), and `append_batch` makes one: the list of LSNs it
//! returns. Counted by this binary's allocator, on the calling thread only.
//!
//! Three allocations per `append` (its lengths, IVs and LSNs) were about a tenth of a
//! Buffered oltp transaction's instructions outside the engine (docs/BENCHMARKS.md, "An append
//! without allocations").

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use walcrypt::{Config, KeyRing, Mode, SyncMode, Wal};

/// The system allocator, counting the allocations of the threads that asked it to.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: a thread being torn down has no locals left, and is not counted.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every call is passed on unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counting touches only const-initialised thread locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: `ptr` was allocated by `System` (every allocation here is) with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations `work` makes on this thread.
fn allocations(work: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    work();
    COUNTING.with(|on| on.set(false));
    ALLOCATIONS.with(|n| n.get())
}

#[test]
fn appends_and_buffered_commits_allocate_nothing() {
    let _serial = crate::support::serial();
    let keys = KeyRing::generate().unwrap();
    let payloads: Vec<Vec<u8>> = [96usize, 112, 104, 88, 24]
        .iter()
        .map(|&n| vec![0x5a; n])
        .collect();
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(
            dir.path(),
            Config::new(mode)
                .keys(keys.clone())
                .sync(SyncMode::Buffered),
        )
        .unwrap();
        let txn = |wal: &Wal| {
            for p in &payloads {
                wal.append(1, p).unwrap();
            }
            wal.flush(wal.end_lsn()).unwrap();
        };
        let batch = |wal: &Wal| {
            let lsns = wal
                .append_batch(payloads.iter().map(|p| (1u8, p.as_slice())))
                .unwrap();
            wal.flush(lsns[lsns.len() - 1]).unwrap();
        };
        // Warm: the thread's IV block, seal buffer and lane, the buffer's pages.
        for _ in 0..200 {
            txn(&wal);
            batch(&wal);
        }
        // 2,000 transactions of about 500 bytes stay in the first 16 MiB segment.
        let appends = allocations(|| (0..1000).for_each(|_| txn(&wal)));
        let batches = allocations(|| (0..1000).for_each(|_| batch(&wal)));
        assert_eq!(
            appends, 0,
            "{mode}: allocations in 1,000 x (5 appends + flush)"
        );
        assert_eq!(
            batches, 1000,
            "{mode}: allocations in 1,000 x (append_batch + flush)"
        );
        wal.close().unwrap();
    }
}
