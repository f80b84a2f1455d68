//! The workers' system calls in a cell, counted by the kernel: `futex` calls (a lock, a
//! condition variable or group commit's wait word went to the kernel to sleep or to wake
//! someone, whether or not anyone then slept) and all system calls, from the tracepoints
//! `syscalls:sys_enter_futex` and `raw_syscalls:sys_enter` through `perf_event_open`
//! (`perf-event2`). Neither depends on how many cores ran the cell or how long a call took,
//! only on how often the commit path entered the kernel.
//!
//! Each worker counts its own thread from the cell's start to the end of its loop, as the
//! shared-line ledger does (lines.rs): the library's background threads (the segment
//! preparer) and walbench's main thread are not in the counts. Where the kernel does not
//! allow it (not Linux, no tracefs, `perf_event_paranoid` too strict for an unprivileged
//! user), nothing is counted and the tables print `—`.

/// System calls one thread, or all workers of a cell, made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calls {
    pub futex: u64,
    pub all: u64,
}

impl Calls {
    pub fn add(&mut self, other: Calls) {
        self.futex += other.futex;
        self.all += other.all;
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::Calls;
    use perf_event::events::Tracepoint;
    use perf_event::{Builder, Counter};
    use std::sync::OnceLock;

    /// Where tracefs is usually mounted: its own mount, or under debugfs.
    const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

    /// The ids of `syscalls/sys_enter_futex` and `raw_syscalls/sys_enter`, looked up once.
    fn ids() -> Option<(u64, u64)> {
        static IDS: OnceLock<Option<(u64, u64)>> = OnceLock::new();
        *IDS.get_or_init(|| {
            let id = |event: &str| {
                TRACEFS.iter().find_map(|root| {
                    let text = std::fs::read_to_string(format!("{root}/events/{event}/id")).ok()?;
                    text.trim().parse::<u64>().ok()
                })
            };
            Some((
                id("syscalls/sys_enter_futex")?,
                id("raw_syscalls/sys_enter")?,
            ))
        })
    }

    /// Counting the calling thread's system calls.
    pub struct Counting {
        futex: Counter,
        all: Counter,
    }

    impl Counting {
        /// Starts counting; `None` where the kernel does not allow it.
        pub fn start() -> Option<Counting> {
            let (futex, all) = ids()?;
            let counter = |id: u64| -> Option<Counter> {
                // A tracepoint fires in the kernel: counting kernel events is what lets
                // `raw_syscalls:sys_enter` count at all (the per-syscall tracepoints count
                // either way).
                let mut counter = Builder::new(Tracepoint::with_id(id))
                    .observe_self()
                    .any_cpu()
                    .exclude_kernel(false)
                    .build()
                    .ok()?;
                counter.enable().ok()?;
                Some(counter)
            };
            Some(Counting {
                futex: counter(futex)?,
                all: counter(all)?,
            })
        }

        /// The calls counted since [`Counting::start`]; `None` if a counter could not be read.
        pub fn stop(mut self) -> Option<Calls> {
            let futex = self.futex.read().ok()?;
            let all = self.all.read().ok()?;
            Some(Calls { futex, all })
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::Calls;

    pub struct Counting;

    impl Counting {
        pub fn start() -> Option<Counting> {
            None
        }

        pub fn stop(self) -> Option<Calls> {
            None
        }
    }
}

pub use imp::Counting;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Where the kernel lets this process count, the counts follow the calls it makes: a
    /// thousand futex wakes with nobody waiting are each one futex call (and one system call).
    #[test]
    fn counts_follow_the_calls_made() {
        let Some(counting) = Counting::start() else {
            eprintln!("system calls cannot be counted here (no tracefs or no permission)");
            return;
        };
        let word = std::sync::atomic::AtomicU32::new(0);
        for _ in 0..1000 {
            atomic_wait::wake_one(&word);
        }
        let calls = counting.stop().expect("the counters read back");
        assert!(
            (1000..1100).contains(&calls.futex),
            "1000 futex wakes counted as {} futex calls",
            calls.futex
        );
        // The counters' own set-up and reads add a few calls, nothing else runs here.
        assert!(
            (calls.futex..calls.futex + 200).contains(&calls.all),
            "{calls:?}"
        );
    }
}
