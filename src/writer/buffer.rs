//! The WAL buffer: a ring of page slots, which appenders copy their records into with no
//! lock held. A slot's memory is a row of atomic words: an appender stores the words its
//! reserved bytes cover whole, and merges its bytes into a word it shares with the record
//! before or after it with a compare-and-swap that leaves the other bytes as they are. So
//! appenders into one page never wait for each other, and the crate stays free of `unsafe`.
//! A write-out reads the bytes below a position only once every insertion below it has
//! finished (insertions.rs); an insertion's stores happen before its lane goes idle (a
//! release store), and the write-out reads the lane (an acquire load) before the bytes.
//!
//! A slot is reached through [`PageBuffer::holding`] (a page the caller knows is in the
//! buffer) or [`PageBuffer::claim`] (a page an appender enters), which give a [`Holding`].
//! The page a slot holds is one atomic word, claimed for a new page by a compare-and-swap.
//! How much of a record continues into the page (`rem_len`) and, in pagelevel, the page's IV
//! sit under a small lock of the slot (level `SLOT`), tagged with their page: set once per
//! page (by the appender entering the page at its body's start) and read by the write-out.
//!
//! Invariants this part keeps:
//! - a slot holds one page at a time, and only moves forward in the log: a slot that holds a
//!   later page than the one asked for is a broken invariant, reported as an error;
//! - a slot is claimed for a new page only once the page it held has landed in full (the
//!   caller passes how far the log is written; the page one ring length earlier must be
//!   below it), so memory stays bounded and no page is overwritten before it is written. The
//!   write-out's reads of a page happen before it publishes that the page landed (a release
//!   store of `written_to`), which the claimer reads (acquire), so they never see the next
//!   page's bytes;
//! - a reader that may race a claim (the hint refresh, which images a page that may have
//!   landed in full) checks [`Holding::still_holds`] after its reads: an appender stores into
//!   a slot only after it saw the slot hold its page, behind a release fence, so a read that
//!   saw one of its bytes makes the check see the new page (the seqlock's argument).

use crate::Lsn;
use crate::crypto::IV_LEN;
use crate::line_ledger::LineU64;
use crate::lock_order::{self, Domain, OrderedMutex};
use crossbeam::utils::CachePadded;
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, fence};
use std::sync::atomic::Ordering;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, fence};

/// A slot holding no page yet.
pub(super) const NO_PAGE: Lsn = Lsn(u64::MAX);

/// pagelevel: a page's key id and IV.
pub(super) type PageCipher = (u32, [u8; IV_LEN]);

/// What the write-out needs of a page beyond its bytes, for the page it names.
#[derive(Clone, Copy)]
struct PageMeta {
    /// The page these fields belong to; for any other page they are unset.
    page: Lsn,
    /// How many bytes of a record continuing from the page before open this page's body.
    rem_len: u32,
    /// pagelevel: the key id and IV of this page, drawn at its first write-out and kept for
    /// every rewrite within this open, so a rewrite repeats the durable bytes exactly.
    cipher: Option<PageCipher>,
}

impl PageMeta {
    /// Makes these the fields of `page`, unset, if they belong to an earlier page.
    fn take_for(&mut self, page: Lsn) {
        if self.page != page {
            *self = PageMeta {
                page,
                rem_len: 0,
                cipher: None,
            };
        }
    }
}

struct Slot {
    /// The page (its start) this slot holds, or `NO_PAGE`. Read by every appender entering
    /// the page, written once per page (its claim).
    page: LineU64,
    meta: OrderedMutex<PageMeta, { lock_order::SLOT }>,
    /// The page's bytes, 8 to a word, little-endian (byte `i` of the page is bits
    /// `8 * (i % 8)..` of word `i / 8`).
    words: Box<[AtomicU64]>,
    /// The shared-line ledger's count of merges into words another record shares.
    #[cfg(feature = "line-ledger")]
    edges: crate::line_ledger::LastWriter,
}

