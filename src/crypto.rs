//! Working keys, the IV source and the AES-256-CTR keystream.
//!
//! Everything cryptographic lives here so that it can be read in one sitting:
//!
//! * `Keys`: a log's working keys (derived per log from the data keys of a [`KeyRing`], which
//!   lives with the rest of key management in `keys`) with every AES-256 key schedule expanded
//!   once, shared by all threads.
//! * [`IvSource`]: hands out counter blocks that are never reused under one key.
//!
//! The IV scheme (argued in docs/SECURITY.md): a counter block is 128 bits, big-endian,
//! `prefix (64) || sequence (32) || block (32)`. The prefix is drawn from the OS at every open
//! (and again after 2^32 sequences), the sequence numbers records (perrecord) or page writes
//! (pagelevel) within one prefix, and the block counter numbers 16-byte blocks inside one
//! record or page, so each sealed unit owns 2^32 blocks (64 GiB), far more than a record or
//! page may hold. The LSN plays no part: rewriting the same position always uses a new IV.

use std::sync::atomic::{AtomicU64, Ordering};

use aes::Aes256;
use cipher::{InnerIvInit, KeyInit, StreamCipherCore};
use zeroize::Zeroizing;

use crate::aead::GcmKey;
use crate::error::{Error, Result};
pub use crate::format::{IV_LEN, KCV_LEN, KEY_LEN};
pub(crate) use crate::keys::{Key, KeyRing};
use crate::line_ledger::LineU64;
use crate::lock_order::{self, Domain, OrderedMutex};

type Aes256CtrCore<'a> = ctr::CtrCore<&'a Aes256, ctr::flavors::Ctr128BE>;

/// The fixed block whose encryption is a key check value. Its block field (the low 32 bits,
/// `" kcv"` read big-endian, 0x206B6376, about 5.4·10^8) lies above any block index a record
/// or page reaches (a record holds at most 2^26 + 1 blocks, a page 2^16), so no counter block
/// [`IvSource`] hands out can equal it, whatever prefix is drawn: the check value never
/// reveals a keystream block.
const KCV_BLOCK: [u8; 16] = *b"walcrypt key kcv";

pub(crate) fn check_value(aes: &Aes256) -> [u8; KCV_LEN] {
    use cipher::BlockCipherEncrypt;
    let mut block = KCV_BLOCK.into();
    aes.encrypt_block(&mut block);
    let mut kcv = [0u8; KCV_LEN];
    kcv.copy_from_slice(&block[..KCV_LEN]);
    kcv
}

/// The check value of a raw key (not of a log's working key derived from it).
pub(crate) fn raw_check_value(key: &Key) -> [u8; KCV_LEN] {
    check_value(&Aes256::new(key.bytes().into()))
}

/// The check value a log with id `log_id` records for data key `key` under `key_id`.
pub(crate) fn working_check_value(key: &Key, log_id: u64, key_id: u32) -> [u8; KCV_LEN] {
    let working = working_key(key, log_id, key_id);
    check_value(&Aes256::new((&*working).into()))
}

/// The working key of log `log_id` for data key `key` under `key_id`, as a [`Key`].
pub(crate) fn working_key_for(key: &Key, log_id: u64, key_id: u32) -> Key {
    let mut working = working_key(key, log_id, key_id);
    Key::from_mut_bytes(&mut working)
}

// What a data key computes: its check values and the working key of a log. Here, beside the
// derivations they use, rather than with the rest of `Key` in `keys`, which sits below crypto.
impl Key {
    /// The key check value: the first 8 bytes of AES-256 applied to a fixed domain block.
    ///
    /// It identifies a raw key without revealing it. A log does not store this value: its
    /// segment headers hold the check values of the log's own working keys, derived from the
    /// data key and the log id, so two logs sharing a data key do not show it.
    pub fn check_value(&self) -> [u8; KCV_LEN] {
        raw_check_value(self)
    }

    /// The check value a log's segment headers record for this key under `key_id`: the check
    /// value of the log's working key, derived from this key and the log id.
    pub fn log_check_value(&self, log_id: u64, key_id: u32) -> [u8; KCV_LEN] {
        working_check_value(self, log_id, key_id)
    }

