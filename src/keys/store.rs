//! The key store: data keys stored only wrapped under a KEK, in one versioned file.
//!
//! The byte layout is in docs/FORMAT.md ("Key store file"). Every change (create, data-key
//! rotation, KEK rotation, retirement) writes a whole new file through the [`Storage`] trait:
//! a temporary file with a random name created exclusively (mode 0600 on the real file
//! system), written, fdatasync'ed, renamed over the store and the directory synced. A crash at
//! any step leaves either the old store or the new one, each complete. A data key is in the
//! durable store before any record uses it and leaves it only after the last segment that
//! lists it was removed.
//!
//! A writer holds an exclusive lock on `.<name>.lock` beside the store from before it creates
//! its temporary file until the rename and the directory sync are done. Temporary files are
//! therefore removed only by a writer holding that lock: any it finds then belongs to a writer
//! that died or failed. Opening a store never removes anything, so a rotation running beside
//! `wal-key list` or a replica opening the store is never robbed of its temporary file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::layout::{
    AUTH_NONCE_LEN, AuthHeader, KeyInfo, KeyState, MAX_STORE_LEN, MAX_WRAPPED_LEN, STORE_VERSION_1,
    decode, encode_body, finish,
};
use super::provider::{Kek, KeyProvider, PassphraseKek};
use super::ring::{Key, KeyRing, is_temporary_of, parent_dir, temp_name};
use super::store_auth::{
    AuthKey, check_authentication, describe_kek_id, kek_mismatch, new_auth_key, store_tag,
};
use super::store_error;
use crate::error::{Error, Result};
use crate::storage::{FsStorage, Storage};

struct Entry {
    info: KeyInfo,
    wrapped: Vec<u8>,
    key: Key,
}

struct Inner {
    provider: Arc<dyn KeyProvider>,
    kek_id: String,
    generation: u64,
    entries: Vec<Entry>,
    /// `None` for a store read in version 1: its next write makes an authentication key and
    /// wraps every entry again under the version 2 associated data.
    auth: Option<AuthKey>,
    /// Whether the directory entry of `generation` is known to survive a power cut: false
    /// after a directory sync failed behind a rename that succeeded, and for a store read from
    /// disk (its writer may have crashed between the rename and the directory sync).
    durable: bool,
}

