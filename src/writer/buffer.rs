//! The WAL buffer: a ring of page slots, each under a lock of its own (level `SLOT`), held
//! only for a memcpy (and, in pagelevel, to draw a page's IV at its first write-out). The
//! slot locks are private here: a slot is reached through [`PageBuffer::holding`] (a page
//! the caller knows is in the buffer) or [`PageBuffer::claim`] (a page an appender enters).
//!
//! Invariants this part keeps:
//! - a slot holds one page at a time, and only moves forward in the log: a slot that holds a
//!   later page than the one asked for is a broken invariant, reported as an error;
//! - a slot is claimed for a new page only once the page it held has landed in full (the
//!   caller passes how far the log is written; the page one ring length earlier must be
//!   below it), so memory stays bounded and no page is overwritten before it is written.

use crate::Lsn;
use crate::crypto::IV_LEN;
use crate::lock_order::{self, Domain, OrderedGuard, OrderedMutex};

/// A slot holding no page yet.
pub(super) const NO_PAGE: Lsn = Lsn(u64::MAX);

pub(super) struct Slot {
    /// The page (its start) this slot holds, or `NO_PAGE`.
    pub(super) page: Lsn,
    /// How many bytes of a record continuing from the page before open this page's body.
    pub(super) rem_len: u32,
    /// pagelevel: the key id and IV of this page, drawn at its first write-out and kept for
    /// every rewrite within this open, so a rewrite repeats the durable bytes exactly.
    pub(super) cipher: Option<(u32, [u8; IV_LEN])>,
    pub(super) data: Vec<u8>,
}

pub(super) type SlotGuard<'a> = OrderedGuard<'a, Slot, { lock_order::SLOT }>;

pub(super) struct PageBuffer {
    slots: Box<[OrderedMutex<Slot, { lock_order::SLOT }>]>,
    page_size: u64,
}

/// Why a slot could not be used: a broken invariant, described.
pub(super) struct WrongPage(pub(super) String);

impl PageBuffer {
    /// `pages` slots (at least 4) of `page_size` bytes, their locks in `domain`.
    pub(super) fn new(pages: usize, page_size: u64, domain: Domain) -> PageBuffer {
        let slots = (0..pages.max(4))
            .map(|_| {
                OrderedMutex::new(
                    Slot {
                        page: NO_PAGE,
                        rem_len: 0,
                        cipher: None,
                        data: vec![0u8; page_size as usize],
                    },
                    domain,
                )
            })
            .collect();
        PageBuffer { slots, page_size }
    }

    /// Bytes of log the ring holds at once.
    pub(super) fn ring_bytes(&self) -> u64 {
        self.slots.len() as u64 * self.page_size
    }

    fn slot_of(&self, page: Lsn) -> &OrderedMutex<Slot, { lock_order::SLOT }> {
        &self.slots[(page.0 / self.page_size) as usize % self.slots.len()]
    }

    /// Puts the valid prefix of the page holding the end of a reopened log into its slot.
    pub(super) fn preload(&self, page: Lsn, prefix: &[u8], rem_len: u32) {
        let mut slot = self.slot_of(page).lock();
        slot.page = page;
        slot.rem_len = rem_len;
        slot.data[..prefix.len()].copy_from_slice(prefix);
    }

    /// The slot of `page`, locked; an error if it holds another page.
    pub(super) fn holding(&self, page: Lsn) -> Result<SlotGuard<'_>, WrongPage> {
        let slot = self.slot_of(page).lock();
        if slot.page != page {
            return Err(WrongPage(format!(
                "the buffer slot of page {page} holds page {}",
                slot.page
            )));
        }
        Ok(slot)
    }

    /// The slot of `page`, locked and holding `page`, if it holds it already or the page it
    /// held has landed in full (everything before `written` has); `Ok(None)` when the caller
    /// must make room first (write out everything before `page`). `rem_len`, for the record
    /// entering the page at its body's start: how much of it continues there.
    pub(super) fn claim(
        &self,
        page: Lsn,
        rem_len: Option<u32>,
        written: Lsn,
    ) -> Result<Option<SlotGuard<'_>>, WrongPage> {
        let mut slot = self.slot_of(page).lock();
        if slot.page == page {
            if let Some(rem_len) = rem_len {
                slot.rem_len = rem_len;
            }
            return Ok(Some(slot));
        }
        if slot.page != NO_PAGE && slot.page > page {
            return Err(WrongPage(format!(
                "the buffer slot of page {page} holds the later page {}",
                slot.page
            )));
        }
        // The slot's page is at most the page one ring length before `page`, so it has landed
        // once everything before that page's end has.
        let free_from = (page + self.page_size).0.saturating_sub(self.ring_bytes());
        if written.0 < free_from {
            return Ok(None);
        }
        debug_assert!(
            slot.page == NO_PAGE || written >= slot.page + self.page_size,
            "slot of page {} reused for page {page} before it landed (written to {written})",
            slot.page,
        );
        // No zeroing: the writer copies only bytes below its target and writes zeros after.
        slot.cipher = None;
        slot.page = page;
        slot.rem_len = rem_len.unwrap_or(0);
        Ok(Some(slot))
    }

    /// Test hook: makes the slot of `page` claim to hold `other`.
    #[cfg(test)]
    pub(super) fn mislabel(&self, page: Lsn, other: Lsn) {
        self.slot_of(page).lock().page = other;
    }
}