    /// The working key that encrypts the data of log `log_id` under key id `key_id`:
    /// HKDF-SHA256 of this data key, the log id and the key id (docs/SECURITY.md). What tools
    /// outside the library need to decrypt stored bytes with plain AES-256-CTR.
    pub fn for_log(&self, log_id: u64, key_id: u32) -> Key {
        working_key_for(self, log_id, key_id)
    }
}

/// HKDF salt of the per-log working keys.
const WORKING_KEY_SALT: &[u8] = b"walcrypt working key v2";

/// The key that actually encrypts one log's data under data key `key_id`:
/// HKDF-SHA256(salt = "walcrypt working key v2", ikm = data key, info = log id (u64 LE) ||
/// key id (u32 LE)). Each log gets its own AES key from a shared data key, so the IV bound
/// counts the opens of one log only, and check values differ between logs.
fn working_key(key: &Key, log_id: u64, key_id: u32) -> Zeroizing<[u8; KEY_LEN]> {
    let mut info = [0u8; 12];
    info[..8].copy_from_slice(&log_id.to_le_bytes());
    info[8..].copy_from_slice(&key_id.to_le_bytes());
    derive_key(WORKING_KEY_SALT, key, &info)
}

/// HKDF-SHA256(salt, ikm = `key`, info) to one AES-256 key: the one derivation behind the log's
/// working keys, the control file's key and sealed files' keys, each with a salt of its own.
pub(crate) fn derive_key(salt: &[u8], key: &Key, info: &[u8]) -> Zeroizing<[u8; KEY_LEN]> {
    let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(salt), key.bytes());
    let mut okm = Zeroizing::new([0u8; KEY_LEN]);
    // 32 bytes is far below HKDF-SHA256's limit of 255 * 32: expand cannot fail.
    let _ = hk.expand(info, okm.as_mut());
    okm
}

/// A key ring with every key schedule expanded once, ready for many threads.
///
/// The schedules are those of the log's working keys (see `working_key`), never of the raw
/// data keys.
pub(crate) struct Keys {
    expanded: Vec<(u32, Aes256, [u8; KCV_LEN])>,
    /// The AES-256-GCM state of each working key (perrecord-gcm), expanded once.
    gcm: Vec<(u32, GcmKey)>,
    active: Option<u32>,
}

impl Keys {
    /// Expands the working key of every key in `ring` for log `log_id`: its AES-256 schedule
    /// (CTR) and its AES-256-GCM state. Fails only if the GCM state cannot be set up.
    pub(crate) fn new(ring: &KeyRing, log_id: u64) -> Result<Keys> {
        let mut expanded = Vec::new();
        let mut gcm = Vec::new();
        for (id, key) in ring.entries() {
            let working = working_key(key, log_id, id);
            let aes = Aes256::new((&*working).into());
            let kcv = check_value(&aes);
            let what = || format!("working key {id} of log {log_id:016x}");
            gcm.push((id, GcmKey::new(&working, what)?));
            expanded.push((id, aes, kcv));
        }
        Ok(Keys {
            expanded,
            gcm,
            active: ring.active_id(),
        })
    }

    /// The AES-256-GCM state of key `key_id`.
    pub(crate) fn gcm(&self, key_id: u32) -> Result<&GcmKey> {
        self.gcm
            .iter()
            .find(|(k, _)| *k == key_id)
            .map(|(_, gcm)| gcm)
            .ok_or(Error::missing_key(key_id))
    }

    pub(crate) fn active(&self) -> Option<u32> {
        self.active
    }

    /// `(id, check value)` of the active key only: what a new segment lists, since its
    /// records and pages use no other key.
    pub(crate) fn active_check_values(&self) -> Vec<(u32, [u8; KCV_LEN])> {
        self.active
            .and_then(|id| self.check_value(id).map(|kcv| vec![(id, kcv)]))
            .unwrap_or_default()
    }

