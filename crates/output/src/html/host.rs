//! The page's opening: the verdict (what is wrong, what to do) and, on a
//! host, the VMs: the hypervisor split, a table with one row per vCPU
//! thread and a bar per vCPU of its wait (the steal its guest sees). More
//! host tables (who made the vCPUs wait) go after `vm_table` in `section`.

use super::bars::{self, Bars};
use super::svg;
use crate::text::share;
use maud::{html, Markup};
use stealscope_analysis::report::HostSection;
use stealscope_analysis::Verdict;
use stealscope_findings::units::PERCENT;

pub const ID: &str = "host";
pub const WAIT_ID: &str = "plot-vcpu-wait-interval";

pub fn verdict(v: &Verdict) -> Markup {
    html! {
        section id="verdict" class=(format!("verdict status-{}", v.status)) data-status=(v.status) {
            p class="headline" {
                strong { (match v.status { "critical" => "CRITICAL", "warning" => "WARNING", "cut-off" => "CUT OFF", _ => "OK" }) ": " }
                (v.headline)
                @if let Some(id) = &v.finding {
                    @if v.status != "info" {
                        " " a href="#findings" { code { (id) } }
                    }
                }
                @if v.more > 0 {
                    " (" (v.more) " more warning" (if v.more == 1 { "" } else { "s" }) " below)"
                }
            }
            @if let Some(fix) = &v.fix {
                p class="fix" { strong { "Fix: " } (fix) }
            }
        }
    }
}

pub fn section(h: &HostSection) -> Markup {
    let hv = &h.hypervisor;
    html! {
        section id=(ID) {
            h2 { "VMs on this host" }
            p class="caption" {
                (h.vms.len()) " VM" (if h.vms.len() == 1 { "" } else { "s" })
                "; vCPUs waited " (stealscope_findings::units::num_text(hv.vcpu_wait_cpu_s)) " CPU-s while host CPUs idled "
                (stealscope_findings::units::num_text(hv.host_idle_cpu_s)) " CPU-s (busy steal " (share(&hv.busy_steal_share))
                ", idle steal " (share(&hv.idle_steal_share)) ")."
            }
            (vm_table(h))
            (wait_bars(h))
        }
    }
}

/// One row per vCPU thread; the VM's cells span its vCPUs.
pub fn vm_table(h: &HostSection) -> Markup {
    html! {
        table class="vms" id="vm-table" {
            caption { "Per VM and vCPU over the interval: wait (host-side steal) and run, % of wall time" }
            thead {
                tr {
                    th scope="col" { "VM" } th scope="col" { "pid" } th scope="col" { "kind" }
                    th scope="col" { "vCPU" } th scope="col" { "tid" } th scope="col" { "wait %" }
                    th scope="col" { "run %" } th scope="col" { "may run on CPUs" }
                }
            }
            tbody {
                @for vm in &h.vms {
                    @let n = vm.vcpus.len().max(1);
                    @if vm.vcpus.is_empty() {
                        tr data-vm=(vm.name) {
                            th scope="row" { (vm.name) } td { (vm.pid) } td { (vm.kind) }
                            td colspan="5" { "no vCPU threads identified" }
                        }
                    }
                    @for (i, c) in vm.vcpus.iter().enumerate() {
                        tr data-vm=(vm.name) data-vcpu=(c.index) {
                            @if i == 0 {
                                th scope="rowgroup" rowspan=(n) { (vm.name) }
                                td rowspan=(n) { (vm.pid) }
                                td rowspan=(n) { (vm.kind) br; small { "vCPUs by " (vm.vcpu_source) } }
                            }
                            td { (c.index) } td { (c.tid) }
                            td class="num wait" { (PERCENT.render(Some(c.host_steal_pct))) }
                            td class="num" { (PERCENT.render(Some(c.util_pct))) }
                            td { (c.cpus_allowed.as_ref().map(|v| stealscope_readers::cpulist::format(v)).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    }
}

/// A bar per vCPU: how long its thread waited runnable, % of wall time.
fn wait_bars(h: &HostSection) -> Markup {
    const TITLE: &str = "vCPU wait over the interval (host-side steal)";
    let mut labels = Vec::new();
    let mut values = Vec::new();
    let mut hover = Vec::new();
    for vm in &h.vms {
        for c in &vm.vcpus {
            labels.push(format!("{}/{}", vm.name, c.index));
            values.push(c.host_steal_pct);
            hover.push(format!(
                "{} vCPU {} (tid {}): waited {} %, ran {} %",
                vm.name,
                c.index,
                c.tid,
                PERCENT.render(Some(c.host_steal_pct)),
                PERCENT.render(Some(c.util_pct))
            ));
        }
    }
    if values.is_empty() {
        return svg::no_data(WAIT_ID, TITLE, "no vCPU threads identified");
    }
    svg::figure(
        WAIT_ID,
        TITLE,
        "Share of wall time each vCPU thread waited runnable on a host run queue \
         (schedstat, the steal its guest is told), over the whole interval.",
        bars::render(&Bars {
            class: "vcpu-wait",
            title: TITLE,
            labels: &labels,
            values: &values,
            hover: &hover,
            x_title: "VM/vCPU",
            y_title: "wait %",
            log_y: false,
            alarm_from: None,
        }),
    )
}
