//! Group commit without a lock: a flusher becomes a round's leader by setting the leading bit
//! of `state` (compare-and-swap) and flushes everything in the buffer for everyone; the others
//! sleep until the round under way ends, then find their record flushed or lead the next
//! round.
//!
//! `state` is one word: bit 0 says a leader holds the lead, the bits above it count the rounds
//! that have released it. A round's number is that count plus one when its leader takes the
//! lead, so rounds are numbered 1, 2, 3, ... in the order they lead (modulo 2^31). A round
//! releases the lead by adding one to the count (which also clears its bit: one write) when it
//! ends, or earlier, when it hands the lead on (a `Durable` leader, before its fdatasync).
//!
//! **Where a follower sleeps.** A follower waits for one round by its number: the round under
//! way when its try to lead failed, or, in `Durable` mode, the round that announced the
//! fdatasync its record is below (`announced`). In `Buffered` mode rounds never overlap (the
//! lead is released only at a round's end), so the count in `state` says which rounds have
//! ended, and followers sleep on `state` itself. In `Durable` mode (`pipelined`) a round that
//! handed the lead on is still running its fdatasync while the next round leads: a single
//! word woken at every round's end would wake the next round's followers at the end of the
//! round before, each to sleep again (about two sleeps per follower, measured). There, round
//! ends are published on two words by the round's parity (`ends[n % 2]` holds the highest
//! round of that parity that has ended), and a follower of round n sleeps on `ends[n % 2]`:
//! the end of round n - 1 does not wake it.
//!
//! **No lost wake-up.** A follower only waits for a round that has taken the lead (so it
//! ends, also when its leader unwinds: [`RoundEnd`]'s drop), and sleeps only while that round
//! has not ended: the check compares the round's number with the word, not with a value read
//! earlier. It announces itself in the word's `sleepers` and then reads the word; the round's
//! end writes the word and then reads `sleepers`; a sequentially consistent fence between the
//! two steps on each side makes one of them see the other, and the sleep compares the word in
//! the kernel (a futex on Linux, through `atomic-wait`), so a change after the follower's last
//! read makes it return at once. `loom_model` checks this with every interleaving of two and
//! three flushers, in both modes.
//!
//! A follower waiting for round n compares numbers with wrapping arithmetic over 2^31: it
//! would mistake round n for one still to come only after 2^30 rounds had ended while it was
//! descheduled between reading n and its check.
//!
//! The words are written by every flusher, so they are shared-line wrappers (line_ledger.rs),
//! counted with the feature `line-ledger`; the futex wait and wake are not counted.

use crate::line_ledger::LineU32;
use sync::{Ordering, fence};

/// `state`'s bit saying a leader holds the lead.
const LEADING: u32 = 1;
/// One round released the lead, in `state`.
const ROUND: u32 = 2;
/// Round numbers are 31 bits (the count above `state`'s leading bit).
const NUMBERS: u32 = u32::MAX >> 1;
/// A round more than this far ahead of a number is taken as behind it (wrapping).
const HALF: u32 = 1 << 30;

/// True when `latest` (the highest round ended, by the word the caller read) is round `n` or
/// later.
fn reached(latest: u32, n: u32) -> bool {
    latest.wrapping_sub(n) & NUMBERS < HALF
}

/// The round under way when `state` has the leading bit set, or the next round to lead.
fn round_of(state: u32) -> u32 {
    (state / ROUND).wrapping_add(1) & NUMBERS
}

pub(super) struct GroupCommit {
    /// Bit 0: a leader holds the lead; above it: how many rounds have released it.
    state: LineU32,
    /// `Durable` mode: by parity, the highest round of that parity that has ended (round 0
    /// counts as ended, and "round -1" for the odd side).
    ends: [LineU32; 2],
    /// The followers asleep: on `state` (index 0) in `Buffered` mode, on `ends[p]` (index p)
    /// in `Durable` mode.
    sleepers: [LineU32; 2],
    /// `Durable` mode: the number of the last round that announced a pending fdatasync;
    /// stored before the announcement, so that a follower that has seen an announcement and
    /// then reads this gets that round or a later one.
    announced: LineU32,
    /// Whether a round may hand the lead on before it ends (`Durable` mode).
    pipelined: bool,
    /// The model's futex: one per word (`state`, `ends[0]`, `ends[1]`).
    #[cfg(loom)]
    parks: [sync::Park; 3],
}