    pub(crate) fn check_value(&self, id: u32) -> Option<[u8; KCV_LEN]> {
        self.expanded
            .iter()
            .find(|(k, _, _)| *k == id)
            .map(|(_, _, kcv)| *kcv)
    }

    /// XORs the AES-256-CTR keystream for (`key_id`, `iv`) into `data`.
    pub(crate) fn apply_keystream(
        &self,
        key_id: u32,
        iv: &[u8; IV_LEN],
        data: &mut [u8],
    ) -> Result<()> {
        let aes = self
            .expanded
            .iter()
            .find(|(k, _, _)| *k == key_id)
            .map(|(_, aes, _)| aes)
            .ok_or(Error::missing_key(key_id))?;
        apply_keystream(aes, iv, data);
        Ok(())
    }
}

/// AES-256-CTR with a 128-bit big-endian counter, starting at `iv`, over a shared key schedule.
///
/// It drives the CTR core directly: `StreamCipherCoreWrapper` (the `StreamCipher` type) keeps
/// a keystream buffer for calls that continue mid-block, which one-shot use never makes, and
/// setting it up and wiping it cost as much as encrypting a 64-byte record (2× the throughput
/// at 16–64 B, 1.5× at 256 B; docs/BENCHMARKS.md, "Cipher"). The last partial block goes
/// through a stack block that holds only that block's output and unused keystream.
pub(crate) fn apply_keystream(aes: &Aes256, iv: &[u8; IV_LEN], data: &mut [u8]) {
    let core = Aes256CtrCore::inner_iv_init(aes, iv.into());
    // Panics only if the counter would wrap before the data ends, which a 128-bit counter
    // that starts at zero cannot (the IV is the nonce; `remaining_blocks` is unbounded).
    core.apply_keystream_partial(data.into());
}

/// Applies the AES-256-CTR keystream of `key` and `iv` to `data`, expanding the key schedule
/// for this one call. For tests, benchmarks and tools; the log itself expands each key once.
pub fn ctr_apply_keystream(key: &Key, iv: &[u8; IV_LEN], data: &mut [u8]) {
    let aes = Aes256::new(key.bytes().into());
    apply_keystream(&aes, iv, data);
}

/// Hands out IVs (counter blocks) that never repeat under one key; see the module docs.
///
/// Sequence numbers are taken from the shared counter in blocks of [`IV_BLOCK`] per thread,
/// so appenders on different threads do not write one cache line per record. Blocks are
/// disjoint and each thread uses its block's numbers once each, in order, so no number is
/// handed out twice; numbers a thread leaves unused (it moved on to another log, or ended)
/// are never used by anyone. A block never straddles two prefix epochs (`IV_BLOCK` divides
/// 2^32).
pub(crate) struct IvSource {
    /// Next sequence number not yet in any thread's block; bits 32.. select the prefix epoch.
    /// Written once per [`IV_BLOCK`] IVs a thread draws; a shared-line wrapper
    /// (line_ledger.rs).
    next: LineU64,
    /// Tells this source's blocks from another's in a thread's cache.
    id: u64,
    first_prefix: u64,
    /// Prefixes for epochs after the first, drawn on demand (after 2^32 IVs in one open).
    later: OrderedMutex<Vec<u64>, { lock_order::IV_PREFIX }>,
}

/// Sequence numbers a thread takes from an [`IvSource`] at a time.
const IV_BLOCK: u64 = 64;
const _: () = assert!(
    (1u64 << 32).is_multiple_of(IV_BLOCK),
    "a block must not straddle two epochs"
);

thread_local! {
    /// This thread's block: the source's id, the next number and the block's end.
    static IV_BLOCK_HERE: std::cell::Cell<(u64, u64, u64)> = const { std::cell::Cell::new((0, 0, 0)) };
}

impl IvSource {
    /// A source whose prefix table is a lock of `domain` (its log's).
    pub(crate) fn new(domain: Domain) -> Result<IvSource> {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Ok(IvSource {
            next: LineU64::named("iv.next", 0),
            id: IDS.fetch_add(1, Ordering::Relaxed),
            first_prefix: random_u64("an IV prefix")?,
            later: OrderedMutex::new(Vec::new(), domain),
        })
    }

