//! A purge with a key store lists the segments again after its removals, to find the keys no
//! segment lists any more, and reads each listed segment's header. Another purge running beside
//! it may remove a segment between that listing and that read. The purge must not fail for it:
//! the segment is gone, so it lists no key. Here the other purge is played by the storage,
//! which removes the next segment right after the first listing that no longer holds the
//! purged one.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use support::hooked::{Hooked, Hooks};
use walcrypt::inspect::segment_file_name;
use walcrypt::{Config, Kek, KeyProvider, KeyStore, Lsn, Mode, SyncMode, Wal};

const SEGMENT: u64 = 4096;

/// Armed with (the purged segment, the one the other purge removes).
struct OtherPurge(Mutex<Option<(PathBuf, PathBuf)>>);

impl Hooks for OtherPurge {
    fn listed(&self, _dir: &Path, _names: &[String]) {
        let mut armed = self.0.lock().unwrap();
        if let Some((purged, next)) = armed.as_ref()
            && !purged.exists()
            && next.exists()
        {
            std::fs::remove_file(next).unwrap();
            *armed = None;
        }
    }
}

#[test]
fn purge_beside_another_purge_tolerates_a_vanished_segment() {
    for recycle in [0, 4] {
        let dir = tempfile::tempdir().unwrap();
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
        let store = Arc::new(KeyStore::create(dir.path().join("keys"), kek).unwrap());
        let log = dir.path().join("log");
        let hooks = Arc::new(OtherPurge(Mutex::new(None)));
        let config = Config::new(Mode::PerRecord)
            .key_store(store)
            .sync(SyncMode::Durable)
            .page_size(512)
            .segment_size(SEGMENT)
            .prepare_segments(false)
            .recycle_segments(recycle)
            .storage(Arc::new(Hooked(hooks.clone())));
        let wal = Wal::open(&log, config).unwrap();
        while u64::from(wal.end_lsn()) < 4 * SEGMENT {
            let lsn = wal.append(1, &[7; 200]).unwrap();
            wal.flush(lsn).unwrap();
        }
        let path = |i: u64| log.join(segment_file_name(Lsn(i * SEGMENT)));
        *hooks.0.lock().unwrap() = Some((path(0), path(1)));
        let purged = wal
            .purge_before(Lsn(SEGMENT))
            .unwrap_or_else(|e| panic!("recycle {recycle}: {e}"));
        assert_eq!(purged, 1, "recycle {recycle}");
        assert!(
            hooks.0.lock().unwrap().is_none(),
            "recycle {recycle}: the other purge never ran"
        );
        assert!(!path(1).exists(), "recycle {recycle}");
    }
}