impl GroupCommit {
    /// Group commit for a log whose rounds hand the lead on before they end (`pipelined`:
    /// `Durable` mode) or not (`Buffered`).
    pub(super) fn new(pipelined: bool) -> GroupCommit {
        GroupCommit {
            state: LineU32::named("group.state", 0),
            ends: [
                LineU32::named("group.ends", 0),
                LineU32::named("group.ends", NUMBERS),
            ],
            sleepers: [
                LineU32::named("group.sleepers", 0),
                LineU32::named("group.sleepers", 0),
            ],
            announced: LineU32::named("group.announced", 0),
            pipelined,
            #[cfg(loom)]
            parks: Default::default(),
        }
    }
}

/// Ends a group-commit round when dropped (also when the leader unwinds): wakes the followers
/// waiting for it. A leader may hand the lead on before that ([`RoundEnd::hand_on`]): another
/// flusher may then lead the next round while this one finishes (a `Durable` leader's
/// fdatasync), and the end still wakes this round's followers.
pub(super) struct RoundEnd<'a> {
    group: &'a GroupCommit,
    /// This round's number.
    round: u32,
    handed_on: bool,
}

impl RoundEnd<'_> {
    /// Announces a pending fdatasync with `announce` (as this round's: followers whose record
    /// it covers wait for this round's end) and lets another flusher lead now; this round
    /// still ends, and wakes its followers, when dropped. `Durable` mode only.
    pub(super) fn hand_on(&mut self, announce: impl FnOnce()) {
        debug_assert!(
            self.group.pipelined,
            "a round hands the lead on in Durable mode only"
        );
        self.group.announced.store(self.round, Ordering::SeqCst);
        announce();
        if !self.handed_on {
            self.handed_on = true;
            // The bit is this leader's: nobody else clears it.
            self.group
                .state
                .fetch_add(ROUND - LEADING, Ordering::SeqCst);
        }
    }
}

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        let group = self.group;
        if !self.handed_on {
            // This leader's bit cleared and the count carried on, in one add.
            group.state.fetch_add(ROUND - LEADING, Ordering::SeqCst);
        }
        let word = match group.pipelined {
            false => 0,
            true => {
                let side = (self.round & 1) as usize;
                // Raised, never lowered: a round ending after a later one of its parity (rounds
                // end in the order they take the sync turn, but nothing here relies on it).
                let ends = &group.ends[side];
                let mut seen = ends.load(Ordering::SeqCst);
                while !reached(seen, self.round) {
                    match ends.compare_exchange(
                        seen,
                        self.round,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => break,
                        Err(now) => seen = now,
                    }
                }
                side
            }
        };
        fence(Ordering::SeqCst);
        if group.sleepers[word].load(Ordering::SeqCst) > 0 {
            group.wake_all(word);
        }
    }
}

