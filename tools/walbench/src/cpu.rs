//! CPU time of this process or of the calling thread (user and system), from getrusage.

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
        // SAFETY: `rusage` is plain old data (integers only), so all-zero bytes are a valid
        // value, and getrusage writes one `rusage` into the valid, exclusively borrowed struct.
        let (rc, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let rc = libc::getrusage(who, &mut usage);
            (rc, usage)
        };
        if rc != 0 {
            return CpuTime::default();
        }
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