pub(super) struct PageBuffer {
    slots: Box<[CachePadded<Slot>]>,
    page_size: u64,
}

/// Why a slot could not be used: a broken invariant, described.
pub(super) struct WrongPage(pub(super) String);

/// A slot seen holding `page`.
pub(super) struct Holding<'a> {
    slot: &'a Slot,
    page: Lsn,
}

impl PageBuffer {
    /// `pages` slots (at least 4) of `page_size` bytes (a multiple of 8), their locks in
    /// `domain`.
    pub(super) fn new(pages: usize, page_size: u64, domain: Domain) -> PageBuffer {
        debug_assert!(page_size.is_multiple_of(8), "page size {page_size}");
        let slots = (0..pages.max(4))
            .map(|_| {
                CachePadded::new(Slot {
                    page: LineU64::named("slot.page", NO_PAGE.0),
                    meta: OrderedMutex::new(
                        PageMeta {
                            page: NO_PAGE,
                            rem_len: 0,
                            cipher: None,
                        },
                        domain,
                    ),
                    words: (0..page_size / 8).map(|_| AtomicU64::new(0)).collect(),
                    #[cfg(feature = "line-ledger")]
                    edges: crate::line_ledger::LastWriter::new(),
                })
            })
            .collect();
        PageBuffer { slots, page_size }
    }

    /// Bytes of log the ring holds at once.
    pub(super) fn ring_bytes(&self) -> u64 {
        self.slots.len() as u64 * self.page_size
    }

    fn slot_of(&self, page: Lsn) -> &Slot {
        &self.slots[(page.0 / self.page_size) as usize % self.slots.len()]
    }

    /// Puts the valid prefix of the page holding the end of a reopened log into its slot.
    /// Called before any appender can reach the buffer.
    pub(super) fn preload(&self, page: Lsn, prefix: &[u8], rem_len: u32) {
        let slot = self.slot_of(page);
        slot.page.store(page.0, Ordering::Release);
        let holding = Holding { slot, page };
        holding.set_rem_len(rem_len);
        holding.write(0, prefix);
    }

    /// The slot of `page`; an error if it holds another page.
    pub(super) fn holding(&self, page: Lsn) -> Result<Holding<'_>, WrongPage> {
        let slot = self.slot_of(page);
        let held = slot.page.load(Ordering::Acquire);
        if held != page.0 {
            return Err(WrongPage(format!(
                "the buffer slot of page {page} holds page {}",
                Lsn(held)
            )));
        }
        Ok(Holding { slot, page })
    }

    /// The slot of `page`, holding `page`, if it holds it already or the page it held has
    /// landed in full (everything before `written` has); `Ok(None)` when the caller must make
    /// room first (write out everything before `page`). `rem_len`, for the record entering
    /// the page at its body's start: how much of it continues there.
    pub(super) fn claim(
        &self,
        page: Lsn,
        rem_len: Option<u32>,
        written: Lsn,
    ) -> Result<Option<Holding<'_>>, WrongPage> {
        let slot = self.slot_of(page);
        let mut held = slot.page.load(Ordering::Acquire);
        while held != page.0 {
            if held != NO_PAGE.0 && held > page.0 {
                return Err(WrongPage(format!(
                    "the buffer slot of page {page} holds the later page {}",
                    Lsn(held)
                )));
            }
            // The slot's page is at most the page one ring length before `page`, so it has
            // landed once everything before that page's end has.
            let free_from = (page + self.page_size).0.saturating_sub(self.ring_bytes());
            if written.0 < free_from {
                return Ok(None);
            }
            debug_assert!(
                held == NO_PAGE.0 || written.0 >= held + self.page_size,
                "slot of page {} reused for page {page} before it landed (written to {written})",
                Lsn(held),
            );
            // No zeroing: the writer copies only bytes below its target and writes zeros
            // after. Concurrent claimers of one page: one swap wins, the others find the page.
            match slot
                .page
                .compare_exchange(held, page.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => held = page.0,
                Err(now) => held = now,
            }
        }
        // This thread's stores into the slot come after it saw the slot hold `page`
        // (`Holding::still_holds`).
        fence(Ordering::Release);
        let holding = Holding { slot, page };
        if let Some(rem_len) = rem_len {
            holding.set_rem_len(rem_len);
        }
        Ok(Some(holding))
    }

    /// Test hook: makes the slot of `page` claim to hold `other`.
    #[cfg(test)]
    pub(super) fn mislabel(&self, page: Lsn, other: Lsn) {
        self.slot_of(page).page.store(other.0, Ordering::Release);
    }
}

