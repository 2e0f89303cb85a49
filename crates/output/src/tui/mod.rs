//! The screens of `stealscope top`, drawn with ratatui from the model: one
//! file per panel, [`layout`] deciding which panels fit. Numbers come from
//! the model ([`RecentWindows`], [`VmLive`], findings); nothing here reads
//! the system, so every panel is tested on a `TestBackend`.

pub mod cpu_bars;
pub mod exact_steal;
pub mod findings;
pub mod header;
pub mod help;
pub mod keys;
pub mod layout;
pub mod run;
pub mod steal_lines;
pub mod vm_table;
pub mod wait_history;

use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use stealscope_analysis::Finding;
use stealscope_model::host::VmLive;
use stealscope_model::recent::RecentWindows;
use stealscope_model::running_exact_steal::RunningExactSteal;

pub use vm_table::VmSort;

/// What the user chose.
#[derive(Debug, Clone, PartialEq)]
pub struct UiState {
    pub rate_hz: f64,
    pub paused: bool,
    pub help: bool,
    pub sort: VmSort,
}

impl Default for UiState {
    fn default() -> Self {
        UiState {
            rate_hz: 10.0,
            paused: false,
            help: false,
            sort: VmSort::Wait,
        }
    }
}

/// The rule engine's latest answer.
#[derive(Debug, Clone, Copy)]
pub struct FindingsInput<'a> {
    pub findings: &'a [Finding],
    /// How long ago the rules last ran; None before the first run.
    pub age_s: Option<f64>,
    /// The interval each run covers (and how often it runs).
    pub every_s: f64,
    /// Why the last run failed, if it did.
    pub error: Option<&'a str>,
}

/// Everything one frame shows.
#[derive(Debug, Clone, Copy)]
pub struct TopInput<'a> {
    pub hostname: Option<&'a str>,
    pub windows: &'a RecentWindows,
    /// Exact guest steal (the BPF collector), or why there is none.
    pub exact: &'a RunningExactSteal,
    /// None until a host scan found a VM (a guest, or a host with none yet).
    pub vms: Option<&'a [VmLive]>,
    /// Whether culprits are attributed: the route, or why not.
    pub culprits: &'a str,
    /// The machine is itself a guest (the hypervisor flag): its steal
    /// lines are shown on a host too.
    pub guest: bool,
    pub findings: FindingsInput<'a>,
    pub ui: &'a UiState,
    /// A problem to show in the header (a failed read), if any.
    pub notice: Option<&'a str>,
}

impl TopInput<'_> {
    /// Guest steal lines mean something: not a host, or a host that is
    /// itself a guest, or steal was counted.
    pub fn guest_steal(&self) -> bool {
        self.vms.is_none()
            || self.guest
            || self
                .windows
                .total_steal_series(self.windows.len())
                .into_iter()
                .flatten()
                .any(|v| v > 0.0)
    }
}

/// Below this there is no room for any panel: one line says so.
pub const MIN_WIDTH: u16 = 16;
pub const MIN_HEIGHT: u16 = 2;

pub fn draw(frame: &mut Frame, input: &TopInput) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!("too small ({}x{})", area.width, area.height);
        frame.render_widget(Paragraph::new(Line::from(msg)), area);
        return;
    }
    let areas = layout::split(area, input);
    header::render(frame, areas.header, input);
    if let Some(a) = areas.bars {
        cpu_bars::render(frame, a, input.windows);
    }
    if let Some(a) = areas.steal {
        steal_lines::render(frame, a, input.windows);
    }
    if let Some(a) = areas.exact {
        exact_steal::render(frame, a, input.exact);
    }
    if let Some(a) = areas.findings {
        findings::render(frame, a, &input.findings);
    }
    if let (Some(a), Some(vms)) = (areas.vms, input.vms) {
        vm_table::render(frame, a, vms, input.ui.sort, input.culprits);
    }
    if let (Some(a), Some(vms)) = (areas.history, input.vms) {
        wait_history::render(frame, a, vms, input.ui.sort);
    }
    if input.ui.help {
        help::render(
            frame,
            area,
            if input.vms.is_some() {
                input.culprits
            } else {
                ""
            },
        );
    }
}

/// `area` without its first row (the panel's heading), and that row.
fn heading_and_body(area: Rect) -> (Rect, Rect) {
    let head = Rect { height: 1, ..area };
    let body = Rect {
        y: area.y.saturating_add(1),
        height: area.height.saturating_sub(1),
        ..area
    };
    (head, body)
}

