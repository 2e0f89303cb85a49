//! `stealscope serve` for real: the metrics against this machine's
//! /proc/stat and promtool, hostile counters through a --root whose
//! /proc/stat the test rewrites, the HTTP limits with raw TCP clients (slow
//! loris, idle keep-alive, oversized headers), a real Prometheus scraping it
//! with the shipped rules, node_exporter reading the textfile, an
//! unprivileged run, vCPU series of real QEMU VMs appearing and vanishing,
//! who stole their vCPUs' time (a host loop beside a pinned VM),
//! the deploy/ files (promtool rule tests, dashboard, systemd units), and
//! a soak with 10,000 vCPU-named threads, VM restarts and execs, and
//! exact guest steal against /proc/stat (BPF, root).

#[path = "../common/mod.rs"]
mod common;

mod deploy;
mod engine;
mod exact_steal;
mod guest;
mod helpers;
mod host;
mod http_limits;
mod prometheus;
mod soak;
mod who;
