//! A forked child that drops the `Wal` it inherited exits promptly, whatever the parent's
//! threads were doing at the fork: it takes no lock (a lock a parent thread held at the fork
//! stays locked forever in the child). 200 children are forked while one parent thread keeps
//! taking the segment preparer's lock (`prepare_next_segment`) and another appends; each child
//! drops its copy and exits, and every one must exit within 5 s. Before, the drop took the
//! preparer's lock and children hung.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use walcrypt::{Config, KeyRing, Mode, Wal};

const CHILDREN: usize = 200;

/// Waits for `pid` up to `limit`; true when it exited with status 0. Kills it otherwise.
fn exits_within(pid: libc::pid_t, limit: Duration) -> bool {
    let started = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY (test only): waitpid on our own child.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            return libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        }
        if started.elapsed() > limit {
            // SAFETY (test only): our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn forked_child_dropping_a_wal_never_deadlocks() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let config = Config::new(Mode::PerRecord)
        .keys(KeyRing::generate().unwrap())
        .page_size(512)
        .segment_size(4096);
    let wal = Wal::open(dir.path(), config).unwrap();
    let stop = AtomicBool::new(false);
    let mut hung = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = wal.prepare_next_segment();
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let lsn = wal.append(1, &[7; 300]).unwrap();
                wal.flush(lsn).unwrap();
                wal.purge_before(lsn).unwrap();
            }
        });
        for _ in 0..CHILDREN {
            // SAFETY (test only): the child only drops its copy of the Wal (a bitwise copy
            // taken in the child, which never returns, so it is dropped once) and leaves
            // with _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let mine = unsafe { std::ptr::read(&wal) };
                drop(mine);
                unsafe { libc::_exit(0) };
            }
            if !exits_within(pid, Duration::from_secs(5)) {
                hung += 1;
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(hung, 0, "a child did not exit");
    wal.close().unwrap();
}
