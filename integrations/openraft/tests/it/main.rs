//! Every in-process test of the openraft log store, one module per scenario (one file each,
//! named for what it shows), compiled into one test binary: an edit to the store or the library
//! relinks one executable, not one per scenario. Shared helpers are in `tests/support/`; the
//! scenario that needs processes of its own (SIGKILLed children) is in `tests/proc/`.
//!
//! Run one scenario with `cargo test -p walcrypt-openraft --test it <module>::`, for example
//! `cargo test -p walcrypt-openraft --test it append_refuses_a_hole::`.

#[path = "../support/mod.rs"]
mod support;

mod append_refuses_a_hole;
mod flush_callback_waits_for_fdatasync;
mod open_refuses_foreign_logs_and_buffered_sync;
mod openraft_suite_in_every_mode;
mod random_operations_match_a_model;
mod reads_below_the_cache_come_from_the_log;
mod reads_below_the_cache_while_appending;
mod reads_from_the_log_leave_the_runtime_free;
mod reopen_replays_truncate_and_purge;
mod truncate_beside_a_reader_never_deadlocks;
mod vote_and_committed_durable_before_save_vote_returns;
