//! A small log (a few hundred KiB) replays on the calling thread alone: recovery starts its
//! reading thread only past the first MiB, so short replays do not pay for one.

use crate::support;

use support::large::{config, threads, write_log};
use walcrypt::{KeyRing, Lsn, Mode, SyncMode, Wal};

#[test]
fn a_small_log_replays_on_the_calling_thread() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let lsns = write_log(
        dir.path(),
        config(Mode::PerRecord, &keys, SyncMode::Buffered),
        200 << 10,
    );
    let before = threads();
    let mut most = 0;
    let mut n = 0;
    let wal = Wal::open_and_replay(
        dir.path(),
        config(Mode::PerRecord, &keys, SyncMode::Buffered),
        Lsn::default(),
        |_| {
            most = most.max(threads());
            n += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(n, lsns.len());
    assert_eq!(most, before, "no second thread for a 200 KiB log");
    wal.close().unwrap();
}