impl Holding<'_> {
    /// Stores `bytes` at offset `at` of the page: the caller's reserved bytes, which no
    /// other thread writes. Words they cover whole are stored; a word shared with a
    /// neighbouring record's bytes is merged with a compare-and-swap.
    pub(super) fn write(&self, at: usize, bytes: &[u8]) {
        // The caller's insertion is in progress, so the page cannot land and its slot cannot
        // be claimed for a later page before this returns.
        debug_assert_eq!(
            Lsn(self.slot.page.load(Ordering::Relaxed)),
            self.page,
            "a copy into a slot that no longer holds its page"
        );
        let mut at = at;
        let mut rest = bytes;
        // A head inside a word it shares with the bytes before.
        let offset = at % 8;
        if offset != 0 && !rest.is_empty() {
            let n = rest.len().min(8 - offset);
            self.merge(at / 8, offset, &rest[..n]);
            at += n;
            rest = &rest[n..];
        }
        // The words covered whole, one store each: a loop over whole words rather than one
        // that works out each word's share, which took about a third of the instructions of
        // an append's copy and of a write-out's reads (callgrind; docs/BENCHMARKS.md, "The
        // buffer's copies by whole words").
        let (whole, tail) = rest.as_chunks::<8>();
        let first = at / 8;
        for (word, chunk) in self.slot.words[first..first + whole.len()]
            .iter()
            .zip(whole)
        {
            word.store(u64::from_le_bytes(*chunk), Ordering::Relaxed);
        }
        // A tail inside a word it shares with the bytes after.
        if !tail.is_empty() {
            self.merge(first + whole.len(), 0, tail);
        }
    }

    /// Puts `bytes` at byte `offset` of word `index`, leaving its other bytes as they are.
    fn merge(&self, index: usize, offset: usize, bytes: &[u8]) {
        let mut value = [0u8; 8];
        let mut mask = [0u8; 8];
        value[offset..offset + bytes.len()].copy_from_slice(bytes);
        mask[offset..offset + bytes.len()].fill(0xFF);
        let (value, mask) = (u64::from_le_bytes(value), u64::from_le_bytes(mask));
        #[cfg(feature = "line-ledger")]
        self.slot.edges.wrote("slot.edge_word");
        let word = &self.slot.words[index];
        let mut seen = word.load(Ordering::Relaxed);
        while let Err(now) = word.compare_exchange_weak(
            seen,
            (seen & !mask) | value,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            seen = now;
        }
    }

    /// Copies the bytes at offset `at` of the page into `out`.
    pub(super) fn read(&self, at: usize, out: &mut [u8]) {
        let words = &self.slot.words;
        let offset = at % 8;
        let n = match offset {
            0 => 0,
            _ => out.len().min(8 - offset),
        };
        let (head, rest) = out.split_at_mut(n);
        if !head.is_empty() {
            let word = words[at / 8].load(Ordering::Relaxed).to_le_bytes();
            head.copy_from_slice(&word[offset..offset + n]);
        }
        let first = (at + n) / 8;
        let (whole, tail) = rest.as_chunks_mut::<8>();
        let count = whole.len();
        for (chunk, word) in whole.iter_mut().zip(&words[first..first + count]) {
            *chunk = word.load(Ordering::Relaxed).to_le_bytes();
        }
        if !tail.is_empty() {
            let word = words[first + count].load(Ordering::Relaxed).to_le_bytes();
            tail.copy_from_slice(&word[..tail.len()]);
        }
    }

    /// Whether the slot still holds the page it held when this was made, checked after
    /// reads that may race a claim of the slot for a later page: when it does, no byte read
    /// came from that later page.
    pub(super) fn still_holds(&self) -> bool {
        fence(Ordering::Acquire);
        self.slot.page.load(Ordering::Relaxed) == self.page.0
    }

    /// Sets how much of a record continuing from the page before opens this page's body.
    pub(super) fn set_rem_len(&self, rem_len: u32) {
        let mut meta = self.slot.meta.lock();
        debug_assert!(
            meta.page == NO_PAGE || meta.page <= self.page,
            "rem_len of page {} set in a slot holding page {}",
            self.page,
            meta.page
        );
        meta.take_for(self.page);
        meta.rem_len = rem_len;
    }

    /// The page's `rem_len` (zero when no record entered the page at its body's start), and
    /// in pagelevel (`draw` given) the page's key id and IV, drawn with `draw` at the first
    /// call for the page. A slot claimed for a later page meanwhile (which only a reader
    /// that checks [`Holding::still_holds`] may find) keeps that page's fields: the answer
    /// is then zero and a fresh draw, for an image the caller throws away.
    pub(super) fn meta<E>(
        &self,
        draw: Option<&mut dyn FnMut() -> Result<PageCipher, E>>,
    ) -> Result<(u32, Option<PageCipher>), E> {
        let mut meta = self.slot.meta.lock();
        if meta.page != NO_PAGE && meta.page > self.page {
            let cipher = match draw {
                Some(draw) => Some(draw()?),
                None => None,
            };
            return Ok((0, cipher));
        }
        meta.take_for(self.page);
        if let Some(draw) = draw
            && meta.cipher.is_none()
        {
            meta.cipher = Some(draw()?);
        }
        Ok((meta.rem_len, meta.cipher))
    }
}

