//! A follower attached to a live Wal (`Follower::attach`) before the Wal rotates its data key
//! yields every record, those under the new key included: meeting a key id it lacks, it takes
//! the Wal's current keys. It used to stop with `MissingKey` for key 2 at the first record after the
//! rotation. perrecord, pagelevel and perrecord-gcm.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use support::hooked::{Hooked, Hooks};
use walcrypt::storage::Storage;
use walcrypt::{Config, Follower, Kek, KeyProvider, KeyStore, Lsn, Mode, SyncMode, Wal};

/// Which open of the second segment by the follower's thread runs the two rotations: the
/// follower's poll opens it to read its header, to read its switch record, and again to read
/// it once more with the keys it took.
const OPENS_BEFORE_ROTATING: u32 = 3;

const PATIENCE: Duration = Duration::from_secs(10);

#[test]
fn attached_follower_reads_on_across_a_data_key_rotation() {
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let dir = tempfile::tempdir().unwrap();
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
        let store = Arc::new(KeyStore::create(dir.path().join("keys.store"), kek).unwrap());
        let config = Config::new(mode)
            .key_store(store)
            .sync(SyncMode::Durable)
            .page_size(1024)
            .segment_size(16 * 1024);
        let wal = Arc::new(Wal::open(dir.path().join("log"), config).unwrap());
        let mut follower = Follower::attach(&wal, Lsn::default()).unwrap();
        let mut expected = Vec::new();
        for round in 0..3u32 {
            for i in 0..5u32 {
                let payload = format!("round {round} record {i}").into_bytes();
                let lsn = wal.append(1, &payload).unwrap();
                wal.flush(lsn).unwrap();
                expected.push(payload);
            }
            assert_eq!(wal.rotate_data_key().unwrap(), round + 2, "{mode}");
        }
        let mut got = Vec::new();
        while got.len() < expected.len() {
            let record = follower
                .next_timeout(PATIENCE)
                .unwrap_or_else(|e| panic!("{mode}: after {} records: {e}", got.len()))
                .unwrap_or_else(|| panic!("{mode}: no record after {}", got.len()));
            got.push(record.payload);
        }
        assert_eq!(got, expected, "{mode}");
    }
}

/// The thread whose opens count, the file, how many opens are left before the rotations, and
/// the log to rotate.
type Armed = (std::thread::ThreadId, PathBuf, u32, Weak<Wal>);

/// Counts an event on `path` in `armed`'s thread; at the armed count, rotates the data key of
/// the `Wal` twice (once).
fn count_and_rotate(armed: &Mutex<Option<Armed>>, path: &Path) {
    let wal = {
        let mut armed = armed.lock().unwrap();
        match armed.as_mut() {
            Some((thread, p, nth, wal)) if *thread == std::thread::current().id() && p == path => {
                *nth -= 1;
                if *nth > 0 {
                    return;
                }
                let wal = wal.upgrade();
                *armed = None;
                wal
            }
            _ => return,
        }
    };
    if let Some(wal) = wal {
        wal.rotate_data_key().unwrap();
        wal.rotate_data_key().unwrap();
    }
}

/// Rotates when the armed thread opens the armed file for the armed time.
#[derive(Default)]
struct RotateOnOpen {
    armed: Mutex<Option<Armed>>,
}

impl Hooks for RotateOnOpen {
    fn opened(&self, path: &Path) {
        count_and_rotate(&self.armed, path);
    }
}

/// Rotates when the armed thread drops a handle of the armed file for the armed time.
#[derive(Default)]
struct RotateOnClose {
    armed: Mutex<Option<Armed>>,
}

impl Hooks for RotateOnClose {
    fn closed(&self, path: &Path) {
        count_and_rotate(&self.armed, path);
    }
}

/// A perrecord-gcm log of 4-page segments over `storage` (the real file system when `None`)
/// with its key store at `store_path`, holding one record, flushed.
fn gcm_log(
    log: &Path,
    store_path: &Path,
    kek: Arc<dyn KeyProvider>,
    storage: Option<Arc<dyn Storage>>,
) -> Arc<Wal> {
    let store = Arc::new(KeyStore::create(store_path, kek).unwrap());
    let mut config = Config::new(Mode::PerRecordGcm)
        .key_store(store)
        .sync(SyncMode::Durable)
        .page_size(512)
        .segment_size(4 * 512)
        .prepare_segments(false);
    if let Some(storage) = storage {
        config = config.storage(storage);
    }
    let wal = Arc::new(Wal::open(log, config).unwrap());
    let first = wal.append(1, b"before the rotations").unwrap();
    wal.flush(first).unwrap();
    wal
}

