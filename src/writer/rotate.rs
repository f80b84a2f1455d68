//! Data-key rotation on a live log, the rotation policy, and retirement of keys no segment
//! lists any more.
//!
//! A rotation writes the new key into the key store durably first, then switches the log to a
//! new segment whose header lists the new key, and installs the new working keys inside the
//! switch's locks (see `switch_segment_installing`). Retirement runs after `purge_before`
//! made its removals durable.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::Wal;
use crate::Lsn;
use crate::config::Config;
use crate::crypto::Keys;
use crate::error::{Error, Result};
use crate::format;
use crate::keys::{Key, KeyRing, KeyStore, RotationPolicy};

const NEVER: u64 = u64::MAX;

pub(super) struct Rotation {
    store: Option<Arc<KeyStore>>,
    /// The data keys the working keys were derived from.
    ring: Mutex<KeyRing>,
    /// One rotation or retirement at a time.
    busy: Mutex<()>,
    policy: RotationPolicy,
    /// Log position at which the policy's byte limit is reached (`NEVER` when none).
    next_at_lsn: AtomicU64,
    opened: Instant,
    /// Nanoseconds since `opened` at which the policy's age limit is reached.
    next_at_ns: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Directories of sealed files whose keys retirement keeps (`Config::sealed_dirs`).
    sealed_dirs: Vec<std::path::PathBuf>,
}

impl Rotation {
    /// The data keys the working keys were derived from, as now.
    pub(super) fn ring(&self) -> KeyRing {
        self.ring.lock().clone()
    }

    pub(super) fn new(config: &Config, end: Lsn) -> Result<Rotation> {
        let policy = config.rotation;
        if policy != RotationPolicy::default() && config.key_store.is_none() {
            return Err(Error::Config(
                "a key rotation policy needs a key store (Config::key_store)".into(),
            ));
        }
        if policy != RotationPolicy::default() && !config.mode.is_encrypted() {
            return Err(Error::Config(
                "a key rotation policy needs an encrypted mode".into(),
            ));
        }
        let rotation = Rotation {
            store: config.key_store.clone(),
            ring: Mutex::new(config.keys.clone()),
            busy: Mutex::new(()),
            policy,
            next_at_lsn: AtomicU64::new(NEVER),
            opened: Instant::now(),
            next_at_ns: AtomicU64::new(NEVER),
            last_error: Mutex::new(None),
            sealed_dirs: config.sealed_dirs.clone(),
        };
        rotation.restart(end);
        Ok(rotation)
    }

    /// Starts the policy's counting afresh at log position `end`, now.
    fn restart(&self, end: Lsn) {
        if let Some(bytes) = self.policy.max_bytes {
            self.next_at_lsn
                .store(end.0.saturating_add(bytes.max(1)), Ordering::Release);
        }
        if let Some(age) = self.policy.max_age {
            let now = self.opened.elapsed().as_nanos() as u64;
            let age = u64::try_from(age.as_nanos()).unwrap_or(NEVER);
            self.next_at_ns
                .store(now.saturating_add(age.max(1)), Ordering::Release);
        }
    }

    /// True when the policy asks for a rotation (always false without a policy).
    pub(super) fn due(&self, end: Lsn) -> bool {
        if end.0 >= self.next_at_lsn.load(Ordering::Relaxed) {
            return true;
        }
        let at = self.next_at_ns.load(Ordering::Relaxed);
        at != NEVER && self.opened.elapsed().as_nanos() as u64 >= at
    }
}

impl Wal {
    /// Rotates the data key of this live log: a fresh random key is added to the key store
    /// (durably, before anything uses it) and becomes active for every record or page written
    /// after this call returns. Older keys stay for reading. Needs [`Config::key_store`].
    ///
    /// The log moves to a new segment (whose header lists the new key); the rest of the
    /// current segment stays unused. Returns the new key id.
    pub fn rotate_data_key(&self) -> Result<u32> {
        self.check_poison()?;
        self.check_process()?;
        let store = self.rotation_store()?;
        let _one = self.rotation.busy.lock();
        let (id, ring) = store.rotate_data_key()?;
        self.install(ring)?;
        Ok(id)
    }

    /// Makes `key` (under the new id `id`) the active key of this live log, for embedders that
    /// manage data keys themselves with a raw [`KeyRing`]: store the key durably (for example
    /// with [`KeyRing::save`]) before calling this, since records written after it need it.
    /// Refused ([`Error::InvalidArgument`]) for a log opened with a key store
    /// ([`Config::key_store`](crate::Config::key_store)): the key would be used without being in
    /// the store, and every record written under it would be unreadable after a restart. Such a
    /// log rotates with [`Wal::rotate_data_key`], which writes the new key to the store first.
    pub fn activate_key(&self, id: u32, key: Key) -> Result<()> {
        self.check_poison()?;
        self.check_process()?;
        if !self.mode.is_encrypted() {
            return Err(Error::InvalidArgument {
                op: "activate_key",
                reason: "a plaintext log uses no keys".into(),
            });
        }
        if let Some(store) = &self.rotation.store {
            return Err(Error::InvalidArgument {
                op: "activate_key",
                reason: format!(
                    "this log keeps its data keys in the key store {}: a key activated here would \
                     not be in it, and records written under it would be unreadable after a \
                     restart; use rotate_data_key, which writes the new key to the store first",
                    store.path().display()
                ),
            });
        }
        let _one = self.rotation.busy.lock();
        let mut ring = self.rotation.ring.lock().clone();
        ring.add(id, key).map_err(|e| match e {
            Error::KeyFile { reason, .. } => Error::InvalidArgument {
                op: "activate_key",
                reason,
            },
            other => other,
        })?;
        self.install(ring)
    }

