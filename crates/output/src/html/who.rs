//! "Who stole it" on the report page: a victim x culprit table of vCPU wait
//! (seconds) from the host section, or why there is no attribution. Over
//! time: [`super::who_time`], from a recording's culprits.

use super::svg;
use maud::{html, Markup};
use stealscope_analysis::report::HostSection;
use stealscope_findings::units::fixed;
use stealscope_model::host::attribution::CulpritShare;
use stealscope_who::Kind;

pub const ID: &str = "who-stole";
const TITLE: &str = "Who stole it: vCPU wait by culprit";
const COLUMNS: usize = 6;

fn label(c: &CulpritShare) -> String {
    let c = &c.charge.culprit;
    match (c.kind, c.pid) {
        (Kind::Vcpu, _) => format!("{} vCPUs", c.name),
        (Kind::Vmm, _) => format!("{} VMM threads", c.name),
        (Kind::HostProcess, Some(p)) => format!("{} (pid {p})", c.name),
        (Kind::HostKthread, _) => format!("{} (kernel)", c.name),
        _ => c.name.clone(),
    }
}

/// `over_time`: the recording has culprits per host scan; when its
/// checkpoints, which this section reads, hold no collector reading
/// (recordings from before they did), the section points there.
pub fn render(host: Option<&HostSection>, over_time: bool) -> Markup {
    let Some(h) = host else {
        return svg::no_data(ID, TITLE, "no VMs on this machine");
    };
    let a = &h.who.attribution;
    if h.who.culprits.is_empty() {
        let there = if over_time {
            "; the recording's host scans were attributed: see who stole it over time below"
        } else {
            ""
        };
        return svg::no_data(ID, TITLE, &format!("no attribution ({}){there}", a.reason));
    }
    let cols: Vec<&CulpritShare> = h.who.culprits.iter().take(COLUMNS).collect();
    let secs = |vm: &str, c: &CulpritShare| -> f64 {
        h.vms
            .iter()
            .filter(|v| v.name == vm)
            .flat_map(|v| &v.vcpus)
            .flat_map(|v| &v.wait_by)
            .filter(|w| w.culprit == c.charge.culprit)
            .map(|w| w.seconds)
            .sum()
    };
    html! {
        section class="plot" id=(ID) {
            h2 { (TITLE) }
            p { "Attributed by the " (a.route) " route; seconds each VM's vCPUs waited while the culprit ran on their CPU." }
            table class="cpus" {
                tr {
                    th { "victim" }
                    @for c in &cols { th { (label(c)) } }
                    th { "total" }
                }
                @for vm in &h.vms {
                    @let total: f64 = vm.vcpus.iter().flat_map(|v| &v.wait_by).map(|w| w.seconds).sum();
                    @if total > 0.0 {
                        tr {
                            td { (vm.name) }
                            @for c in &cols { td { (fixed(secs(&vm.name, c), 2)) } }
                            td { (fixed(total, 2)) }
                        }
                    }
                }
                tr {
                    th { "share of all" }
                    @for c in &cols { th { (fixed(100.0 * c.charge.share, 0)) "%" } }
                    th { "" }
                }
            }
            @if let Some(own) = &h.who.host_work.own {
                p { (crate::text::who_own_line(own)) }
            }
        }
    }
}
