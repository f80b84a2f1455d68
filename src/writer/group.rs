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
//! **Where a follower sleeps.** A follower waits for one round by its number: the round that
//! held the lead when its try to lead failed, or, in `Durable` mode, the round that announced
//! the fdatasync its record is below (`announced`).
//! - In `Buffered` mode rounds never overlap (the lead is released only at a round's end), so
//!   the count in `state` says which rounds have ended, and followers sleep on `state`.
//! - In `Durable` mode (`pipelined`) a round that handed the lead on still runs its fdatasync
//!   while the next round leads. A single word woken at every round's end woke the next
//!   round's followers at the end of the round before, each to sleep again (about two sleeps
//!   per follower, measured). So a round's events are published on one of two words by its
//!   parity: `events[n % 2]` holds the latest event of a round of that parity, `2n` when round
//!   n handed the lead on and `2n + 1` when it ended, and a follower of round n sleeps on
//!   `events[n % 2]`, which the end of round n - 1 does not touch.
//! - A `Durable` follower of a round that still held the lead when it looked does not know yet
//!   whether that round's fdatasync will cover its record: the leader fixes its target only
//!   once it holds the sync turn, and leaves out records behind an insertion still in
//!   progress. The follower publishes what it needs in `wanted` (the highest such position)
//!   and sleeps; the leader, handing the lead on, wakes its followers only when `wanted` is
//!   beyond its target, and a follower its target covers sleeps on until the round ends while
//!   the others lead the next round at once (before, they slept through a whole fdatasync).
//!
//! **No lost wake-up.** A follower only waits for a round that has taken the lead (so it
//! ends, also when its leader unwinds: [`RoundEnd`]'s drop), and sleeps only while that round
//! has not ended (or not handed on, for the follower that may have to lead next): the check
//! compares the round's number with the word, not with a value read earlier. It announces
//! itself (`sleepers`, and `wanted`) and then reads the word; the leader writes the word and
//! then reads `sleepers` (and `wanted`); a sequentially consistent fence between the two steps
//! on each side makes one of them see the other, and the sleep compares the word in the kernel
//! (a futex on Linux, through `atomic-wait`), so a change after the follower's last read makes
//! it return at once. `loom_model` checks this with every interleaving of two flushers and
//! three (to a bound of preemptions), in both modes.
//!
//! A follower waiting for round n compares numbers with wrapping arithmetic: it would mistake
//! round n for one still to come only after 2^30 rounds had ended while it was descheduled
//! between reading n and its check.
//!
//! The words are written by every flusher, so they are shared-line wrappers (line_ledger.rs),
//! counted with the feature `line-ledger`; the futex wait and wake are not counted.

use crate::line_ledger::{LineU32, LineU64};
use sync::{Ordering, fence};

/// `state`'s bit saying a leader holds the lead.
const LEADING: u32 = 1;
/// One round released the lead, in `state`.
const ROUND: u32 = 2;
/// Round numbers are 31 bits (the count above `state`'s leading bit).
const NUMBERS: u32 = u32::MAX >> 1;

/// True when `latest` (a round number, or an event) is `n` or later: wrapping, over 31 bits
/// (round numbers) or 32 (events, two per round).
fn reached(latest: u32, n: u32, bits: u32) -> bool {
    let mask = u32::MAX >> (32 - bits);
    latest.wrapping_sub(n) & mask < (1 << (bits - 1))
}

/// The round under way when `state` has the leading bit set, or the next round to lead.
fn round_of(state: u32) -> u32 {
    (state / ROUND).wrapping_add(1) & NUMBERS
}

/// Round `n` handed the lead on, as an event of `events`.
fn handed_on(n: u32) -> u32 {
    n.wrapping_mul(2)
}

/// Round `n` ended, as an event of `events`.
fn ended(n: u32) -> u32 {
    n.wrapping_mul(2).wrapping_add(1)
}

pub(super) struct GroupCommit {
    /// Bit 0: a leader holds the lead; above it: how many rounds have released it.
    state: LineU32,
    /// `Durable` mode: by parity, the latest event of a round of that parity
    /// ([`handed_on`], [`ended`]); round 0 and "round -1" count as ended.
    events: [LineU32; 2],
    /// The followers asleep: on `state` (index 0) in `Buffered` mode, on `events[p]` (index
    /// p) in `Durable` mode.
    sleepers: [LineU32; 2],
    /// `Durable` mode: the number of the last round that announced a pending fdatasync;
    /// stored before the announcement, so that a follower that has seen an announcement and
    /// then reads this gets that round or a later one.
    announced: LineU32,
    /// `Durable` mode: the highest position a follower of a round that had not handed the
    /// lead on needs flushed (raised, never lowered).
    wanted: LineU64,
    /// Whether a round may hand the lead on before it ends (`Durable` mode).
    pipelined: bool,
    /// The model's futex: one per word (`state`, `events[0]`, `events[1]`).
    #[cfg(loom)]
    parks: [sync::Park; 3],
}