impl GroupCommit {
    /// Makes the caller the leader of a round, if no round holds the lead; otherwise returns
    /// the number of the round that does, for [`GroupCommit::wait_for`].
    pub(super) fn lead(&self) -> Result<RoundEnd<'_>, u32> {
        let mut seen = self.state.load(Ordering::SeqCst);
        loop {
            if seen & LEADING != 0 {
                return Err(round_of(seen));
            }
            match self.state.compare_exchange(
                seen,
                seen | LEADING,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    return Ok(RoundEnd {
                        group: self,
                        round: round_of(seen),
                        handed_on: false,
                    });
                }
                // Another flusher took the lead meanwhile, or a round released it.
                Err(now) => seen = now,
            }
        }
    }

    /// The last round that announced a pending fdatasync (`Durable` mode): after reading the
    /// announcement, the round to wait for.
    pub(super) fn announced(&self) -> u32 {
        self.announced.load(Ordering::SeqCst)
    }

    /// Sleeps until round `round` (one that has taken the lead) has ended; returns at once if
    /// it has.
    pub(super) fn wait_for(&self, round: u32) {
        let word = self.word_of(round);
        if self.ended(word, round) {
            return;
        }
        self.sleepers[word].fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        loop {
            let seen = self.word(word).load(Ordering::SeqCst);
            if self.ended_by(seen, round) {
                break;
            }
            self.sleep(word, seen);
        }
        self.sleepers[word].fetch_sub(1, Ordering::SeqCst);
    }

    /// Which word round `round`'s end is published on: 0 for `state`, or the parity's side of
    /// `ends` (as an index of `sleepers`).
    fn word_of(&self, round: u32) -> usize {
        match self.pipelined {
            false => 0,
            true => (round & 1) as usize,
        }
    }

    fn word(&self, word: usize) -> &LineU32 {
        match self.pipelined {
            false => &self.state,
            true => &self.ends[word],
        }
    }

    fn ended(&self, word: usize, round: u32) -> bool {
        self.ended_by(self.word(word).load(Ordering::SeqCst), round)
    }

    /// Whether `seen` (a value of the word round `round` ends on) says that round has ended.
    fn ended_by(&self, seen: u32, round: u32) -> bool {
        match self.pipelined {
            // Rounds do not overlap: every round that released the lead has ended.
            false => reached(seen / ROUND, round),
            true => reached(seen, round),
        }
    }

    #[cfg(not(loom))]
    fn sleep(&self, word: usize, seen: u32) {
        atomic_wait::wait(self.word(word).raw(), seen);
    }

    #[cfg(not(loom))]
    fn wake_all(&self, word: usize) {
        atomic_wait::wake_all(self.word(word).raw());
    }

    #[cfg(loom)]
    fn sleep(&self, word: usize, seen: u32) {
        self.parks[self.park_of(word)].sleep(self.word(word).raw(), seen);
    }

    #[cfg(loom)]
    fn wake_all(&self, word: usize) {
        self.parks[self.park_of(word)].wake_all();
    }

    #[cfg(loom)]
    fn park_of(&self, word: usize) -> usize {
        match self.pipelined {
            false => 0,
            true => 1 + word,
        }
    }
}

#[cfg(not(loom))]
mod sync {
    pub(super) use std::sync::atomic::{Ordering, fence};
}

#[cfg(loom)]
mod sync {
    pub(super) use loom::sync::atomic::{AtomicU32, Ordering, fence};

    /// The kernel's wait-on-address, as the model sees it: the comparison with the expected
    /// value and the sleep are one step under a lock the wake also takes. One per word: a
    /// wake on one word does not wake a sleeper on another.
    #[derive(Default)]
    pub(super) struct Park {
        lock: loom::sync::Mutex<()>,
        woken: loom::sync::Condvar,
    }

    impl Park {
        pub(super) fn sleep(&self, value: &AtomicU32, expected: u32) {
            let guard = self.lock.lock().expect("loom model: lock poisoned");
            if value.load(Ordering::SeqCst) == expected {
                drop(self.woken.wait(guard).expect("loom model: lock poisoned"));
            }
        }

        pub(super) fn wake_all(&self) {
            let _guard = self.lock.lock().expect("loom model: lock poisoned");
            self.woken.notify_all();
        }
    }
}

