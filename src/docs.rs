//! The project's documents, included from `docs/` so that they are read where the API is.
//! These modules hold no items, only text.
//!
//! - [`on_disk_format`]: the on-disk format, byte for byte; how versions change; what
//!   walcrypt assumes of the storage device.
//! - [`security`]: the threat model, the IV construction and its bound, keys, and what the
//!   encryption does not protect.
//! - [`design`]: the write path (sealing, the insert lock, the WAL buffer, page write-out,
//!   group commit, segments) and recovery, with the lock order.
//! - [`reliability`]: what survives which crash, and the tests that show it.
//!
//! The documents name each other by file name, as in the repository's `docs/` directory:
//! FORMAT.md is [`on_disk_format`], SECURITY.md [`security`], DESIGN.md [`design`] and
//! RELIABILITY.md [`reliability`]. Paths such as `src/writer/mod.rs` or `tests/torn_tail.rs`
//! are files of the source package.

#[doc = include_str!("../docs/FORMAT.md")]
pub mod on_disk_format {}

#[doc = include_str!("../docs/SECURITY.md")]
pub mod security {}

#[doc = include_str!("../docs/DESIGN.md")]
pub mod design {}

#[doc = include_str!("../docs/RELIABILITY.md")]
pub mod reliability {}
