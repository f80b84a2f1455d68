//! A page read ahead of the cursor ([`Prefetched`]) and how much one read ahead asks for
//! ([`READ_AHEAD_BYTES`]): what both the prefetching thread (`reader::ahead`) and what it makes
//! for perrecord records (`reader::made`) work on. The rules are in the docs of
//! `reader::ahead`.

use crate::Lsn;
use crate::format::PageHeader;

/// Bytes one read-ahead system call asks for (32 pages of 8 KiB).
pub(crate) const READ_AHEAD_BYTES: usize = 256 << 10;

/// A page read and checked ahead of the cursor, its body decrypted unless `encrypted`.
pub(crate) struct Prefetched {
    pub(crate) lsn: Lsn,
    pub(crate) header: PageHeader,
    /// The whole page.
    pub(crate) image: Vec<u8>,
    /// The body is still pagelevel ciphertext (the prefetcher left it to the cursor, which was
    /// waiting); its key is listed and present.
    pub(crate) encrypted: bool,
}
