//! SVG charts (plotters): throughput and model vs threads per workload, recovery bars, and
//! the peer run's commits vs threads; [`draw_study`] and [`draw_peers`] assemble them from
//! the summaries.

use std::path::Path;

use plotters::prelude::*;
use walcrypt::Mode;

use crate::args::Args;
use crate::peers::{self, PeerSummary, System};
use crate::run::BoxError;
use crate::{model, report};

fn mode_color(mode: Mode) -> RGBColor {
    match mode {
        Mode::Plaintext => RGBColor(40, 40, 40),
        Mode::PerRecord => RGBColor(31, 119, 180),
        Mode::PageLevel => RGBColor(214, 39, 40),
        Mode::PerRecordGcm => RGBColor(44, 160, 44),
        // A mode added later: grey until it gets a colour of its own.
        _ => RGBColor(127, 127, 127),
    }
}

/// What names and colours a line: a walcrypt mode, or a system of the peer run.
pub trait SeriesKey {
    fn label(&self) -> String;
    fn color(&self) -> RGBColor;
}

impl SeriesKey for Mode {
    fn label(&self) -> String {
        self.name().to_string()
    }
    fn color(&self) -> RGBColor {
        mode_color(*self)
    }
}

impl SeriesKey for System {
    fn label(&self) -> String {
        self.name()
    }
    fn color(&self) -> RGBColor {
        match self {
            System::Walcrypt(mode) => mode_color(*mode),
            System::Okaywal => RGBColor(44, 160, 44),
            System::RaftEngine => RGBColor(255, 127, 14),
        }
    }
}

/// One panel: a title and one (key, points) line per mode or system.
pub struct Panel<K = Mode> {
    pub title: String,
    pub lines: Vec<(K, Vec<(f64, f64)>)>,
}

