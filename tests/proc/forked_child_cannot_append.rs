//! A forked child that inherits an open Wal cannot write with it (it would repeat the parent's
//! IVs): flush, purge and rotation fail with ForeignProcess, so nothing the child appends (an
//! append only seals into the child's memory) reaches the disk. The parent keeps appending, and
//! exactly the records it appended read back.

use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, Wal};

#[test]
fn forked_child_cannot_append() {
    let _serial = crate::support::serial();
    for mode in [Mode::PerRecord, Mode::PageLevel] {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = walcrypt::Config::new(mode).keys(keys.clone());
        let wal = Wal::open(dir.path(), config).unwrap();
        let lsn = wal.append(1, b"before the fork").unwrap();
        wal.flush(lsn).unwrap();
        wal.append(1, b"buffered, not flushed").unwrap();

        // SAFETY (test only): the child touches no lock and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let refused = |r: walcrypt::Result<()>| matches!(r, Err(Error::ForeignProcess { .. }));
            let mine = wal.append(2, b"from the child");
            let ok = mine.is_ok_and(|mine| refused(wal.flush(mine)))
                && refused(wal.purge_before(lsn).map(|_| ()))
                && refused(wal.rotate_data_key().map(|_| ()))
                && refused(wal.activate_key(7, walcrypt::Key::generate().unwrap()))
                && refused(wal.close());
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{mode}: child did not exit");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "{mode}: the child was not refused"
        );

        wal.append(1, b"after the fork").unwrap();
        wal.close().unwrap();
        let reader = Reader::open(dir.path(), Some(keys)).unwrap();
        let payloads: Vec<_> = reader
            .records_from(Lsn::default())
            .map(|r| r.unwrap().payload)
            .collect();
        assert_eq!(
            payloads,
            vec![
                b"before the fork".to_vec(),
                b"buffered, not flushed".to_vec(),
                b"after the fork".to_vec()
            ],
            "{mode}"
        );
    }
}