/// A key store file and the data keys it holds, unwrapped in memory.
///
/// Open it with a [`KeyProvider`], hand it to [`crate::Config::key_store`], and the log takes
/// its keys from it; [`crate::Wal::rotate_data_key`] adds keys and `purge_before` retires them.
pub struct KeyStore {
    path: PathBuf,
    storage: Arc<dyn Storage>,
    inner: Mutex<Inner>,
    /// Whether this handle's keys were handed out for writing (a log opened with it, a sealed
    /// file written): set once, never cleared. Such a handle's log may still use a key that
    /// another handle retired, so its changes are never made again on a generation lacking
    /// one (`take_newer`).
    in_service: AtomicBool,
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("KeyStore")
            .field("path", &self.path)
            .field("kek", &describe_kek_id(&inner.kek_id))
            .field(
                "ids",
                &inner.entries.iter().map(|e| e.info.id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl PassphraseKek {
    /// The KEK the store at `path` was wrapped under, derived from `passphrase` with the salt
    /// and cost its KEK id records. A wrong passphrase fails when the store is opened.
    pub fn for_store(path: impl AsRef<Path>, passphrase: &[u8]) -> Result<Kek> {
        let (kek_id, _, _) = KeyStore::inspect(path)?;
        PassphraseKek::for_kek_id(&kek_id, passphrase)
    }
}

impl KeyStore {
    /// Creates a store at `path` with one fresh random data key (id 1, active), wrapped by
    /// `provider`. Fails if a file exists there.
    pub fn create(path: impl AsRef<Path>, provider: Arc<dyn KeyProvider>) -> Result<KeyStore> {
        Self::create_from_ring_in(Arc::new(FsStorage), path, provider, &KeyRing::generate()?)
    }

    /// Creates a store holding the keys of an existing raw ring (ids kept, the ring's active key
    /// active). Fails if a file exists at `path`.
    pub fn create_from_ring(
        path: impl AsRef<Path>,
        provider: Arc<dyn KeyProvider>,
        ring: &KeyRing,
    ) -> Result<KeyStore> {
        Self::create_from_ring_in(Arc::new(FsStorage), path, provider, ring)
    }

    /// [`KeyStore::create_from_ring`] through a given storage back end.
    pub fn create_from_ring_in(
        storage: Arc<dyn Storage>,
        path: impl AsRef<Path>,
        provider: Arc<dyn KeyProvider>,
        ring: &KeyRing,
    ) -> Result<KeyStore> {
        let path = path.as_ref();
        Self::create_unless_exists(storage, path, provider, ring)?
            .ok_or_else(|| store_error(path, "already exists; refusing to overwrite a key store"))
    }

    /// Opens the store at `path`, or creates it with one fresh random data key (as
    /// [`KeyStore::create`]) when no file is there. Creation is atomic: the new store is put in
    /// place only if the name is still free (a no-replace rename), so of two processes racing
    /// to create it one wins and the other opens the winner's store.
    pub fn open_or_create(
        path: impl AsRef<Path>,
        provider: Arc<dyn KeyProvider>,
    ) -> Result<KeyStore> {
        Self::open_or_create_in(Arc::new(FsStorage), path, provider)
    }

    /// [`KeyStore::open_or_create`] through a given storage back end.
    pub fn open_or_create_in(
        storage: Arc<dyn Storage>,
        path: impl AsRef<Path>,
        provider: Arc<dyn KeyProvider>,
    ) -> Result<KeyStore> {
        let path = path.as_ref();
        match Self::open_in(storage.clone(), path, provider.clone()) {
            Err(e) if is_not_found(&e) => {}
            opened => return opened,
        }
        let ring = KeyRing::generate()?;
        match Self::create_unless_exists(storage.clone(), path, provider.clone(), &ring)? {
            Some(store) => Ok(store),
            None => Self::open_in(storage, path, provider),
        }
    }

    /// Creates the store; `Ok(None)` when a file is at `path` already (before or, put there by
    /// a racing creator, at the moment the new store would take the name).
    fn create_unless_exists(
        storage: Arc<dyn Storage>,
        path: &Path,
        provider: Arc<dyn KeyProvider>,
        ring: &KeyRing,
    ) -> Result<Option<KeyStore>> {
        let path = path.to_path_buf();
        if ring.is_empty() {
            return Err(store_error(&path, "a key store needs at least one key"));
        }
        match storage.open(&path, false) {
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("open key store", &path, e)),
        }
        let kek_id = checked_kek_id(&path, provider.as_ref())?;
        let created = now_secs();
        let active = ring.active_id();
        let mut entries = Vec::with_capacity(ring.len());
        for (id, key) in ring.entries() {
            let state = if Some(id) == active {
                KeyState::Active
            } else {
                KeyState::DecryptOnly
            };
            entries.push(wrap_entry(
                provider.as_ref(),
                &kek_id,
                id,
                state,
                created,
                key.clone(),
            )?);
        }
        entries.sort_by_key(|e| e.info.id);
        let auth = Some(new_auth_key(provider.as_ref(), &kek_id)?);
        let store = KeyStore {
            path,
            storage,
            inner: Mutex::new(Inner {
                provider,
                kek_id,
                generation: 0,
                entries,
                auth,
                durable: false,
            }),
            in_service: AtomicBool::new(false),
        };
        let saved = store.save(&mut store.inner.lock(), Put::Create);
        match saved {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                Ok(None)
            }
            Err(e) => Err(e),
            // A store is created without looking for a generation on disk.
            Ok(Saved::Changed { .. }) => Ok(None),
            Ok(Saved::Written) => Ok(Some(store)),
        }
    }

    /// Opens the store at `path`, unwrapping every data key with `provider`.
    pub fn open(path: impl AsRef<Path>, provider: Arc<dyn KeyProvider>) -> Result<KeyStore> {
        Self::open_in(Arc::new(FsStorage), path, provider)
    }

    /// [`KeyStore::open`] through a given storage back end.
    pub fn open_in(
        storage: Arc<dyn Storage>,
        path: impl AsRef<Path>,
        provider: Arc<dyn KeyProvider>,
    ) -> Result<KeyStore> {
        let path = path.as_ref().to_path_buf();
        let inner = read_inner(storage.as_ref(), &path, provider)?;
        Ok(KeyStore {
            path,
            storage,
            inner: Mutex::new(inner),
            in_service: AtomicBool::new(false),
        })
    }

    /// Reads the store file again, with the same provider, and takes its keys and generation:
    /// for a reader or follower whose log was rotated to a key through another handle or
    /// process. On an error the keys in memory stay as they were.
    pub fn reload(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        *inner = read_inner(self.storage.as_ref(), &self.path, inner.provider.clone())?;
        Ok(())
    }

    /// [`KeyStore::reload`] under another provider: for the handle of a live log whose store
    /// was re-wrapped under a new KEK by someone else (`wal-key rotate-kek`, another process).
    /// The log goes on writing meanwhile; its next rotation or key retirement fails, naming
    /// the KEK mismatch, until this is called with the new KEK's provider. On an error nothing
    /// changes, the provider included.
    pub fn reload_with(&self, provider: Arc<dyn KeyProvider>) -> Result<()> {
        let mut inner = self.inner.lock();
        *inner = read_inner(self.storage.as_ref(), &self.path, provider)?;
        Ok(())
    }

    /// Reads what a store says about itself without unwrapping anything (no KEK needed):
    /// its KEK id, generation and key listing. The file's checksum and layout are checked, but
    /// not its authentication, which needs the KEK: [`KeyStore::open`] checks that.
    pub fn inspect(path: impl AsRef<Path>) -> Result<(String, u64, Vec<KeyInfo>)> {
        let path = path.as_ref();
        let bytes = read_file(&FsStorage, path)?;
        let parsed = decode(&bytes).map_err(|why| store_error(path, &why))?;
        let infos = parsed.entries.into_iter().map(|(info, _)| info).collect();
        Ok((parsed.kek_id, parsed.generation, infos))
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The KEK the store is wrapped under, as its provider names it.
    pub fn kek_id(&self) -> String {
        self.inner.lock().kek_id.clone()
    }

    /// How many times the store was written (1 after creation).
    pub fn generation(&self) -> u64 {
        self.inner.lock().generation
    }

    /// Ids, states, creation times and fingerprints, in id order. Never key bytes.
    pub fn keys(&self) -> Vec<KeyInfo> {
        self.inner
            .lock()
            .entries
            .iter()
            .map(|e| e.info.clone())
            .collect()
    }

    /// The data keys as a ring (active key last), for a `Reader` or a `Follower`. A log takes
    /// its keys from the store itself ([`crate::Config::key_store`]), which first makes sure
    /// the store's newest generation is durable.
    pub fn ring(&self) -> KeyRing {
        ring_of(&self.inner.lock().entries)
    }

    /// The data keys as a ring for a log that writes with the active one: fails unless the
    /// store's newest generation is known to survive a power cut (see `make_durable`).
    pub(crate) fn ring_for_writing(&self) -> Result<KeyRing> {
        let mut inner = self.inner.lock();
        self.make_durable(&mut inner)?;
        self.in_service.store(true, Ordering::Relaxed);
        Ok(ring_of(&inner.entries))
    }

    /// Whether a key id is in the store (in memory).
    pub(crate) fn has_key(&self, id: u32) -> bool {
        self.inner.lock().entries.iter().any(|e| e.info.id == id)
    }

    /// Adds a fresh random data key with the next id, makes it active (the previous active key
    /// becomes decrypt-only) and writes the store durably. Returns the new id and the new ring.
    ///
    /// To rotate the key of a live log, call [`crate::Wal::rotate_data_key`], which calls this
    /// and then switches the log to the new key.
    ///
    /// If someone else wrote the store since this handle read it (another handle, `wal-key
    /// rotate`, a live log's rotation or purge), the newer generation is read and the key is
    /// added on top of it, so neither change is lost ([`KeyStore::retire_unused`] does the
    /// same), a few times at most before the call fails. What the newer generation may have
    /// changed:
    /// - another rotation: not a conflict. The key is added on top, with the next id, as if
    ///   this call had come right after the other one; two rotations make two keys, in either
    ///   order, as two `wal-key rotate` run one after the other do.
    /// - keys retired by a log's purge: not a conflict for a handle no log writes with (one
    ///   never handed to [`crate::Config::key_store`] or used to write a sealed file, as
    ///   `wal-key rotate`'s): a retired key is older than the store's active key, and the new
    ///   key is added to what is left. For a log's handle it is refused: its log may still use
    ///   the key.
    /// - anything else is refused and nothing is written: a key this handle holds replaced by
    ///   another under its id, or gone while no later key is active (as when another store is
    ///   put in its place); the store re-wrapped under another KEK ([`KeyStore::reload_with`]);
    ///   an older generation put back.
    pub fn rotate_data_key(&self) -> Result<(u32, KeyRing)> {
        let mut inner = self.inner.lock();
        let id = self.update(&mut inner, |inner| {
            let id = inner
                .entries
                .iter()
                .map(|e| e.info.id)
                .max()
                .unwrap_or(0)
                .checked_add(1)
                .ok_or_else(|| store_error(&self.path, "key ids exhausted"))?;
            let entry = wrap_entry(
                inner.provider.as_ref(),
                &inner.kek_id,
                id,
                KeyState::Active,
                now_secs(),
                Key::generate()?,
            )?;
            let mut entries = clone_entries(&inner.entries);
            for e in &mut entries {
                e.info.state = KeyState::DecryptOnly;
            }
            entries.push(entry);
            Ok(Some((entries, id)))
        })?;
        Ok((id.unwrap_or_default(), ring_of(&inner.entries)))
    }

    /// Re-wraps every data key under `provider`'s KEK and writes the store; the log is not
    /// touched. Keep the old KEK until this returns Ok: a crash before may leave the old store.
    pub fn rotate_kek(&self, provider: Arc<dyn KeyProvider>) -> Result<()> {
        let mut inner = self.inner.lock();
        let kek_id = checked_kek_id(&self.path, provider.as_ref())?;
        let mut entries = Vec::with_capacity(inner.entries.len());
        for e in &inner.entries {
            let aad = entry_aad(&kek_id, &e.info);
            entries.push(Entry {
                info: e.info.clone(),
                wrapped: provider.wrap(&e.key, &aad)?,
                key: e.key.clone(),
            });
        }
        let auth = new_auth_key(provider.as_ref(), &kek_id)?;
        let old = (
            inner.provider.clone(),
            std::mem::replace(&mut inner.kek_id, kek_id),
            inner.auth.replace(auth),
        );
        inner.provider = provider;
        let before = inner.generation;
        let committed = self
            .commit(&mut inner, entries)
            .and_then(|saved| saved.or_refuse(&self.path, before));
        if committed.is_err() && inner.generation == before {
            (inner.provider, inner.kek_id, inner.auth) = old;
        }
        committed
    }

    /// Removes every decrypt-only key whose id is not in `in_use` and writes the store if
    /// anything was removed. Returns the removed ids. The active key always stays.
    pub fn retire_unused(&self, in_use: &[u32]) -> Result<Vec<u32>> {
        let mut inner = self.inner.lock();
        // Chosen from the generation this handle holds, the one `in_use` was worked out
        // against: made again on a newer generation, the change retires no other key. There,
        // someone else's rotation may have made decrypt-only the key this handle's log still
        // writes with, which `in_use` (read from the files) need not name yet.
        let candidates: Vec<u32> = inner
            .entries
            .iter()
            .filter(|e| e.info.state == KeyState::DecryptOnly && !in_use.contains(&e.info.id))
            .map(|e| e.info.id)
            .collect();
        let retired = self.update(&mut inner, |inner| {
            let retired: Vec<u32> = inner
                .entries
                .iter()
                .filter(|e| {
                    e.info.state == KeyState::DecryptOnly && candidates.contains(&e.info.id)
                })
                .map(|e| e.info.id)
                .collect();
            if retired.is_empty() {
                return Ok(None);
            }
            let entries = clone_entries(&inner.entries)
                .into_iter()
                .filter(|e| !retired.contains(&e.info.id))
                .collect();
            Ok(Some((entries, retired)))
        })?;
        Ok(retired.unwrap_or_default())
    }

    /// Writes the entries `change` makes from the store in memory (nothing when it makes
    /// none). When someone else wrote the store since this handle read it, the newer
    /// generation is read (`take_newer`) and `change` made again from it, a few times at most:
    /// a change is always made from the generation it replaces, so nobody's is undone.
    fn update<T>(
        &self,
        inner: &mut Inner,
        mut change: impl FnMut(&Inner) -> Result<Option<(Vec<Entry>, T)>>,
    ) -> Result<Option<T>> {
        const ATTEMPTS: usize = 3;
        let mut attempt = 1;
        loop {
            let Some((entries, out)) = change(inner)? else {
                return Ok(None);
            };
            let before = inner.generation;
            match self.commit(inner, entries)? {
                Saved::Written => return Ok(Some(out)),
                Saved::Changed { found } if attempt < ATTEMPTS => {
                    self.take_newer(inner, found)?;
                    attempt += 1;
                }
                changed => return changed.or_refuse(&self.path, before).map(|()| None),
            }
        }
    }

    /// Reads the generation `found` someone else wrote, to make this handle's change again on
    /// top of it. Refused when it lost a key this handle holds in a way the change cannot be
    /// made on (see [`KeyStore::lost_key`]), or is wrapped under another KEK (the caller needs
    /// the new provider: [`KeyStore::reload_with`]).
    fn take_newer(&self, inner: &mut Inner, found: u64) -> Result<()> {
        let changed = |why: String| {
            store_error(
                &self.path,
                &format!(
                    "changed by someone else since it was read (generation {found} on disk, {} \
                     here) and {why}",
                    inner.generation
                ),
            )
        };
        // Only a later generation: an older one put back (a restored backup, a rollback) is
        // never built on.
        if found <= inner.generation {
            return Err(changed(
                "that is not a later generation: nothing was written".into(),
            ));
        }
        let newer = match read_inner(self.storage.as_ref(), &self.path, inner.provider.clone()) {
            Ok(newer) => newer,
            Err(Error::KeyStore { reason, .. }) => {
                return Err(changed(format!(
                    "not readable with this handle's provider: {reason}; if the store was \
                     re-wrapped under a new KEK, call KeyStore::reload_with with its provider \
                     and retry"
                )));
            }
            Err(e) => return Err(e),
        };
        for e in &inner.entries {
            if let Some(why) = self.lost_key(&e.info, &newer) {
                return Err(changed(why));
            }
        }
        *inner = newer;
        Ok(())
    }

    /// Why the newer generation `newer` cannot be built on for the key `held` this handle
    /// holds, or `None` when it can: it holds the same key under that id, or (for a handle no
    /// log writes with) it lacks that key because a purge retired it, which only a key older
    /// than the active one can have been.
    fn lost_key(&self, held: &KeyInfo, newer: &Inner) -> Option<String> {
        let id = held.id;
        let in_service = self.in_service.load(Ordering::Relaxed);
        let same_id = newer.entries.iter().find(|n| n.info.id == id);
        if same_id.is_some_and(|n| n.info.fingerprint == held.fingerprint) {
            return None;
        }
        if in_service {
            return Some(format!(
                "no longer holds key id {id} that this handle holds and its log may still use; \
                 nothing was written"
            ));
        }
        if same_id.is_some() {
            return Some(format!(
                "holds another key under key id {id} than the one this handle read, as when \
                 another store is put in its place; nothing was written"
            ));
        }
        let active = newer
            .entries
            .iter()
            .find(|n| n.info.state == KeyState::Active)
            .map(|n| n.info.id);
        if active.is_some_and(|active| active > id) {
            return None;
        }
        Some(format!(
            "no longer holds key id {id} while no later key is active, which a purge retiring \
             it does not leave (as when another store is put in its place); nothing was written"
        ))
    }

    /// Writes `entries` as the next generation. They replace the ones in memory once the new
    /// file is in place (renamed), even if the directory sync after it failed: memory then
    /// matches the file, which may or may not survive a crash, and the store remembers that
    /// (`durable` false) until a directory sync succeeds.
    fn commit(&self, inner: &mut Inner, entries: Vec<Entry>) -> Result<Saved> {
        self.make_durable(inner)?;
        let before = inner.generation;
        let old = std::mem::replace(&mut inner.entries, entries);
        let saved = self.save(inner, Put::Replace);
        if !matches!(saved, Ok(Saved::Written)) && inner.generation == before {
            inner.entries = old;
        }
        saved
    }

    /// Makes the newest generation's directory entry durable if it is not known to be, by
    /// syncing the store's directory again; fails with an error naming the store if that
    /// fails again. Called before any key of the store goes into service (a log opened with
    /// the store, a rotation, the store's next write).
    ///
    /// Why not undo the generation in memory instead: the rename did happen, so the new file
    /// is what the directory shows now and what any other process opening the store reads;
    /// after a power cut it may or may not be there. Memory that went back to the old
    /// generation would match neither for sure, and would make every later write refuse the
    /// file as changed by someone else. Keeping memory equal to the file and holding back only
    /// the step that puts a key into service is right in both outcomes: once a directory sync
    /// succeeds, the entry is durable (journaling file systems refuse every later sync after a
    /// failed journal commit, so a sync that succeeds covers the rename).
    fn make_durable(&self, inner: &mut Inner) -> Result<()> {
        if inner.durable {
            return Ok(());
        }
        self.storage
            .sync_dir(&parent_dir(&self.path))
            .map_err(|e| {
                Error::io(
                    "sync the directory of key store (its newest generation is not known to be \
                     durable, so none of its keys is put into service)",
                    &self.path,
                    e,
                )
            })?;
        inner.durable = true;
        Ok(())
    }

    fn save(&self, inner: &mut Inner, put: Put) -> Result<Saved> {
        let lock_path = lock_name(&self.path)?;
        let lock = self
            .storage
            .lock_file(&lock_path)
            .map_err(|e| Error::io("lock key store", &lock_path, e))?;
        if lock.is_some() {
            self.remove_stale_temporaries();
        }
        if put == Put::Replace
            && let Some(found) = self.generation_on_disk(inner.generation)?
        {
            return Ok(Saved::Changed { found });
        }
        let generation = inner.generation + 1;
        let (auth, rewrapped) = self.auth_for_saving(inner)?;
        let mut nonce = [0u8; AUTH_NONCE_LEN];
        getrandom::fill(&mut nonce)
            .map_err(|_| store_error(&self.path, "the OS random source failed"))?;
        let wrapped = |i: usize| match &rewrapped {
            Some(all) => all[i].as_slice(),
            None => inner.entries[i].wrapped.as_slice(),
        };
        let body = encode_body(
            &inner.kek_id,
            generation,
            &AuthHeader {
                wrapped_key: &auth.wrapped,
                nonce,
            },
            inner
                .entries
                .iter()
                .enumerate()
                .map(|(i, e)| (&e.info, wrapped(i))),
        );
        let tag = store_tag(&auth.key, &nonce, &body)
            .ok_or_else(|| store_error(&self.path, "AES-GCM refused to authenticate the store"))?;
        let bytes = finish(body, tag);
        let storage = self.storage.as_ref();
        let tmp = temp_name(&self.path)?;
        let dir = parent_dir(&self.path);
        let written = (|| -> std::io::Result<()> {
            let file = storage.create_private(&tmp)?;
            file.write_all_at(&bytes, 0)?;
            file.sync_data()?;
            drop(file);
            match put {
                Put::Create => storage.rename_no_replace(&tmp, &self.path),
                Put::Replace => storage.rename(&tmp, &self.path),
            }
        })();
        if let Err(e) = written {
            let _ = storage.remove(&tmp);
            return Err(Error::io("write key store", &self.path, e));
        }
        inner.generation = generation;
        if let Some(rewrapped) = rewrapped {
            for (e, wrapped) in inner.entries.iter_mut().zip(rewrapped) {
                e.wrapped = wrapped;
            }
        }
        inner.auth = Some(auth);
        inner.durable = false;
        storage
            .sync_dir(&dir)
            .map_err(|e| Error::io("sync the directory of key store", &self.path, e))?;
        inner.durable = true;
        Ok(Saved::Written)
    }
}

impl KeyStore {
    /// The authentication key the next generation is written with and, for a store read in
    /// version 1, every entry wrapped again under the version 2 associated data (the version 1
    /// wraps could otherwise be put in a forged version 1 file with any states).
    fn auth_for_saving(&self, inner: &Inner) -> Result<(AuthKey, Option<Vec<Vec<u8>>>)> {
        if let Some(auth) = &inner.auth {
            return Ok((auth.clone(), None));
        }
        let provider = inner.provider.as_ref();
        let auth = new_auth_key(provider, &inner.kek_id)?;
        let mut rewrapped = Vec::with_capacity(inner.entries.len());
        for e in &inner.entries {
            rewrapped.push(provider.wrap(&e.key, &entry_aad(&inner.kek_id, &e.info))?);
        }
        Ok((auth, Some(rewrapped)))
    }
}

/// How a new generation takes the store's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Put {
    /// The first generation: only if no file has the name.
    Create,
    /// A later one: over the generation this handle read.
    Replace,
}

/// What a write of the store did.
#[must_use]
enum Saved {
    Written,
    /// Nothing: someone else wrote generation `found` since this handle read the store.
    Changed {
        found: u64,
    },
}

impl Saved {
    /// An error for `Changed`, for a write that is not made again from the newer generation
    /// (`generation` is the one this handle read).
    fn or_refuse(self, path: &Path, generation: u64) -> Result<()> {
        match self {
            Saved::Written => Ok(()),
            Saved::Changed { found } => Err(store_error(
                path,
                &format!(
                    "changed by someone else since it was read (generation {found} on disk, \
                     {generation} here); reopen it and retry"
                ),
            )),
        }
    }
}

impl KeyStore {
    /// The generation on disk when another process (or another `KeyStore` on the same file)
    /// wrote the store since this one read it (`generation`), else `None`. Such a store is
    /// never written over: its changes (a new key, a KEK rotation) would be lost. A missing or
    /// undecodable file is rewritten from memory.
    fn generation_on_disk(&self, generation: u64) -> Result<Option<u64>> {
        let on_disk = match read_file(self.storage.as_ref(), &self.path) {
            Ok(bytes) => decode(&bytes).ok().map(|d| d.generation),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(on_disk.filter(|found| *found != generation))
    }

    /// Removes temporary files a crash or a failed write left beside the store
    /// (`.<name>.<16 hex>.tmp`). Called only with the store's lock file held: every writer
    /// holds it for the whole life of its temporary, so none found then is in use. They hold
    /// only wrapped keys; this keeps them from piling up.
    fn remove_stale_temporaries(&self) {
        let dir = parent_dir(&self.path);
        let Ok(names) = self.storage.list(&dir) else {
            return;
        };
        for n in names {
            if is_temporary_of(&self.path, &n) {
                let _ = self.storage.remove(&dir.join(&n));
            }
        }
    }
}

/// Reads, checks and unwraps the store file at `path` with `provider`.
fn read_inner(storage: &dyn Storage, path: &Path, provider: Arc<dyn KeyProvider>) -> Result<Inner> {
    let bytes = read_file(storage, path)?;
    let parsed = decode(&bytes).map_err(|why| store_error(path, &why))?;
    let mine = checked_kek_id(path, provider.as_ref())?;
    if mine != parsed.kek_id {
        return Err(store_error(
            path,
            &kek_mismatch(&parsed.kek_id, &mine, &provider.name()),
        ));
    }
    let auth = check_authentication(path, provider.as_ref(), &parsed)?;
    let mut entries = Vec::with_capacity(parsed.entries.len());
    for (info, wrapped) in parsed.entries {
        let aad = match parsed.version {
            STORE_VERSION_1 => entry_aad_v1(&parsed.kek_id, &info),
            _ => entry_aad(&parsed.kek_id, &info),
        };
        let key = provider.unwrap(&wrapped, &aad)?;
        if key.fingerprint() != info.fingerprint {
            return Err(store_error(
                path,
                &format!(
                    "key id {}: the unwrapped key does not match its fingerprint",
                    info.id
                ),
            ));
        }
        entries.push(Entry { info, wrapped, key });
    }
    Ok(Inner {
        provider,
        kek_id: parsed.kek_id,
        generation: parsed.generation,
        entries,
        auth,
        // Its writer may have crashed between the rename and the directory sync.
        durable: false,
    })
}

/// `.<name>.lock` beside `path`: the lock a writer of the store holds.
fn lock_name(path: &Path) -> Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| store_error(path, "is not a file path"))?;
    let mut lock = std::ffi::OsString::from(".");
    lock.push(name);
    lock.push(".lock");
    Ok(parent_dir(path).join(lock))
}

