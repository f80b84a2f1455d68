//! The shared-line ledger of a cell: the writes the workers made to the writer's shared lines
//! and the line transfers among them, from walcrypt's counting wrappers (feature
//! `line-ledger`, which walbench's feature of the same name turns on). Without the feature
//! nothing is counted and the tables print `—`.
//!
//! Each worker takes its own thread's counts when its loop ends (after resetting them when
//! the cell starts), so the counts are the workers' alone: the library's background threads
//! (the segment preparer) and walbench's main thread are not in them.

/// Writes and transfers of one line label (a wrapper's name or a mutex's lock-order level).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub label: &'static str,
    pub writes: u64,
    pub transfers: u64,
}

/// The workers' counts over one cell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    pub writes: u64,
    pub transfers: u64,
    /// Per label, by writes, most first.
    pub sites: Vec<Site>,
}

/// Lines of one thread's own: an appender's insertion lane (writer/insertions.rs: its owner
/// lock and its start, each written twice per record, and its waiter count and gate, written
/// only when a thread waits on the lane, on a cache line of the lane's own) and the statistics shard the thread adds to (writer/stats.rs). Another thread
/// writes them only when it waits on the lane, claims it while all others are busy, or shares
/// the shard (more threads than shards; the transfers show how often), so they are reported
/// apart and not charged to the budget.
pub const OWN_LINES: &[&str] = &["lane", "lane.start", "lane.waiters", "lane gate", "stats"];

/// Lines every appender writes, once or twice per record: the insert lock (the exclusive
/// paths), the insert position, the IV source's sequence (once per 64 IVs), a page slot's
/// page word (its claim, once per page), the slot's lock (the page's `rem_len`, once per
/// page; a write-out also takes it once per page it images, which is counted here too) and
/// the words of the page a record shares with its neighbours (`slot.edge_word`: the
/// compare-and-swaps that merge a record's first and last bytes into them). Every label in neither list is charged to the commit path (group
/// commit, the write lock, the in-flight lock, `written_to`, `flushed_to`, `synced_to`, the
/// sync turn), whose writes are compared with the write-outs.
pub const APPEND_LINES: &[&str] = &[
    "insert",
    "insert_end",
    "iv.next",
    "slot",
    "slot.page",
    "slot.edge_word",
];

impl Lines {
    /// Adds another thread's (or round's) counts.
    pub fn add(&mut self, other: &Lines) {
        self.writes += other.writes;
        self.transfers += other.transfers;
        for site in &other.sites {
            match self.sites.iter_mut().find(|s| s.label == site.label) {
                Some(mine) => {
                    mine.writes += site.writes;
                    mine.transfers += site.transfers;
                }
                None => self.sites.push(site.clone()),
            }
        }
        self.sites
            .sort_by(|a, b| b.writes.cmp(&a.writes).then(a.label.cmp(b.label)));
    }

    fn writes_to(&self, labels: &[&str]) -> u64 {
        self.sites
            .iter()
            .filter(|s| labels.contains(&s.label))
            .map(|s| s.writes)
            .sum()
    }

    /// Writes to lines of the writing thread's own ([`OWN_LINES`]).
    pub fn own_writes(&self) -> u64 {
        self.writes_to(OWN_LINES)
    }

    /// Writes to the lines every appender writes ([`APPEND_LINES`]).
    pub fn append_writes(&self) -> u64 {
        self.writes_to(APPEND_LINES)
    }

    /// Writes to every other line: the commit path's.
    pub fn commit_writes(&self) -> u64 {
        self.writes - self.own_writes() - self.append_writes()
    }
}

/// Whether this build counts (walbench's feature `line-ledger`).
pub const COUNTING: bool = cfg!(feature = "line-ledger");

/// The calling thread's counts since its last take, reset; `None` without the feature.
#[cfg(feature = "line-ledger")]
pub fn take() -> Option<Lines> {
    let mut lines = Lines::default();
    let sites = walcrypt::line_ledger::take_thread_sites()
        .into_iter()
        .map(|(label, counts)| Site {
            label,
            writes: counts.writes,
            transfers: counts.transfers,
        })
        .collect::<Vec<_>>();
    for site in sites {
        lines.add(&Lines {
            writes: site.writes,
            transfers: site.transfers,
            sites: vec![site],
        });
    }
    Some(lines)
}

/// The calling thread's counts since its last take, reset; `None` without the feature.
#[cfg(not(feature = "line-ledger"))]
pub fn take() -> Option<Lines> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(label: &'static str, writes: u64, transfers: u64) -> Site {
        Site {
            label,
            writes,
            transfers,
        }
    }

    #[test]
    fn threads_counts_add_up_per_label_and_split_into_own_append_and_commit_lines() {
        let mut total = Lines::default();
        total.add(&Lines {
            writes: 12,
            transfers: 3,
            sites: vec![site("insert", 10, 3), site("write", 2, 0)],
        });
        total.add(&Lines {
            writes: 13,
            transfers: 4,
            sites: vec![site("insert", 10, 2), site("group.leading", 3, 2)],
        });
        total.add(&Lines {
            writes: 4,
            transfers: 0,
            sites: vec![site("lane.start", 4, 0)],
        });
        assert_eq!((total.writes, total.transfers), (29, 7));
        assert_eq!(total.sites[0], site("insert", 20, 5));
        assert_eq!(total.own_writes(), 4);
        assert_eq!(total.append_writes(), 20);
        assert_eq!(total.commit_writes(), 5);
    }
}