    /// The key store this log keeps its data keys in, when it was opened with one
    /// ([`Config::key_store`]): a follower attached to the log reads new keys from it once the
    /// `Wal` is gone.
    pub(crate) fn key_store(&self) -> Option<Arc<KeyStore>> {
        self.rotation.store.clone()
    }

    /// Ids of the data keys this log holds, the active one last.
    pub fn key_ids(&self) -> Vec<u32> {
        self.rotation.ring.lock().ids()
    }

    /// The last error of a rotation the policy started, if it failed (it is retried when the
    /// policy's limit is reached again). Rotations started by [`Wal::rotate_data_key`] report
    /// their errors directly.
    pub fn last_rotation_error(&self) -> Option<String> {
        self.rotation.last_error.lock().clone()
    }

    fn rotation_store(&self) -> Result<&Arc<KeyStore>> {
        if !self.mode.is_encrypted() {
            return Err(Error::InvalidArgument {
                op: "rotate_data_key",
                reason: "a plaintext log uses no keys".into(),
            });
        }
        self.rotation
            .store
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument {
                op: "rotate_data_key",
                reason: "it needs a key store (Config::key_store); with a raw key ring use \
                     activate_key"
                    .into(),
            })
    }

    /// Switches to a new segment and installs working keys derived from `ring`. The segment
    /// the log switches to is made listing the new key before the switch takes the log's
    /// locks, and put in place after it (`stage_for_rotation`, `swap_in`), so no segment is
    /// created under those locks.
    fn install(&self, ring: KeyRing) -> Result<()> {
        let keys = Arc::new(Keys::new(&ring, self.log_id)?);
        let staged = self.stage_for_rotation(&keys);
        let switched = self.switch_segment_installing(Some(keys), staged.is_some());
        match (staged, &switched) {
            (Some(staged), Ok(next)) if self.preparable(*next) => self.swap_in(staged, *next),
            (Some(staged), _) => self.discard_staged(staged),
            (None, _) => {}
        }
        switched?;
        *self.rotation.ring.lock() = ring;
        self.rotation.restart(self.reservations.end());
        Ok(())
    }

    /// Called after an append when the policy's limit is reached. A failure does not fail the
    /// append (its record is in the log): it is kept for [`Wal::last_rotation_error`] and the
    /// rotation is tried again after another interval.
    pub(super) fn rotate_by_policy(&self) {
        let Some(_one) = self.rotation.busy.try_lock() else {
            return; // another thread is rotating
        };
        if !self.rotation.due(self.reservations.end()) {
            return;
        }
        let result = self
            .rotation_store()
            .and_then(|store| store.rotate_data_key())
            .and_then(|(_, ring)| self.install(ring));
        if let Err(e) = result {
            *self.rotation.last_error.lock() = Some(e.to_string());
            self.rotation.restart(self.reservations.end());
        }
    }

    /// Retires from the key store every decrypt-only key that no remaining segment header
    /// lists, and drops it from this log's working keys.
    /// The data keys the working keys were derived from.
    pub(super) fn rotation_ring(&self) -> KeyRing {
        self.rotation.ring.lock().clone()
    }

    pub(super) fn retire_unused_keys(&self) -> Result<()> {
        let Some(store) = &self.rotation.store else {
            return Ok(());
        };
        let _one = self.rotation.busy.lock();
        // The key this log writes with, whether or not a file lists it yet (the segment it
        // writes may have no file before its first write-out).
        let mut in_use: Vec<u32> = self.rotation.ring.lock().active_id().into_iter().collect();
        for start in crate::reader::list_segments(self.storage.as_ref(), &self.dir)? {
            let path = self.dir.join(format::segment_file_name(start));
            let header =
                match crate::reader::read_segment_header(self.storage.as_ref(), &path, start) {
                    Ok(header) => header,
                    // Purged (or kept for reuse, counted below) by a purge running beside this
                    // one, or already reused for a newer segment, which lists the active key.
                    Err(e) if crate::reader::changed_under_reader(&e) => continue,
                    Err(e) => return Err(e),
                };
            for (id, _) in header.key_checks {
                if !in_use.contains(&id) {
                    in_use.push(id);
                }
            }
        }
        // The checkpoint's metadata in the control file is sealed under a key of its own.
        if let Some(id) = self.control_key()
            && !in_use.contains(&id)
        {
            in_use.push(id);
        }
        // A free file kept for reuse still holds ciphertext under the keys it lists (the purge
        // removes the ones listing anything but the active key, but a rotation may have run
        // since).
        for id in self.keys_of_free_files()? {
            if !in_use.contains(&id) {
                in_use.push(id);
            }
        }
        // Sealed files beside the log (snapshots, checkpoints) need their keys as long as they
        // exist.
        for dir in &self.rotation.sealed_dirs {
            for id in crate::sealed::key_ids_in(self.storage.as_ref(), dir)? {
                if !in_use.contains(&id) {
                    in_use.push(id);
                }
            }
        }
        // A segment being made may be a reused file whose old pages are not wiped yet, under
        // whatever key they were written with: retire nothing while one is; the next purge
        // tries again.
        let names = self
            .storage
            .list(&self.dir)
            .map_err(|e| Error::io("list log directory", &self.dir, e))?;
        if names.iter().any(|n| {
            n.ends_with(super::recycle::REUSE_SUFFIX) && super::recycle::is_unfinished_segment(n)
        }) {
            return Ok(());
        }
        let retired = store.retire_unused(&in_use)?;
        if retired.is_empty() {
            return Ok(());
        }
        let mut ring = self.rotation.ring.lock();
        for id in retired {
            ring.remove(id);
        }
        self.keys.store(Arc::new(Keys::new(&ring, self.log_id)?));
        Ok(())
    }
}
