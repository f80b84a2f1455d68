//! CPU time of this process or of the calling thread (user and system), and the process's
//! context switches, from getrusage.

/// User and system CPU seconds used by the whole process so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTime {
    pub user: f64,
    pub sys: f64,
}

impl CpuTime {
    pub fn now() -> CpuTime {
        Self::of(libc::RUSAGE_SELF)
    }

    /// CPU used by the calling thread so far (Linux; elsewhere zero).
    pub fn thread_now() -> CpuTime {
        #[cfg(target_os = "linux")]
        return Self::of(libc::RUSAGE_THREAD);
        #[cfg(not(target_os = "linux"))]
        return CpuTime::default();
    }

    fn of(who: libc::c_int) -> CpuTime {
        let Some(usage) = rusage(who) else {
            return CpuTime::default();
        };
        let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
        CpuTime {
            user: secs(usage.ru_utime),
            sys: secs(usage.ru_stime),
        }
    }

    /// CPU used since `earlier`.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: (self.user - earlier.user).max(0.0),
            sys: (self.sys - earlier.sys).max(0.0),
        }
    }
}

/// Context switches of the whole process so far (every thread, exited ones included), from
/// getrusage `RUSAGE_SELF`: `voluntary` when a thread blocked (a lock, a condition variable, a
/// futex, I/O, a sleep), `involuntary` when the scheduler preempted it (its time slice ended,
/// or a thread of higher priority woke up). Neither depends on what a switch cost, only on how
/// often threads gave up their core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switches {
    pub voluntary: u64,
    pub involuntary: u64,
}

impl Switches {
    pub fn now() -> Switches {
        let Some(usage) = rusage(libc::RUSAGE_SELF) else {
            return Switches::default();
        };
        let count = |n: libc::c_long| u64::try_from(n).unwrap_or(0);
        Switches {
            voluntary: count(usage.ru_nvcsw),
            involuntary: count(usage.ru_nivcsw),
        }
    }

    /// Switches since `earlier`.
    pub fn since(self, earlier: Switches) -> Switches {
        Switches {
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }
}

fn rusage(who: libc::c_int) -> Option<libc::rusage> {
    // SAFETY: `rusage` is plain old data (integers only), so all-zero bytes are a valid
    // value, and getrusage writes one `rusage` into the valid, exclusively borrowed struct.
    let (rc, usage) = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let rc = libc::getrusage(who, &mut usage);
        (rc, usage)
    };
    (rc == 0).then_some(usage)
}