    /// The next IV. The block counter (low 32 bits) starts at zero.
    pub(crate) fn next_iv(&self) -> Result<[u8; IV_LEN]> {
        let n = IV_BLOCK_HERE.with(|here| {
            let (id, next, end) = here.get();
            let (next, end) = if id == self.id && next < end {
                (next, end)
            } else {
                let start = self.next.fetch_add(IV_BLOCK, Ordering::Relaxed);
                (start, start + IV_BLOCK)
            };
            here.set((self.id, next + 1, end));
            next
        });
        let epoch = n >> 32;
        let prefix = if epoch == 0 {
            self.first_prefix
        } else {
            self.prefix_for_epoch(epoch)?
        };
        let mut iv = [0u8; IV_LEN];
        iv[..8].copy_from_slice(&prefix.to_be_bytes());
        iv[8..12].copy_from_slice(&(n as u32).to_be_bytes());
        Ok(iv)
    }

    #[cold]
    fn prefix_for_epoch(&self, epoch: u64) -> Result<u64> {
        let mut later = self.later.lock();
        let index = usize::try_from(epoch - 1).unwrap_or(usize::MAX);
        while later.len() <= index {
            later.push(random_u64("an IV prefix")?);
        }
        Ok(later[index])
    }
}

/// Draws a random `u64` from the OS; `what` names it in the error (`"an IV prefix"`).
pub(crate) fn random_u64(what: &'static str) -> Result<u64> {
    getrandom::u64().map_err(|e| Error::RandomSource {
        what,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_keys_differ_per_log_and_so_do_check_values() {
        let ring = KeyRing::generate().unwrap();
        let a = Keys::new(&ring, 1).unwrap();
        let b = Keys::new(&ring, 2).unwrap();
        assert_ne!(a.check_value(1), b.check_value(1));
        assert_eq!(
            a.check_value(1),
            Keys::new(&ring, 1).unwrap().check_value(1)
        );
        let raw = ring.get(1).unwrap().check_value();
        assert_ne!(a.check_value(1), Some(raw));
    }

    #[test]
    fn ivs_differ_in_sequence_and_share_the_open_prefix() {
        let src = IvSource::new(Domain::new()).unwrap();
        let a = src.next_iv().unwrap();
        let b = src.next_iv().unwrap();
        assert_ne!(a, b);
        assert_eq!(a[..8], b[..8]);
        assert_eq!(a[12..], [0; 4]);
        let other = IvSource::new(Domain::new()).unwrap();
        assert_ne!(other.next_iv().unwrap()[..8], a[..8]);
    }

    #[test]
    fn a_new_epoch_draws_a_new_prefix() {
        let src = IvSource::new(Domain::new()).unwrap();
        src.next.store((1 << 32) - IV_BLOCK, Ordering::Relaxed);
        let block: Vec<_> = (0..IV_BLOCK).map(|_| src.next_iv().unwrap()).collect();
        let first_of_next = src.next_iv().unwrap();
        assert_eq!(block[IV_BLOCK as usize - 1][8..12], [0xff; 4]);
        assert_ne!(block[0][..8], first_of_next[..8]);
        assert_eq!(first_of_next[8..12], [0; 4]);
    }

    #[test]
    fn threads_and_logs_taking_ivs_at_once_never_get_the_same_one() {
        let a = std::sync::Arc::new(IvSource::new(Domain::new()).unwrap());
        let b = std::sync::Arc::new(IvSource::new(Domain::new()).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (a, b) = (a.clone(), b.clone());
                // Alternating between two sources makes every draw leave a block unfinished.
                std::thread::spawn(move || {
                    (0..1000)
                        .flat_map(|i| match i % 3 {
                            0 => [a.next_iv().unwrap(), b.next_iv().unwrap()],
                            _ => [a.next_iv().unwrap(), a.next_iv().unwrap()],
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seen = std::collections::HashSet::new();
        for thread in threads {
            for iv in thread.join().unwrap() {
                assert!(seen.insert(iv), "IV handed out twice");
            }
        }
        assert_eq!(seen.len(), 4 * 2000);
    }
}
