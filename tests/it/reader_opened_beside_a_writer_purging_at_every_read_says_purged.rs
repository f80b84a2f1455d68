//! `Reader::open` lists the segments and then reads each header; a writer that checkpoints (and
//! so purges) between the listing and the reads makes it list again. A writer that does so after
//! every listing the open takes, more times than the open lists again, gets `Purged` naming the
//! oldest segment left, as a reader behind a purge does. A few such purges in a row, fewer than
//! the open's listings, are read past: the open succeeds on what is left.
//!
//! Before, the open gave up after four listings with the I/O error of the file gone ("open
//! segment …: No such file or directory"). Found by an outside probe, once also without a
//! hook, beside a stress run's writer.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::hooked::{Hooked, Hooks};
use crate::support::small_config;
use walcrypt::{Error, KeyRing, Lsn, Mode, Reader, Wal};

/// Right after each listing the reader takes (while `left` lasts), before it reads what the
/// listing names, the writer fills one more segment and checkpoints at its end, purging every
/// segment before that.
struct PurgeAtEveryRead {
    wal: Arc<Wal>,
    left: AtomicU32,
    one_at_a_time: Mutex<()>,
}

impl Hooks for PurgeAtEveryRead {
    fn listed(&self, _dir: &Path, _names: &[String]) {
        let _one = self.one_at_a_time.lock().unwrap();
        if self.left.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.left.fetch_sub(1, Ordering::SeqCst);
        let target = u64::from(self.wal.end_lsn()) + self.wal.geometry().segment_size;
        while u64::from(self.wal.end_lsn()) < target {
            self.wal.append(1, &[7u8; 300]).unwrap();
        }
        self.wal.checkpoint(self.wal.end_lsn(), b"c").unwrap();
    }
}

#[test]
fn reader_opened_beside_a_writer_purging_at_every_read_says_purged() {
    for mode in Mode::ALL {
        for purges in [3, 40] {
            let dir = tempfile::tempdir().unwrap();
            let keys = KeyRing::generate().unwrap();
            let wal = Arc::new(Wal::open(dir.path(), small_config(mode, &keys)).unwrap());
            for _ in 0..40 {
                wal.append(1, &[1u8; 300]).unwrap();
            }
            wal.flush(wal.end_lsn()).unwrap();
            let hooks = Arc::new(PurgeAtEveryRead {
                wal: wal.clone(),
                left: AtomicU32::new(purges),
                one_at_a_time: Mutex::new(()),
            });
            let opened =
                Reader::open_with_storage(dir.path(), Some(keys.clone()), Arc::new(Hooked(hooks)));
            match (purges, opened) {
                (3, Ok(reader)) => {
                    let read: Result<Vec<_>, _> = reader.records_from(Lsn::default()).collect();
                    read.unwrap_or_else(|e| panic!("{mode}: reading what is left: {e}"));
                }
                (40, Err(Error::Purged { needed, oldest })) => {
                    assert!(needed < oldest, "{mode}: needed {needed}, oldest {oldest}");
                }
                (n, other) => panic!("{mode}, {n} purges: {:?}", other.map(|_| "opened")),
            }
        }
    }
}