/// A percentage as the panels print it: one decimal, "n/a" when unknown.
fn pct(v: Option<f64>) -> String {
    stealscope_findings::units::PERCENT.suffix("%").render(v)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Builds model input from /proc/stat text and reads a rendered buffer.
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use stealscope_readers::stat::parse;

    /// Ten 100 ms windows at 100 ticks/s; per CPU (user, steal) ticks of
    /// each window, the rest idle.
    pub fn windows(per_cpu: &[(u32, u64, u64)], n: usize) -> RecentWindows {
        let mut r = RecentWindows::new(100.0, 1000);
        for k in 0..=n as u64 {
            let mut s = String::from("cpu  0 0 0 0 0 0 0 0\n");
            for (cpu, user, steal) in per_cpu {
                let idle = 10 - user - steal;
                s.push_str(&format!(
                    "cpu{cpu} {} 0 0 {} 0 0 0 {}\n",
                    k * user,
                    k * idle,
                    k * steal
                ));
            }
            r.push(k * 100_000_000, parse(&s, "/proc/stat").unwrap());
        }
        r
    }

    pub fn screen(w: u16, h: u16, f: impl FnOnce(&mut Frame)) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(f).unwrap();
        let buf = t.backend().buffer();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
            .collect()
    }

    /// A VM of `n` vCPUs (tids 100.., on CPU i % 2 of 0-1), each with the
    /// VM's wait and run.
    pub fn vm(name: &str, n: u32, wait: Option<f64>, run: Option<f64>) -> VmLive {
        use stealscope_model::host::{Placement, VcpuLive};
        VmLive {
            vm: name.into(),
            pid: 1,
            wait_pct: wait,
            run_pct: run,
            vcpus: (0..n)
                .map(|i| VcpuLive {
                    vcpu: i,
                    tid: 100 + i,
                    wait_pct: wait,
                    run_pct: run,
                    placement: Placement {
                        cpu: Some(i % 2),
                        affinity: Some("0-1".into()),
                    },
                    history: Default::default(),
                    culprits: None,
                })
                .collect(),
            history: Default::default(),
            culprits: None,
        }
    }

    pub fn wait_by(
        kind: stealscope_who::Kind,
        name: &str,
        pid: Option<u32>,
        share: f64,
    ) -> stealscope_who::Charge {
        stealscope_who::Charge {
            culprit: stealscope_who::Culprit {
                pid,
                ..stealscope_who::Culprit::new(kind, name)
            },
            seconds: share,
            share,
        }
    }

    /// The exact steal panel as a guest without the collector shows it.
    pub fn no_exact() -> &'static RunningExactSteal {
        static E: std::sync::OnceLock<RunningExactSteal> = std::sync::OnceLock::new();
        E.get_or_init(|| {
            let mut e = RunningExactSteal::default();
            e.apply(
                stealscope_model::running_exact_steal::ExactReading::Unavailable("not root".into()),
            );
            e
        })
    }

    pub fn input<'a>(
        windows: &'a RecentWindows,
        vms: Option<&'a [VmLive]>,
        findings: &'a [Finding],
        ui: &'a UiState,
    ) -> TopInput<'a> {
        TopInput {
            hostname: Some("testhost"),
            windows,
            exact: no_exact(),
            vms,
            findings: FindingsInput {
                findings,
                age_s: Some(2.0),
                every_s: 5.0,
                error: None,
            },
            ui,
            notice: None,
            culprits: "culprits: tracefs route",
            guest: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use stealscope_analysis::Severity;
    use stealscope_who::Kind;

    #[test]
    fn every_size_renders_without_panic() {
        let w = windows(&[(0, 3, 2), (1, 9, 1), (2, 0, 0), (3, 5, 5)], 40);
        let vms = [vm("web", 2, Some(3.0), None)];
        let f = [Finding::new("steal.idle", Severity::Warning, "t")];
        let empty = RecentWindows::new(100.0, 10);
        for help in [false, true] {
            let ui = UiState {
                help,
                ..Default::default()
            };
            for (win, vms) in [(&w, Some(&vms[..])), (&empty, None)] {
                for width in 0..50 {
                    for height in 0..25 {
                        screen(width, height, |fr| draw(fr, &input(win, vms, &f, &ui)));
                    }
                }
            }
        }
    }

    #[test]
    fn tiny_terminal_says_so() {
        let w = windows(&[(0, 3, 2)], 5);
        let ui = UiState::default();
        let rows = screen(15, 3, |fr| draw(fr, &input(&w, None, &[], &ui)));
        assert_eq!(rows[0].trim_end(), "too small (15x3");
    }

    #[test]
    fn full_screen_has_every_panel() {
        let w = windows(&[(0, 3, 2), (1, 9, 1)], 20);
        let vms = [vm("web", 2, Some(3.0), Some(40.0))];
        let f = [Finding::new(
            "steal.busy",
            Severity::Critical,
            "the host is oversubscribed",
        )];
        let ui = UiState::default();
        let text = screen(100, 30, |fr| draw(fr, &input(&w, Some(&vms), &f, &ui))).join("\n");
        for want in ["cpu0", "cpu1", "steal.busy", "web", "VM", "testhost"] {
            assert!(text.contains(want), "{want} missing in\n{text}");
        }
    }

    #[test]
    fn a_host_at_160x45_has_no_blank_bottom_half() {
        // A host that is not a guest (no steal counted): no steal lines.
        let w = windows(&[(0, 9, 0), (1, 9, 0)], 40);
        let mut a = vm("vmA", 2, Some(40.0), Some(55.0));
        a.history = (0..40).map(|i| Some(f64::from(i % 5) * 10.0)).collect();
        a.culprits = Some(vec![wait_by(Kind::HostProcess, "hog", Some(7), 0.9)]);
        let mut b = vm("vmB", 1, Some(2.0), Some(30.0));
        b.history = a.history.clone();
        let vms = [a, b];
        let f = [Finding::new("host.steal.busy", Severity::Critical, "x")];
        let ui = UiState::default();
        let rows = screen(160, 45, |fr| draw(fr, &input(&w, Some(&vms), &f, &ui)));
        let text = rows.join("\n");
        assert!(!text.contains("steal per "), "{text}");
        for want in [
            "vCPU 0",
            "vCPU 1",
            "process hog[7] 90%",
            "wait of the vCPUs",
        ] {
            assert!(text.contains(want), "{want} missing in\n{text}");
        }
        let blank = rows.iter().filter(|r| r.trim().is_empty()).count();
        assert!(blank <= 2, "{blank} blank rows:\n{text}");
        assert!(!rows[22..].iter().all(|r| r.trim().is_empty()), "{text}");
    }
}
