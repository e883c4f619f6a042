//! A progress line for long single runs (`llmsim run`, `llmsim trace`):
//! drawn on stderr only when stderr is a terminal, and only once a run has
//! taken enough steps to report (see [`llmsim_planner::run_driver::drive`]), so
//! short runs and pipes see nothing.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use llmsim_core::util::thousands;
use llmsim_planner::run_driver::Progress;
use llmsim_scenario::config::{Arrivals, Scenario};

/// A lazily drawn progress line.
pub struct RunProgress {
    bar: Option<ProgressBar>,
    wanted: bool,
    /// Requests the workload will issue, if known.
    total: Option<u64>,
    duration_s: Option<f64>,
}

impl RunProgress {
    /// `wanted`: the user did not ask for quiet.
    pub fn new(s: &Scenario, wanted: bool) -> RunProgress {
        let w = &s.workload;
        let total = match &w.arrivals {
            Arrivals::Trace(t) => Some(w.requests.map_or(t.rows.len() as u64, |n| n.min(t.rows.len() as u64))),
            _ => w.requests,
        };
        RunProgress { bar: None, wanted: wanted && std::io::stderr().is_terminal(), total, duration_s: w.duration_s }
    }

    /// Shows how far the run has got.
    pub fn update(&mut self, p: &Progress) {
        if !self.wanted {
            return;
        }
        let bar = self.bar.get_or_insert_with(|| {
            let style = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(style)
        });
        let of = |total: Option<u64>| total.map(|t| format!(" of {}", thousands(t))).unwrap_or_default();
        let until = self.duration_s.map(|d| format!(" of {d}")).unwrap_or_default();
        bar.set_message(format!(
            "simulated {:.3} s{until}, {} requests{}, {} steps",
            p.now.as_secs_f64(),
            thousands(p.requests),
            of(self.total),
            thousands(p.steps)
        ));
        bar.tick();
    }

    /// Clears the line.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