fn is_not_found(error: &Error) -> bool {
    matches!(error, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

fn ring_of(entries: &[Entry]) -> KeyRing {
    let mut ring = KeyRing::empty();
    let active = entries.iter().find(|e| e.info.state == KeyState::Active);
    for e in entries.iter().filter(|e| e.info.state != KeyState::Active) {
        let _ = ring.add(e.info.id, e.key.clone());
    }
    if let Some(e) = active {
        let _ = ring.add(e.info.id, e.key.clone());
    }
    ring
}

fn clone_entries(entries: &[Entry]) -> Vec<Entry> {
    entries
        .iter()
        .map(|e| Entry {
            info: e.info.clone(),
            wrapped: e.wrapped.clone(),
            key: e.key.clone(),
        })
        .collect()
}

fn checked_kek_id(path: &Path, provider: &dyn KeyProvider) -> Result<String> {
    let id = provider.kek_id()?;
    if id.is_empty() || id.len() > 255 {
        return Err(store_error(
            path,
            &format!(
                "{} names its KEK with {} bytes; a KEK id is 1 to 255 bytes",
                provider.name(),
                id.len()
            ),
        ));
    }
    Ok(id)
}

fn wrap_entry(
    provider: &dyn KeyProvider,
    kek_id: &str,
    id: u32,
    state: KeyState,
    created: u64,
    key: Key,
) -> Result<Entry> {
    let info = KeyInfo {
        id,
        state,
        created,
        fingerprint: key.fingerprint(),
    };
    let wrapped = provider.wrap(&key, &entry_aad(kek_id, &info))?;
    if wrapped.is_empty() || wrapped.len() > MAX_WRAPPED_LEN {
        return Err(Error::KeyProvider {
            provider: provider.name(),
            reason: format!(
                "wrapped a key into {} bytes; the store takes 1 to {MAX_WRAPPED_LEN}",
                wrapped.len()
            ),
        });
    }
    Ok(Entry { info, wrapped, key })
}

/// The associated data bound to each wrapped key: a label, the KEK id, and the entry's id,
/// creation time and fingerprint, so no wrapped key can be moved to another id or store. The
/// label names version 2, so no wrap of a version 2 store fits a forged version 1 file.
fn entry_aad(kek_id: &str, info: &KeyInfo) -> Vec<u8> {
    entry_aad_labelled(b"walcrypt key store v2", kek_id, info)
}

/// [`entry_aad`] as version 1 stores wrapped their keys.
fn entry_aad_v1(kek_id: &str, info: &KeyInfo) -> Vec<u8> {
    entry_aad_labelled(b"walcrypt key store v1", kek_id, info)
}

fn entry_aad_labelled(label: &[u8], kek_id: &str, info: &KeyInfo) -> Vec<u8> {
    let mut aad = Vec::with_capacity(64 + kek_id.len());
    aad.extend_from_slice(label);
    aad.push(kek_id.len() as u8);
    aad.extend_from_slice(kek_id.as_bytes());
    aad.extend_from_slice(&info.id.to_le_bytes());
    aad.extend_from_slice(&info.created.to_le_bytes());
    aad.extend_from_slice(&info.fingerprint);
    aad
}

fn read_file(storage: &dyn Storage, path: &Path) -> Result<Vec<u8>> {
    let file = storage
        .open(path, false)
        .map_err(|e| Error::io("open key store", path, e))?;
    let len = file
        .file_len()
        .map_err(|e| Error::io("stat key store", path, e))?;
    if len > MAX_STORE_LEN {
        return Err(store_error(
            path,
            &format!("{len} bytes is more than a key store may hold ({MAX_STORE_LEN})"),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    let mut at = 0;
    while at < bytes.len() {
        let n = file
            .read_at(&mut bytes[at..], at as u64)
            .map_err(|e| Error::io("read key store", path, e))?;
        if n == 0 {
            break;
        }
        at += n;
    }
    bytes.truncate(at);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Kek;

    #[test]
    fn a_store_changed_by_someone_else_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("test").unwrap());
        let first = KeyStore::create(&path, kek.clone()).unwrap();
        let second = KeyStore::open(&path, kek.clone()).unwrap();
        second.rotate_data_key().unwrap();
        // A rotation is made again on top of the newer generation: both keys stay.
        let (id, ring) = first.rotate_data_key().unwrap();
        assert_eq!((id, ring.ids()), (3, vec![1, 2, 3]));
        assert_eq!(first.generation(), 3);
        // A KEK rotation is not: the stale handle is refused and nothing is written.
        let err = second
            .rotate_kek(Arc::new(Kek::generate("other").unwrap()))
            .unwrap_err();
        assert!(err.to_string().contains("changed by someone else"), "{err}");
        assert_eq!(second.ring().ids(), vec![1, 2]);
        let reread = KeyStore::open(&path, kek.clone()).unwrap();
        assert_eq!(reread.ring().ids(), vec![1, 2, 3]);
        assert_eq!(reread.generation(), 3);
        // An older generation put back (a restored backup) is never built on.
        let third = std::fs::read(&path).unwrap();
        reread.rotate_data_key().unwrap();
        let fourth = std::fs::read(&path).unwrap();
        std::fs::write(&path, &third).unwrap();
        let err = reread.rotate_data_key().unwrap_err();
        assert!(err.to_string().contains("not a later generation"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), third, "nothing written");
        std::fs::write(&path, &fourth).unwrap();
        // A stale temporary file from a crash outlives an open and is removed by the next
        // write, which holds the store's lock.
        let stale = dir.path().join(".keys.0123456789abcdef.tmp");
        std::fs::write(&stale, b"x").unwrap();
        let again = KeyStore::open(&path, reread.inner.lock().provider.clone()).unwrap();
        assert!(stale.exists());
        again.rotate_data_key().unwrap();
        assert!(!stale.exists());
    }

    /// A handle no log writes with (`wal-key rotate`'s) makes its rotation on a newer
    /// generation that retired a key it holds (a live log's purge, after the log rotated), but
    /// not on one that replaced a key it holds or lost one no later active key explains; a
    /// log's handle makes it on neither.
    #[test]
    fn a_rotation_is_made_on_a_retirement_only_by_a_handle_no_log_writes_with() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("test").unwrap());
        KeyStore::create(&path, kek.clone()).unwrap();
        let log = KeyStore::open(&path, kek.clone()).unwrap();
        log.ring_for_writing().unwrap();
        let other_log = KeyStore::open(&path, kek.clone()).unwrap();
        other_log.ring_for_writing().unwrap();
        let operator = KeyStore::open(&path, kek.clone()).unwrap();
        assert_eq!(log.rotate_data_key().unwrap().0, 2);
        assert_eq!(log.retire_unused(&[2]).unwrap(), [1]);

        let (id, ring) = operator.rotate_data_key().unwrap();
        assert_eq!((id, ring.ids(), ring.active_id()), (3, vec![2, 3], Some(3)));
        let err = other_log.rotate_data_key().unwrap_err().to_string();
        assert!(err.contains("no longer holds key id 1"), "{err}");
        assert!(err.contains("its log may still use"), "{err}");

        // Another store (same KEK) put in place, with another key under id 2 and a later
        // generation: refused, and nothing is written.
        let elsewhere = dir.path().join("elsewhere");
        let replacement = KeyStore::create(&elsewhere, kek.clone()).unwrap();
        for _ in 0..4 {
            replacement.rotate_data_key().unwrap();
        }
        let bytes = std::fs::read(&elsewhere).unwrap();
        std::fs::copy(&elsewhere, &path).unwrap();
        let err = operator.rotate_data_key().unwrap_err().to_string();
        assert!(err.contains("another key under key id 2"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing written");

        // One holding the same key 1 alone (so no later key is active), a later generation.
        let operator = KeyStore::open(&path, kek.clone()).unwrap();
        let mut first = KeyRing::empty();
        first
            .add(1, operator.ring().get(1).unwrap().clone())
            .unwrap();
        let lone = KeyStore::create_from_ring(dir.path().join("lone"), kek.clone(), &first);
        let lone = lone.unwrap();
        for _ in 0..8 {
            lone.rotate_kek(kek.clone()).unwrap();
        }
        let bytes = std::fs::read(dir.path().join("lone")).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let err = operator.rotate_data_key().unwrap_err().to_string();
        assert!(err.contains("no longer holds key id 2"), "{err}");
        assert!(err.contains("no later key is active"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing written");
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let kek: Arc<dyn KeyProvider> = Arc::new(Kek::generate("test").unwrap());
        let store = KeyStore::create(&path, kek.clone()).unwrap();
        store.rotate_data_key().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            assert!(KeyStore::open(&path, kek.clone()).is_err(), "byte {i}");
            // The same change with a recomputed checksum: the wrap's authentication, the
            // fingerprint or a field check still refuses it.
            let n = bad.len() - 4;
            let crc = crc32c::crc32c(&bad[..n]).to_le_bytes();
            bad[n..].copy_from_slice(&crc);
            std::fs::write(&path, &bad).unwrap();
            if let Ok(opened) = KeyStore::open(&path, kek.clone()) {
                // Only the generation counter and creation-time-free fields may change harmlessly.
                assert_eq!(opened.ring().ids(), store.ring().ids(), "byte {i}");
                for id in opened.ring().ids() {
                    assert_eq!(
                        opened.ring().get(id).unwrap().bytes(),
                        store.ring().get(id).unwrap().bytes(),
                        "byte {i}: a tampered store gave another key"
                    );
                }
            }
        }
    }
}
