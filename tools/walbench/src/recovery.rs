//! The recovery study: writes one large log per workload and mode, then times replaying it,
//! decode only and with simulated redo per record, modes and apply kinds interleaved.

use std::path::Path;

use indicatif::ProgressBar;
use walcrypt::KeyRing;

use crate::args::Args;
use crate::report::{self, RecoveryRuns};
use crate::run::{self, BoxError};
use crate::workload::{EngineWork, Workload};
use crate::{fresh_dir, remove_dir, rotated};

/// Timed replays per recovery log (after one untimed warm-up replay).
pub const RECOVERY_REPEATS: usize = 3;

/// How a recovery replay treats each record.
#[derive(Debug, Clone, Copy)]
pub struct Apply {
    /// Simulated redo per record in microseconds (0: decode only).
    pub us: f64,
    /// The calibrated redo loop; `None` for decode only.
    pub work: Option<EngineWork>,
}

impl Apply {
    pub const DECODE_ONLY: Apply = Apply {
        us: 0.0,
        work: None,
    };
}

/// Writes the recovery log of `workload` in every mode and times its replays.
pub fn run(
    args: &Args,
    keys: &KeyRing,
    base: &Path,
    workload: Workload,
    applies: &[Apply],
    bar: &ProgressBar,
) -> Result<Vec<RecoveryRuns>, BoxError> {
    let bytes = args.recovery_mib << 20;
    let mut runs = Vec::new();
    for &mode in &args.modes {
        bar.set_message(format!("recovery: writing {} {}", workload.name(), mode));
        let dir = base.join(format!("recovery-{}-{}", workload.name(), mode));
        fresh_dir(&dir)?;
        let log_bytes = run::write_recovery_log(
            &dir,
            keys,
            workload,
            mode,
            bytes,
            args.compression(),
            args.segment_bytes(),
        )
        .map_err(|e| format!("recovery log {} {}: {e}", workload.name(), mode))?;
        // Warm-up: the first open may settle the torn tail; later replays see the same log.
        run::replay(&dir, keys, mode, None)?;
        bar.inc(2);
        for apply in applies {
            runs.push(RecoveryRuns {
                workload,
                mode,
                apply_us: apply.us,
                log_bytes,
                runs: Vec::new(),
            });
        }
    }
    // Every repeat replays each log both ways, back to back, with the order of modes and of
    // apply kinds rotating, so drifting machine load hits every combination alike.
    for rep in 0..RECOVERY_REPEATS {
        for (mi, mode) in rotated(&args.modes, rep).into_iter().enumerate() {
            for apply in rotated(applies, rep + mi) {
                bar.set_message(format!(
                    "recovery: replaying {} {} apply {}",
                    workload.name(),
                    mode,
                    report::apply_label(apply.us)
                ));
                let dir = base.join(format!("recovery-{}-{}", workload.name(), mode));
                let r = run::replay_for(&dir, keys, mode, apply.work, args.recovery_secs).map_err(
                    |e| {
                        format!(
                            "replay {} {} apply {}: {e}",
                            workload.name(),
                            mode,
                            report::apply_label(apply.us)
                        )
                    },
                )?;
                if let Some(slot) = runs
                    .iter_mut()
                    .find(|x| x.mode == mode && x.apply_us == apply.us)
                {
                    slot.runs.push(r);
                }
                bar.inc(1);
            }
        }
    }
    if !args.keep {
        for &mode in &args.modes {
            remove_dir(&base.join(format!("recovery-{}-{}", workload.name(), mode)));
        }
    }
    // Rows: decode only first, then with apply; modes in the order asked.
    runs.sort_by_key(|r| {
        let a = applies.iter().position(|x| x.us == r.apply_us).unwrap_or(0);
        let m = args.modes.iter().position(|x| *x == r.mode).unwrap_or(0);
        (a, m)
    });
    Ok(runs)
}