/// Group commit under the model checker: `RUSTFLAGS="--cfg loom" cargo test --release --lib
/// loom_model` (`.ci/run` runs it). Flushers each need their own record flushed; a leader
/// flushes everything appended. Loom explores every interleaving: a lost wake-up leaves a
/// follower asleep forever (a deadlock loom reports), and every flusher must return with its
/// record flushed.
#[cfg(all(test, loom))]
mod loom_model {
    use super::GroupCommit;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU32, Ordering};

    struct Log {
        group: GroupCommit,
        /// How many records are flushed (records 1..=flushed).
        flushed: AtomicU32,
    }

    /// A `Buffered` log's flush (writer/flush.rs): lead and flush, or wait for the round that
    /// holds the lead.
    fn flush(log: &Log, record: u32, appended: u32) {
        loop {
            if log.flushed.load(Ordering::SeqCst) >= record {
                return;
            }
            match log.group.lead() {
                Ok(round) => {
                    log.flushed.fetch_max(appended, Ordering::SeqCst);
                    drop(round);
                    return;
                }
                Err(under_way) => log.group.wait_for(under_way),
            }
        }
    }

    /// A `Durable` log's flush: the leader writes, takes the sync turn, announces its target
    /// as pending, hands the lead on and fdatasyncs; a flusher whose record lies below the
    /// pending target waits for the round that announced it instead of leading
    /// (writer/flush.rs). A leader whose records a round before it synced already
    /// (`covered`) ends its round without handing the lead on.
    struct Pipelined {
        group: GroupCommit,
        /// The highest target written and waiting for its fdatasync.
        pending: AtomicU32,
        /// The sync turn.
        turn: loom::sync::Mutex<()>,
        flushed: AtomicU32,
    }

    impl Pipelined {
        fn new() -> Pipelined {
            Pipelined {
                group: GroupCommit::new(true),
                pending: AtomicU32::new(0),
                turn: loom::sync::Mutex::new(()),
                flushed: AtomicU32::new(0),
            }
        }
    }

    fn flush_pipelined(log: &Pipelined, record: u32, appended: u32) {
        loop {
            if log.flushed.load(Ordering::SeqCst) >= record {
                return;
            }
            if log.pending.load(Ordering::SeqCst) >= record {
                log.group.wait_for(log.group.announced());
                continue;
            }
            match log.group.lead() {
                Ok(mut round) => {
                    // The write-out, then the turn; holding it, the announcement and the
                    // hand-on, then the fdatasync.
                    let turn = log.turn.lock().expect("loom model: lock poisoned");
                    if log.flushed.load(Ordering::SeqCst) < appended {
                        round.hand_on(|| {
                            log.pending.fetch_max(appended, Ordering::SeqCst);
                        });
                    }
                    log.flushed.fetch_max(appended, Ordering::SeqCst);
                    drop(turn);
                    drop(round);
                    return;
                }
                Err(under_way) => log.group.wait_for(under_way),
            }
        }
    }

    #[test]
    fn every_flusher_returns_with_its_record_flushed_when_leaders_hand_on_before_syncing() {
        loom::model(|| {
            let log = Arc::new(Pipelined::new());
            let other = {
                let log = log.clone();
                loom::thread::spawn(move || flush_pipelined(&log, 1, 1))
            };
            flush_pipelined(&log, 2, 2);
            other.join().expect("flusher");
            assert_eq!(log.flushed.load(Ordering::SeqCst), 2);
        });
    }

    /// Three flushers: two rounds may overlap (one syncing, one leading) while a third
    /// flusher waits for either, on the word of its round's parity.
    #[test]
    fn three_flushers_return_with_their_records_flushed_when_rounds_overlap() {
        let mut model = loom::model::Builder::new();
        // Every interleaving of three threads takes hours; four preemptions cover the
        // overlaps: a round syncing, the next leading, a follower between them.
        model.preemption_bound = Some(4);
        model.check(|| {
            let log = Arc::new(Pipelined::new());
            let others: Vec<_> = [1, 2]
                .into_iter()
                .map(|record| {
                    let log = log.clone();
                    loom::thread::spawn(move || flush_pipelined(&log, record, record))
                })
                .collect();
            flush_pipelined(&log, 3, 3);
            for other in others {
                other.join().expect("flusher");
            }
            assert_eq!(log.flushed.load(Ordering::SeqCst), 3);
        });
    }

    #[test]
    fn every_flusher_returns_with_its_record_flushed() {
        loom::model(|| {
            let log = Arc::new(Log {
                group: GroupCommit::new(false),
                flushed: AtomicU32::new(0),
            });
            let other = {
                let log = log.clone();
                loom::thread::spawn(move || flush(&log, 1, 2))
            };
            flush(&log, 2, 2);
            other.join().expect("flusher");
            assert_eq!(log.flushed.load(Ordering::SeqCst), 2);
        });
    }
}