/// The buffer's protocol under the model checker: `RUSTFLAGS="--cfg loom" cargo test
/// --release --lib loom_model` (`.ci/run` runs it). Two appenders claim one fresh slot at
/// once and copy records that share a word on each side; a reader images a page while an
/// appender claims its slot for the page one ring length on and writes there. Loom explores
/// every interleaving: no byte of either record may be lost, the page's `rem_len` must be the
/// one its entering record set, and an image the reader keeps (`still_holds`) must hold only
/// the old page's bytes.
#[cfg(all(test, loom))]
mod loom_model {
    use super::{Lsn, PageBuffer};
    use crate::lock_order::Domain;
    use loom::sync::Arc;

    const PAGE: u64 = 32;

    #[test]
    fn adjacent_records_claiming_one_slot_keep_every_byte() {
        loom::model(|| {
            let buffer = Arc::new(PageBuffer::new(4, PAGE, Domain::new()));
            let a = {
                let buffer = buffer.clone();
                loom::thread::spawn(move || {
                    let slot = buffer.claim(Lsn(0), Some(7), Lsn(0)).ok().flatten();
                    slot.expect("a fresh slot is claimable").write(3, &[1; 10]);
                })
            };
            let b = {
                let buffer = buffer.clone();
                loom::thread::spawn(move || {
                    let slot = buffer.claim(Lsn(0), None, Lsn(0)).ok().flatten();
                    slot.expect("a fresh slot is claimable").write(13, &[2; 7]);
                })
            };
            a.join().unwrap();
            b.join().unwrap();
            let slot = buffer.holding(Lsn(0)).ok().expect("the slot holds page 0");
            let mut page = [0u8; PAGE as usize];
            slot.read(0, &mut page);
            assert_eq!(&page[3..13], &[1; 10]);
            assert_eq!(&page[13..20], &[2; 7]);
            assert!(page[..3].iter().chain(&page[20..]).all(|&b| b == 0));
            let (rem_len, cipher) = slot.meta::<()>(None).unwrap();
            assert_eq!(rem_len, 7);
            assert!(cipher.is_none());
        });
    }

