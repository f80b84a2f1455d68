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
    AAD_FLAGS_AT, AAD_KEY_ID_AT, AAD_KIND_AT, AAD_LEN, AAD_LOG_ID_AT, AAD_LSN_AT, AAD_MODE_AT,
    AAD_STORED_LEN_AT, AAD_ZERO_AT, AUTHENTICATED_CONTROL_VERSION, FORMAT_VERSION, Geometry,
    HeaderError, KCV_ENTRY, KCV_ID_AT, KCV_VALUE_AT, LSN_BOUND_CRC_VERSION, LSN_LIMIT,
    MAX_PAGE_SIZE, MAX_PAYLOAD, MIN_PAGE_SIZE, OLDEST_READ_VERSION, PAGE_CRC_AT, PAGE_DURABLE_AT,
    PAGE_FLAG_ENCRYPTED, PAGE_FLAGS_AT, PAGE_HEADER_LEN, PAGE_IV_AT, PAGE_KEY_ID_AT, PAGE_LSN_AT,
    PAGE_MAGIC, PAGE_MAGIC_AT, PAGE_REM_LEN_AT, PAGE_RSV_AT, PageHeader, REC_CRC_AT, REC_FLAGS_AT,
    REC_IV_AT, REC_KEY_ID_AT, REC_KIND_AT, REC_LEN_AT, REC_NONCE_COUNTER_AT, REC_RSV_AT,
    RECORD_FLAG_AUTHENTICATED, RECORD_FLAG_COMPRESSED, RECORD_FLAG_ENCRYPTED, RECORD_FLAG_RESUME,
    RECORD_FLAG_SWITCH, RECORD_FLAGS_CONTROL, RECORD_FLAGS_KNOWN, RECORD_HEADER_ENCRYPTED,
    RECORD_HEADER_PLAIN, RESUME_PAYLOAD_LEN, RecordHeader, SEALED_SWITCH_FLAGS, SEG_LOG_ID_AT,
    SEG_MAGIC_AT, SEG_MODE_AT, SEG_NKEYS_AT, SEG_PAGE_SIZE_AT, SEG_RESERVED_AT, SEG_RSV_AT,
    SEG_SEGMENT_SIZE_AT, SEG_START_AT, SEG_VERSION_AT, SEGMENT_CRC_LEN, SEGMENT_HEADER_FIXED,
    SEGMENT_MAGIC, SegmentHeader, TAG_LEN, auth_aad, bind_crc_to_lsn, header_len_for_flags,
    kcv_entry_at, mode_code, mode_from_code, parse_segment_file_name, record_crc,
    record_crc_unbound, record_crc_whole, same_lsn_window, segment_file_name, validate_geometry,
    validate_segment_start,
};
pub use crate::reader::{PageInfo, RawRecord, RawRecords, SegmentInfo, check_page_header};