/// Panels side by side, x = threads (log 2 scale), y from zero.
pub fn line_panels<K: SeriesKey>(
    path: &Path,
    title: &str,
    y_label: &str,
    panels: &[Panel<K>],
) -> Result<(), BoxError> {
    let width = 420 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 18))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        let xs = panel.lines.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
        let x_max = xs.fold(2.0f64, f64::max);
        let y_max = panel
            .lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .filter(|y| y.is_finite())
            .fold(1.0f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(62)
            .build_cartesian_2d((1f64..x_max).log_scale(), 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc(y_label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| short(*y))
            .draw()?;
        for (key, points) in &panel.lines {
            let color = key.color();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(key.label())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// One bar panel: a title and one (group name, (mode, value) bars) entry per group.
pub struct BarPanel {
    pub title: String,
    pub groups: Vec<(String, Vec<(Mode, f64)>)>,
}

/// Bar panels side by side; in each, one group per workload and one bar per mode. Each panel
/// has its own y scale from zero.
pub fn bar_panels(
    path: &Path,
    title: &str,
    y_label: &str,
    panels: &[BarPanel],
) -> Result<(), BoxError> {
    let width = 560 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 18))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        let groups = &panel.groups;
        let y_max = groups
            .iter()
            .flat_map(|(_, b)| b.iter().map(|x| x.1))
            .filter(|y| y.is_finite())
            .fold(1.0f64, f64::max)
            * 1.15;
        let n = groups.len().max(1) as f64;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(62)
            .build_cartesian_2d(0f64..n, 0f64..y_max)?;
        let names: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(groups.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.01 {
                    names.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(y_label)
            .y_label_formatter(&|y| short(*y))
            .draw()?;
        for mode in Mode::ALL {
            let color = mode_color(mode);
            let slot = Mode::ALL.iter().position(|m| *m == mode).unwrap_or(0) as f64;
            let rects: Vec<_> = groups
                .iter()
                .enumerate()
                .filter_map(|(i, (_, bars))| {
                    let v = bars.iter().find(|b| b.0 == mode)?.1;
                    let x0 = i as f64 + 0.1 + slot * 0.27;
                    Some(Rectangle::new([(x0, 0.0), (x0 + 0.25, v)], color.filled()))
                })
                .collect();
            if rects.is_empty() {
                continue;
            }
            chart
                .draw_series(rects)?
                .label(mode.name())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn short(y: f64) -> String {
    if y >= 1e6 {
        format!("{:.1}M", y / 1e6)
    } else if y >= 1e4 {
        format!("{:.0}k", y / 1e3)
    } else if y >= 1e3 {
        format!("{:.1}k", y / 1e3)
    } else if y >= 10.0 || y == 0.0 {
        format!("{y:.0}")
    } else {
        format!("{y:.2}")
    }
}

/// The study's charts: measured and modelled throughput against threads, recovery bars.
pub fn draw_study(
    args: &Args,
    summary: &[report::Summary],
    fits: &[model::Fit],
    recovery: &[report::RecoverySummary],
) -> Result<(), BoxError> {
    let measured: Vec<Panel> = args
        .workloads
        .iter()
        .map(|&w| Panel {
            title: format!("{} ({} B/txn)", w.name(), w.payload_bytes_per_txn()),
            lines: args
                .modes
                .iter()
                .map(|&m| {
                    let pts = summary
                        .iter()
                        .filter(|r| r.workload == w && r.mode == m)
                        .map(|r| (r.threads as f64, r.txn_per_s))
                        .collect();
                    (m, pts)
                })
                .collect(),
        })
        .collect();
    line_panels(
        &args.out.join("throughput.svg"),
        &format!(
            "walbench: measured transactions/s vs threads (sync {}, {} cores)",
            args.sync.name(),
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        "txn/s",
        &measured,
    )?;
    let modelled: Vec<Panel> = args
        .workloads
        .iter()
        .map(|&w| Panel {
            title: format!("{} (model)", w.name()),
            lines: fits
                .iter()
                .filter(|f| f.workload == w)
                .map(|f| {
                    let pts = model::model_points(args.model_cores)
                        .into_iter()
                        .map(|n| (n as f64, f.predict(n)))
                        .collect();
                    (f.mode, pts)
                })
                .collect(),
        })
        .collect();
    line_panels(
        &args.out.join("model.svg"),
        &format!(
            "MODEL, not measured: X(n) = n / (t_par + n*t_ser) up to {} cores",
            args.model_cores
        ),
        "txn/s (predicted)",
        &modelled,
    )?;
    if !recovery.is_empty() {
        let mut applies: Vec<f64> = Vec::new();
        for r in recovery {
            if !applies.contains(&r.apply_us) {
                applies.push(r.apply_us);
            }
        }
        let panels: Vec<BarPanel> = applies
            .iter()
            .map(|&a| BarPanel {
                title: if a > 0.0 {
                    format!("with apply: 8 KiB page copy + {a:.1} us CPU per record")
                } else {
                    "decode only (no apply)".to_string()
                },
                groups: args
                    .workloads
                    .iter()
                    .map(|&w| {
                        let bars = recovery
                            .iter()
                            .filter(|r| r.workload == w && r.apply_us == a)
                            .map(|r| (r.mode, r.wall_ratio))
                            .collect();
                        (w.name().to_string(), bars)
                    })
                    .collect(),
            })
            .collect();
        bar_panels(
            &args.out.join("recovery.svg"),
            &format!(
                "walbench: recovery wall time / plaintext's, lower is better ({} MiB of payload, the same records in every mode)",
                args.recovery_mib
            ),
            "wall time / plaintext",
            &panels,
        )?;
    }
    Ok(())
}

/// The peer run's charts: commits/s against threads, one file per sync setting, a panel per
/// shape.
pub fn draw_peers(
    args: &Args,
    summary: &[PeerSummary],
    systems: &[System],
    cores: usize,
) -> Result<(), BoxError> {
    for &durable in &args.peer_sync {
        let panels: Vec<Panel<peers::System>> = args
            .shapes
            .iter()
            .map(|&shape| Panel {
                title: shape.name(),
                lines: systems
                    .iter()
                    .map(|&s| {
                        let pts = summary
                            .iter()
                            .filter(|r| r.shape == shape && r.durable == durable && r.system == s)
                            .map(|r| (r.threads as f64, r.txn_per_s))
                            .collect::<Vec<_>>();
                        (s, pts)
                    })
                    .filter(|(_, pts)| !pts.is_empty())
                    .collect(),
            })
            .collect();
        let sync = peers::sync_name(durable);
        line_panels(
            &args.out.join(format!("peers-sync-{sync}.svg")),
            &format!(
                "walbench --peers: commits/s vs threads, sync {sync} ({}), {cores} cores",
                if durable {
                    "durable commit"
                } else {
                    "handed to the OS"
                }
            ),
            "txn/s",
            &panels,
        )?;
    }
    Ok(())
}
