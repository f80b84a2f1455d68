//! The inspection surface, for tools and for tests that damage logs on purpose: the byte
//! layout (segment, page and record headers and their sizes), raw records as stored, page
//! headers, and the bare AES-256-CTR keystream.
//!
//! An embedder that appends, flushes, replays and reads records needs nothing from here; it
//! uses [`crate::Wal`] and [`crate::Reader`]. `wal-dump` is built on this module.
//!
//! # What is promised
//!
//! Every item here is public API under the crate's semver policy (README, "Versioning"): its
//! name and signature change only in a breaking release. What the items describe is the
//! on-disk format (docs/FORMAT.md), and their values follow it: a release that writes a new
//! [`FORMAT_VERSION`] may move an offset, add a flag or lengthen a header, and says so in
//! CHANGELOG.md. A tool reads each segment's version from its [`SegmentHeader`] and handles
//! versions [`OLDEST_READ_VERSION`] to [`FORMAT_VERSION`].
//!
//! The module holds what `wal-dump`, walcrypt's tests and its benches use, the types that
//! these items and [`crate::Reader`] return ([`HeaderError`], [`PageInfo`], [`RawRecords`]),
//! and what their documentation refers to ([`RECORD_FLAG_ENCRYPTED`], [`auth_aad`],
//! [`same_lsn_window`]). The rest of the layout (the offsets of the page header's fields, of
//! the associated data under a GCM tag and of the segment header's fields not listed here, the
//! page-size limits, the mode codes) is described in docs/FORMAT.md and not exported;
//! [`PageHeader`], [`SegmentHeader`] and [`RecordHeader`] decode the headers.

pub use crate::crypto::ctr_apply_keystream;
pub use crate::format::{
    AUTHENTICATED_CONTROL_VERSION, FORMAT_VERSION, GEOMETRY_BOUND_VERSION, Geometry, HeaderError,
    KCV_ENTRY, MAX_PAYLOAD, OLDEST_READ_VERSION, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, PageHeader,
    REC_CRC_AT, REC_FLAGS_AT, REC_IV_AT, REC_KIND_AT, REC_LEN_AT, RECORD_FLAG_AUTHENTICATED,
    RECORD_FLAG_COMPRESSED, RECORD_FLAG_ENCRYPTED, RECORD_FLAG_RESUME, RECORD_FLAG_SWITCH,
    RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN, RESUME_PAYLOAD_LEN, RecordHeader,
    SEALED_SWITCH_FLAGS, SEG_NKEYS_AT, SEG_VERSION_AT, SEGMENT_HEADER_FIXED, SEGMENT_MAGIC,
    SegmentHeader, TAG_LEN, auth_aad, bind_crc_to_lsn, header_len_for_flags, kcv_entry_at,
    parse_segment_file_name, record_crc, record_crc_unbound, record_crc_whole, same_lsn_window,
    segment_file_name,
};
pub use crate::reader::{PageInfo, RawRecord, RawRecords, SegmentInfo, check_page_header};