/// `follower` has the key the log's first record is under, and only that one: it reads that
/// record; the writer rotates twice (keys 2 and 3; the log ends at the end of the second
/// segment, whose switch record is sealed under key 2, and the third segment is made by the
/// next write); `arm` arms the hook that runs two more rotations while the follower reads
/// again after taking key 2, and `fired` says whether they ran. The poll must not fail, and the
/// record appended after it must come.
fn poll_through_rotations(
    wal: &Arc<Wal>,
    follower: &mut Follower,
    arm: impl FnOnce(),
    fired: impl Fn() -> bool,
    what: &str,
) {
    let r = follower.next_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(r.payload, b"before the rotations", "{what}");
    assert!(follower.poll().unwrap().is_none(), "{what}");
    wal.rotate_data_key().unwrap();
    wal.rotate_data_key().unwrap();
    assert_eq!(wal.end_lsn(), Lsn(2 * 4 * 512), "{what}");
    arm();
    if let Err(e) = follower.poll() {
        panic!("{what}: a poll while the writer rotated: {e}");
    }
    assert!(
        fired(),
        "{what}: the rotations while the follower read did not run"
    );
    let lsn = wal.append(1, b"after the rotations").unwrap();
    wal.flush(lsn).unwrap();
    let r = follower
        .next_timeout(PATIENCE)
        .unwrap_or_else(|e| panic!("{what}: after the rotations: {e}"))
        .unwrap_or_else(|| panic!("{what}: no record after the rotations"));
    assert_eq!(r.payload, b"after the rotations", "{what}");
}

/// An attached follower meets a key it lacks in a segment switch record (perrecord-gcm seals
/// them), takes the `Wal`'s keys and reads again; while it reads again, two more rotations
/// (run by a storage hook as the follower opens a segment) add a segment sealed under a key
/// newer than the ones it took. It takes the keys again, rather than reporting `MissingKey`
/// for a key the `Wal` has, and yields the next record. perrecord-gcm: the one mode whose
/// switch records are sealed, so a follower meets keys in segments that hold no record.
#[test]
fn attached_follower_takes_keys_again_when_rotations_come_while_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let hooks = Arc::new(RotateOnOpen::default());
    let storage: Arc<dyn Storage> = Arc::new(Hooked(hooks.clone()));
    let wal = gcm_log(&log, &dir.path().join("keys.store"), kek, Some(storage));
    let mut follower = Follower::attach(&wal, Lsn::default()).unwrap();
    // The poll lists the second segment and meets key 2 in its switch record, takes keys 1 to
    // 3 and reads again; as it opens the second segment again, two rotations add the third
    // segment (its switch record sealed under key 3) and the fourth (under key 4).
    let arm = || {
        *hooks.armed.lock().unwrap() = Some((
            std::thread::current().id(),
            log.join(format!("{:016X}.wal", 4 * 512)),
            OPENS_BEFORE_ROTATING,
            Arc::downgrade(&wal),
        ));
    };
    let fired = || hooks.armed.lock().unwrap().is_none();
    poll_through_rotations(&wal, &mut follower, arm, fired, "attached");
}

/// The same with a follower that has its own handle of the key store (another process's): it
/// meets key 2 in a switch record, reads the store file again (keys 1 to 3), and as it drops
/// the file's handle two rotations (through the writer's handle) add keys 4 and 5 and the
/// segments sealed under them. Reading on, it reads the store again for key 4 rather than
/// reporting `MissingKey`.
#[test]
fn key_store_follower_reads_the_store_again_when_rotations_come_while_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let store_path = dir.path().join("keys.store");
    let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("kek").unwrap());
    let wal = gcm_log(&log, &store_path, kek.clone(), None);
    let hooks = Arc::new(RotateOnClose::default());
    let followers_store =
        Arc::new(KeyStore::open_in(Arc::new(Hooked(hooks.clone())), &store_path, kek).unwrap());
    let mut follower =
        Follower::open_with_key_store(&log, followers_store, Lsn::default()).unwrap();
    // The first handle of the store file the follower drops is the one it read key 2 with.
    let arm = || {
        *hooks.armed.lock().unwrap() = Some((
            std::thread::current().id(),
            store_path.clone(),
            1,
            Arc::downgrade(&wal),
        ));
    };
    let fired = || hooks.armed.lock().unwrap().is_none();
    poll_through_rotations(&wal, &mut follower, arm, fired, "key-store follower");
}