impl GroupCommit {
    /// Group commit for a log whose rounds hand the lead on before they end (`pipelined`:
    /// `Durable` mode) or not (`Buffered`).
    pub(super) fn new(pipelined: bool) -> GroupCommit {
        GroupCommit {
            state: LineU32::named("group.state", 0),
            events: [
                LineU32::named("group.events", ended(0)),
                LineU32::named("group.events", ended(NUMBERS)),
            ],
            sleepers: [
                LineU32::named("group.sleepers", 0),
                LineU32::named("group.sleepers", 0),
            ],
            announced: LineU32::named("group.announced", 0),
            wanted: LineU64::named("group.wanted", 0),
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
    ended: bool,
}

impl RoundEnd<'_> {
    /// Announces a pending fdatasync through `target` with `announce` (as this round's:
    /// followers whose record it covers wait for this round's end) and lets another flusher
    /// lead now; wakes this round's followers if one of them needs more than `target`. This
    /// round still ends, and wakes its followers, at [`RoundEnd::end`] or when dropped.
    /// `Durable` mode only.
    pub(super) fn hand_on(&mut self, target: u64, announce: impl FnOnce()) {
        debug_assert!(
            self.group.pipelined,
            "a round hands the lead on in Durable mode only"
        );
        if self.handed_on || self.ended {
            return;
        }
        let group = self.group;
        group.announced.store(self.round, Ordering::SeqCst);
        announce();
        self.handed_on = true;
        // The bit is this leader's: nobody else clears it.
        group.state.fetch_add(ROUND - LEADING, Ordering::SeqCst);
        let side = self.publish(handed_on(self.round));
        fence(Ordering::SeqCst);
        if group.wanted.load(Ordering::SeqCst) > target
            && group.sleepers[side].load(Ordering::SeqCst) > 0
        {
            group.wake_all(side);
        }
    }

    /// Raises this round's parity's `events` word to `event`; returns the parity.
    fn publish(&self, event: u32) -> usize {
        let side = (self.round & 1) as usize;
        // Raised, never lowered: a round's events come in order, and a round ending after a
        // later one of its parity does not move the word back (rounds end in the order they
        // take the sync turn, but nothing here relies on it).
        let word = &self.group.events[side];
        let mut seen = word.load(Ordering::SeqCst);
        while !reached(seen, event, 32) {
            match word.compare_exchange(seen, event, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        side
    }

    /// Sleeps until the round before this one has ended (`Durable` mode; at once if it has):
    /// a leader about to wait for the sync turn, which that round holds across its
    /// fdatasync, waits here instead. That round's end wakes this leader with its own
    /// followers, in the one call it makes anyway, where waiting on the turn's mutex cost a
    /// sleep and a wake of their own (measured: about 0.26 futex calls per commit at 8
    /// threads). The turn is then taken uncontended unless `sync`, `close` or the segment
    /// switch holds it.
    pub(super) fn wait_for_previous(&self) {
        if self.group.pipelined {
            self.group.wait_for(self.round.wrapping_sub(1) & NUMBERS);
        }
    }

    /// Ends the round now: wakes its followers (and releases the lead, unless it was handed
    /// on). A leader ends its round as soon as its fdatasync's result is published, before
    /// the work that follows it (the hint refresh). Dropping the round ends it otherwise.
    pub(super) fn end(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let group = self.group;
        if !self.handed_on {
            // This leader's bit cleared and the count carried on, in one add.
            group.state.fetch_add(ROUND - LEADING, Ordering::SeqCst);
        }
        let word = match group.pipelined {
            false => 0,
            true => self.publish(ended(self.round)),
        };
        fence(Ordering::SeqCst);
        if group.sleepers[word].load(Ordering::SeqCst) > 0 {
            group.wake_all(word);
        }
    }
}

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

impl GroupCommit {
    /// Makes the caller the leader of a round, if no round holds the lead; otherwise returns
    /// the number of the round that does, for [`GroupCommit::follow`].
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
                        ended: false,
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
        self.sleep_until(round, None::<(u64, fn() -> bool)>);
    }

    /// Follows round `round`, which held the lead when the caller's try to lead failed:
    /// sleeps until it has ended, or, in `Durable` mode, until it has handed the lead on
    /// without covering `want` (a position the caller needs flushed): `covered` says whether
    /// the fdatasync announced covers it, once the round has handed on.
    pub(super) fn follow(&self, round: u32, want: u64, covered: impl Fn() -> bool) {
        self.sleep_until(round, Some((want, covered)));
    }

    fn sleep_until(&self, round: u32, follower: Option<(u64, impl Fn() -> bool)>) {
        let side = match self.pipelined {
            false => 0,
            true => (round & 1) as usize,
        };
        let follower = follower.filter(|_| self.pipelined);
        // Until the round hands on or ends, nothing is to do: no need to announce anything
        // when it has already.
        if self.done(
            side,
            round,
            follower.as_ref(),
            self.word(side).load(Ordering::SeqCst),
        ) {
            return;
        }
        if let Some((want, _)) = &follower {
            self.wanted.fetch_max(*want, Ordering::SeqCst);
        }
        self.sleepers[side].fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        loop {
            let seen = self.word(side).load(Ordering::SeqCst);
            if self.done(side, round, follower.as_ref(), seen) {
                break;
            }
            self.sleep(side, seen);
        }
        self.sleepers[side].fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether a sleeper on round `round`'s word, which reads `seen`, may return: the round
    /// ended, or (a follower) it handed on without covering what the follower needs.
    fn done(
        &self,
        side: usize,
        round: u32,
        follower: Option<&(u64, impl Fn() -> bool)>,
        seen: u32,
    ) -> bool {
        if !self.pipelined {
            // Rounds do not overlap: every round that released the lead has ended.
            debug_assert_eq!(side, 0);
            return reached(seen / ROUND, round, 31);
        }
        if reached(seen, ended(round), 32) {
            return true;
        }
        match follower {
            Some((_, covered)) => reached(seen, handed_on(round), 32) && !covered(),
            None => false,
        }
    }

    fn word(&self, side: usize) -> &LineU32 {
        match self.pipelined {
            false => &self.state,
            true => &self.events[side],
        }
    }

    #[cfg(not(loom))]
    fn sleep(&self, side: usize, seen: u32) {
        atomic_wait::wait(self.word(side).raw(), seen);
    }

    #[cfg(not(loom))]
    fn wake_all(&self, side: usize) {
        atomic_wait::wake_all(self.word(side).raw());
    }

    #[cfg(loom)]
    fn sleep(&self, side: usize, seen: u32) {
        self.parks[self.park_of(side)].sleep(self.word(side).raw(), seen);
    }

    #[cfg(loom)]
    fn wake_all(&self, side: usize) {
        self.parks[self.park_of(side)].wake_all();
    }

    #[cfg(loom)]
    fn park_of(&self, side: usize) -> usize {
        match self.pipelined {
            false => 0,
            true => 1 + side,
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
                Err(under_way) => log.group.follow(under_way, u64::from(record), || false),
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
                    // The write-out, then the round before this one's end and the turn;
                    // holding it, the announcement and the hand-on, then the fdatasync, the
                    // turn's release and the round's end.
                    round.wait_for_previous();
                    let turn = log.turn.lock().expect("loom model: lock poisoned");
                    if log.flushed.load(Ordering::SeqCst) < appended {
                        round.hand_on(u64::from(appended), || {
                            log.pending.fetch_max(appended, Ordering::SeqCst);
                        });
                    }
                    log.flushed.fetch_max(appended, Ordering::SeqCst);
                    drop(turn);
                    round.end();
                    return;
                }
                Err(under_way) => log.group.follow(under_way, u64::from(record), || {
                    log.pending.load(Ordering::SeqCst) >= record
                }),
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

    /// A flusher whose record the round under way will not cover (it needs record 2, the
    /// round syncs record 1) leads the next round while that round's fdatasync still runs:
    /// the fdatasync here lasts until the next round has a leader. Without the wake when the
    /// round hands the lead on, that flusher would sleep until the round's end, which never
    /// comes (a deadlock loom reports).
    #[test]
    fn a_flusher_the_announced_sync_does_not_cover_leads_while_it_runs() {
        loom::model(|| {
            let log = Arc::new(Pipelined::new());
            // Whether a round after the first has a leader, and the wait for it.
            let next_led = Arc::new((loom::sync::Mutex::new(false), loom::sync::Condvar::new()));
            let flush = |log: &Pipelined,
                         next_led: &(loom::sync::Mutex<bool>, loom::sync::Condvar),
                         record: u32| {
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
                            if record == 2 {
                                *next_led.0.lock().expect("loom model: lock poisoned") = true;
                                next_led.1.notify_all();
                            }
                            round.wait_for_previous();
                            round.hand_on(u64::from(record), || {
                                log.pending.fetch_max(record, Ordering::SeqCst);
                            });
                            if record == 1 {
                                // The fdatasync: until the next round has a leader.
                                let mut led = next_led.0.lock().expect("loom model: lock poisoned");
                                while !*led {
                                    led = next_led.1.wait(led).expect("loom model: lock poisoned");
                                }
                            }
                            log.flushed.fetch_max(record, Ordering::SeqCst);
                            round.end();
                            return;
                        }
                        Err(under_way) => log.group.follow(under_way, u64::from(record), || {
                            log.pending.load(Ordering::SeqCst) >= record
                        }),
                    }
                }
            };
            let other = {
                let (log, next_led) = (log.clone(), next_led.clone());
                loom::thread::spawn(move || flush(&log, &next_led, 2))
            };
            flush(&log, &next_led, 1);
            other.join().expect("flusher");
            assert_eq!(log.flushed.load(Ordering::SeqCst), 2);
        });
    }

    /// Three flushers: two rounds may overlap (one syncing, one leading) while a third
    /// flusher waits for either, on the word of its round's parity.
    #[test]
    fn three_flushers_return_with_their_records_flushed_when_rounds_overlap() {
        let mut model = loom::model::Builder::new();
        // Every interleaving of three threads takes hours; three preemptions cover the
        // overlaps: a round syncing, the next leading, a follower between them.
        model.preemption_bound = Some(3);
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
