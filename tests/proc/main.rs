//! The library's scenario tests that need a process of their own: they SIGKILL, fork or spawn
//! a child (a re-execution of this test binary by test name, `<module>::<test>`, or a KEK
//! command), or count the process's threads or memory. One module per scenario; shared helpers
//! are in `tests/support/`; every in-process scenario is in `tests/it/`. Each test here holds
//! `support::serial()` for its whole run, so none sees another's threads, children or inherited
//! descriptors (a child forked by one test holds the log locks it inherited until its exec).

#[path = "../support/mod.rs"]
mod support;

mod appends_and_buffered_commits_allocate_nothing;
mod follower_in_another_process;
mod forked_child_cannot_append;
mod forked_child_dropping_a_wal_never_deadlocks;
mod kek_command_against_a_kmip_server;
mod kek_command_provider;
mod log_files_are_private_whatever_the_umask;
mod replay_of_a_large_log_stops_cleanly_when_the_callback_fails;
mod sigkill_crash_cycles;
mod small_log_replays_without_a_second_thread;
mod soak_sixteen_threads;
