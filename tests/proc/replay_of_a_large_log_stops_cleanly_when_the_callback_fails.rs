//! A replay long enough to read ahead on a second thread stops where the callback says: its
//! error (or its panic) comes back unchanged, no thread is left behind, and the log opens
//! again with every record.

use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};

use support::large::{config, payload, threads, write_log};
use walcrypt::{Error, KeyRing, Lsn, Mode, SyncMode, Wal};

/// The thread count once the operating system has reaped threads that finished: a thread
/// that returned may stay listed for a moment while it exits.
fn threads_after_exit(expected: usize) -> usize {
    for _ in 0..200 {
        if threads() == expected {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    threads()
}

#[test]
fn callback_error_and_panic_stop_the_replay_and_leave_no_thread() {
    let _serial = crate::support::serial();
    for mode in Mode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let lsns = write_log(dir.path(), config(mode, &keys, SyncMode::Buffered), 4 << 20);
        // At about 1.5 MiB: past the first MiB, and far enough from the end that the reading
        // thread is still at work (it reads at most about 1.5 MiB ahead).
        let stop_at = lsns.len() * 3 / 8;
        let before = threads();

        // The callback fails deep in the log: its error comes back, after exactly the records
        // before it, and a second thread was reading ahead by then.
        let mut seen = Vec::new();
        let mut during = 0;
        let failed = Wal::open_and_replay(
            dir.path(),
            config(mode, &keys, SyncMode::Buffered),
            Lsn::default(),
            |r| {
                if seen.len() == stop_at {
                    during = threads();
                    return Err(Error::Config("the engine refused this record".into()));
                }
                assert_eq!(r.payload, payload(seen.len()), "{mode}");
                seen.push(r.lsn);
                Ok(())
            },
        );
        match failed {
            Err(Error::Config(why)) => assert!(why.contains("refused"), "{mode}: {why}"),
            other => panic!("{mode}: expected the callback's error, got {other:?}"),
        }
        assert_eq!(seen, lsns[..stop_at], "{mode}");
        assert_eq!(
            during,
            before + 1,
            "{mode}: one reading thread past the first MiB"
        );
        assert_eq!(
            threads_after_exit(before),
            before,
            "{mode}: the reading thread ended"
        );

        // A panicking callback: the panic reaches the caller, the reading thread ends, and the
        // directory is free again.
        let mut count = 0;
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            Wal::open_and_replay(
                dir.path(),
                config(mode, &keys, SyncMode::Buffered),
                Lsn::default(),
                |_| {
                    count += 1;
                    assert!(count < stop_at, "the engine gave up");
                    Ok(())
                },
            )
        }));
        assert!(panicked.is_err(), "{mode}: the panic must reach the caller");
        assert_eq!(
            threads_after_exit(before),
            before,
            "{mode}: the reading thread ended after the panic"
        );

        // Nothing was truncated: the whole log replays.
        let mut all = Vec::new();
        let wal = Wal::open_and_replay(
            dir.path(),
            config(mode, &keys, SyncMode::Buffered),
            Lsn::default(),
            |r| {
                all.push(r.lsn);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(all, lsns, "{mode}");
        wal.close().unwrap();
    }
}
