//! The inspection surface, for tools and for tests that damage logs on purpose: the byte
//! layout (segment, page and record headers and their sizes), raw records as stored, page
//! headers, and the bare AES-256-CTR keystream.
//!
//! An embedder that appends, flushes, replays and reads records needs nothing from here; it
//! uses [`crate::Wal`] and [`crate::Reader`]. `wal-dump` is built on this module. What is here
//! follows the on-disk format (docs/FORMAT.md) and changes with
//! [`FORMAT_VERSION`].

pub use crate::crypto::ctr_apply_keystream;
pub use crate::format::{
    AAD_LEN, AAD_LSN_AT, FORMAT_VERSION, Geometry, HeaderError, KCV_ENTRY, LSN_LIMIT,
    MAX_PAGE_SIZE, MAX_PAYLOAD, MIN_PAGE_SIZE, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, PAGE_MAGIC,
    PageHeader, RECORD_FLAG_AUTHENTICATED, RECORD_FLAG_COMPRESSED, RECORD_FLAG_ENCRYPTED,
    RECORD_FLAG_RESUME, RECORD_FLAG_SWITCH, RECORD_FLAGS_CONTROL, RECORD_FLAGS_KNOWN,
    RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN, RESUME_PAYLOAD_LEN, RecordHeader,
    SEGMENT_HEADER_FIXED, SEGMENT_MAGIC, SegmentHeader, TAG_LEN, auth_aad, header_len_for_flags,
    parse_segment_file_name, record_crc, segment_file_name, validate_geometry,
    validate_segment_start,
};
pub use crate::reader::{PageInfo, RawRecord, RawRecords, SegmentInfo};