    #[test]
    fn an_image_kept_after_a_racing_claim_has_only_the_old_pages_bytes() {
        loom::model(|| {
            let buffer = Arc::new(PageBuffer::new(4, PAGE, Domain::new()));
            buffer.preload(Lsn(0), &[0xAA; PAGE as usize], 0);
            let later = Lsn(4 * PAGE);
            let claimer = {
                let buffer = buffer.clone();
                loom::thread::spawn(move || {
                    // Page 0 has landed in full (written to its end).
                    let slot = buffer.claim(later, None, Lsn(PAGE)).ok().flatten();
                    slot.expect("a landed page's slot is claimable")
                        .write(8, &[0xBB; 8]);
                })
            };
            if let Ok(slot) = buffer.holding(Lsn(0)) {
                let mut image = [0u8; 8];
                slot.read(8, &mut image);
                if slot.still_holds() {
                    assert_eq!(image, [0xAA; 8], "a kept image has a later page's bytes");
                }
            }
            claimer.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Lsn, PageBuffer};
    use crate::lock_order::Domain;

    /// Every start offset within a word and every length up to three words, written beside
    /// bytes already there: the bytes land where they belong and the neighbours keep theirs.
    #[test]
    fn writes_at_every_offset_keep_the_neighbouring_bytes() {
        let buffer = PageBuffer::new(4, 64, Domain::new());
        for at in 0..16usize {
            for len in 0..=24usize {
                let page = Lsn(64 * (at * 25 + len) as u64);
                let slot = buffer
                    .claim(page, None, page)
                    .ok()
                    .flatten()
                    .expect("the slot is free: everything before the page is written");
                slot.write(0, &[0xEE; 64]);
                let bytes: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37) ^ 0x5A).collect();
                slot.write(at, &bytes);
                let mut image = [0u8; 64];
                slot.read(0, &mut image);
                assert!(image[..at].iter().all(|&b| b == 0xEE), "before {at}+{len}");
                assert_eq!(&image[at..at + len], &bytes[..], "at {at}, {len} bytes");
                assert!(
                    image[at + len..].iter().all(|&b| b == 0xEE),
                    "after {at}+{len}"
                );
                let mut part = vec![0u8; len];
                slot.read(at, &mut part);
                assert_eq!(part, bytes, "read back at {at}, {len} bytes");
            }
        }
    }

    /// Concurrent appenders into one page, each its own stretch of odd length: every byte
    /// is its appender's.
    #[test]
    fn concurrent_writes_into_one_page_keep_every_byte() {
        let buffer = PageBuffer::new(4, 4096, Domain::new());
        let stretches: Vec<(usize, usize)> = (0..64).map(|i| (i * 61 + 3, 61)).collect();
        std::thread::scope(|s| {
            for (t, chunk) in stretches.chunks(16).enumerate() {
                let buffer = &buffer;
                s.spawn(move || {
                    for &(at, len) in chunk.iter().rev() {
                        let slot = buffer.claim(Lsn(0), None, Lsn(0)).ok().flatten();
                        let slot = slot.expect("a fresh slot is claimable");
                        slot.write(at, &vec![t as u8 + 1; len]);
                    }
                });
            }
        });
        let slot = buffer.holding(Lsn(0)).ok().expect("the slot holds page 0");
        let mut page = vec![0u8; 4096];
        slot.read(0, &mut page);
        for (i, &(at, len)) in stretches.iter().enumerate() {
            let t = (i / 16) as u8 + 1;
            assert!(
                page[at..at + len].iter().all(|&b| b == t),
                "stretch {i} at {at}"
            );
        }
    }
}
