//! Every test of wal-dump and wal-key, one module per scenario (one file each, named for what it
//! shows), compiled into one test binary: an edit to the tools or the library relinks one
//! executable, not one per scenario. Each scenario runs the built `wal-dump` and `wal-key` as
//! child processes on logs it makes in a temporary directory; none forks or re-executes this
//! binary or changes the process's environment, umask or working directory, so they run side by
//! side in one process. Shared helpers are in `tests/support/`.
//!
//! Run one scenario with `cargo test -p wal-dump --test it <module>::`, for example
//! `cargo test -p wal-dump --test it verify_flipped_bit::`.

#[path = "../support/mod.rs"]
mod support;

mod bad_inputs;
mod commands_the_docs_show_run_as_documented;
mod filters;
mod follow_sees_new_records;
mod follow_waits_for_the_log_to_be_created;
mod json_payload_round_trips;
mod lists_every_record;
mod mutated_logs_never_panic;
mod repair_keeps_a_copy_of_what_it_cuts;
mod require_mode_refuses_a_relabelled_log;
mod single_segment_file;
mod stats_in_every_mode;
mod verify_clean_log;
mod verify_clean_log_continued_after_a_format_upgrade;
mod verify_clean_log_with_a_switch_record_across_a_segment_boundary;
mod verify_damage_without_durable_hints;
mod verify_duplicate_iv;
mod verify_flipped_bit;
mod verify_log_over_recycled_segments;
mod verify_reports_authentication_failure;
mod verify_verdict_holds_with_a_closed_pipe_a_range_or_a_live_writer;
mod wal_key_manages_rings;
mod wal_key_manages_stores;
