//! The simulator against what must hold: scenario errors name the file,
//! line and key; the talk's cases show what the theory says (equal per-VM
//! weights rob a big VM's vCPUs, one group does not, CPUs that are all busy
//! give a known mean steal); the same seed gives the same report; summed
//! stretches equal tick-by-tick simulation; any scenario runs without panic
//! and with percentages in range.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use stealscope_sim::report::CaseReport;
use stealscope_sim::{simulate, Options, Scenario, SimReport};

fn scenario_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

fn load(name: &str) -> Scenario {
    Scenario::load(&scenario_file(name)).unwrap_or_else(|e| panic!("{e}"))
}

fn parse(text: &str) -> Result<Scenario, String> {
    Scenario::parse(text, Path::new("bad.toml")).map_err(|e| e.to_string())
}

fn case<'a>(r: &'a SimReport, name: &str) -> &'a CaseReport {
    r.cases
        .iter()
        .find(|c| c.name.contains(name))
        .unwrap_or_else(|| panic!("no case {name}"))
}

/// A scenario's text without its `background = [...]` (other host work).
fn without_background(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for l in text.lines() {
        if l.starts_with("background = [") {
            inside = true;
        }
        if !inside {
            out.push_str(l);
            out.push('\n');
        }
        if inside && l.starts_with(']') {
            inside = false;
        }
    }
    out
}

/// The calibration scenario with the coarse model: no kernel timing, no
/// QEMU threads besides the vCPUs and no other work.
fn coarse_calibration() -> Scenario {
    let text = std::fs::read_to_string(scenario_file("calibration-2cpu.toml")).unwrap();
    let text: String = without_background(&text)
        .replace("timing = true", "timing = false")
        .lines()
        .filter(|l| !l.starts_with("emulator") && !l.starts_with("vcpu_wakeups"))
        .map(|l| format!("{l}\n"))
        .collect();
    parse(&text).unwrap()
}

fn seeds(v: &[u64]) -> Options {
    Options {
        seeds: v.to_vec(),
        ..Options::default()
    }
}

const HOST: &str = "[host]\ncpus = 4\n";

#[test]
fn errors_name_the_file_the_line_and_the_key() {
    // (scenario, the line at fault (None: no line), what the message says)
    let cases: Vec<(String, Option<&str>, &str)> = vec![
        (format!("duration = 5\n{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\n"), Some("duration = 5"), "unknown field `duration`"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 0\n"), Some("vcpus = 0"), "must be a whole number"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\ndemand = \"busyy\"\n"), Some("demand = \"busyy\""), "unknown demand \"busyy\""),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\ndemand = 1.5\n"), Some("demand = 1.5"), "within [0, 1]"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\ndemand = {{ pattern = \"bursts\", period_s = 1, on_s = 2 }}\n"), Some("demand = {"), "on_s = 2 is longer than period_s = 1"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\ndemand = {{ pattern = \"burst\" }}\n"), Some("demand = {"), "unknown variant `burst`"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\ndemand = {{ pattern = \"random\", mean = 0.5, change = 3 }}\n"), Some("demand = {"), "unknown field `change`"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\ncpus = \"0-9\"\n"), Some("cpus = \"0-9\""), "must name some of the host's CPUs 0-3"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\nmem_node = 3\n"), Some("name = \"a\""), "mem_node = 3"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\n[[case]]\nname = \"x\"\npolicy = \"stealscope\"\nplanner = {{ fairnes = \"weights\" }}\n"), Some("planner = {"), "planner: unknown field `fairnes`"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\n[[case]]\nname = \"x\"\nplanner = {{ fairness = \"weights\" }}\n"), Some("planner = {"), "need policy = \"stealscope\""),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\n[[case]]\nname = \"x\"\npolicy = \"octopus\"\n"), Some("policy = \"octopus\""), "unknown variant `octopus`"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\n[[vm]]\nname = 'a'\nvcpus = 2\n"), Some("name = 'a'"), "two VMs are named `a`"),
        ("[host]\ncpus = 4\nbackground = [{ cpu = 9, demand = 0.5 }]\n[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), Some("background = "), "background cpu 9"),
        (format!("tick_ms = 0\n{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\n"), Some("tick_ms = 0"), "must be a number above 0"),
        ("[host]\ncpus = 6\nnodes = 4\n[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), None, "cpus = 6 does not split evenly over nodes = 4"),
        ("[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), None, "missing field `host`"),
        (HOST.into(), None, "nothing to simulate"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\ndemand = {{ pattern = \"trace\", file = \"no-such.trace\" }}\n"), Some("name = \"a\""), "no-such.trace"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\nemulator = {{ wakeups_per_s = 1000, run_us = 2000 }}\n"), Some("name = \"a\""), "emulator: wakeups_per_s x run_us is 2.00 of a CPU"),
        (format!("{HOST}[[vm]]\nname = \"a\"\nvcpus = 1\nemulator = {{ wakeups_per_s = 100, run_us = 20, kicks = 2 }}\n"), Some("emulator = {"), "within [0, 1]"),
        (format!("{HOST}[scheduler]\nhz = 0\n[[vm]]\nname = \"a\"\nvcpus = 1\n"), Some("hz = 0"), "must be a number above 0"),
        ("[host]\ncpus = 2\nbackground = [{ demand = 0.1, wakeups_per_s = 5, run_us = 10 }]\n[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), None, "host.background[0]: give either demand or wakeups_per_s and run_us, not both"),
        ("[host]\ncpus = 2\nbackground = [{ demand = 0.1 }, { wakeups_per_s = 5 }]\n[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), None, "host.background[1]: wakeups_per_s needs run_us"),
        ("[host]\ncpus = 2\nbackground = [{ cpu = 1 }]\n[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), None, "host.background[0]: needs demand, or wakeups_per_s and run_us"),
        ("[host]\ncpus = 2\nbackground = [{ queued = 0.01, demand = 0.5 }]\n[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), None, "queued = 0.01 is less than what it runs"),
        ("[host]\ncpus = 2\nbackground = [{ queued = 1.5, demand = 0.5 }]\n[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), Some("background = "), "within [0, 1]"),
        ("[host]\ncpus = 2\nbackground = [{ wakeups_per_s = 1000, run_us = 2000 }]\n[[vm]]\nname = \"a\"\nvcpus = 1\n".into(), None, "wakeups_per_s x run_us is 2.00 CPUs"),
    ];
    for (text, line, want) in cases {
        let e = parse(&text).expect_err(&text);
        assert!(e.starts_with("bad.toml: "), "{e}");
        assert!(e.contains(want), "{text}\n=> {e}");
        assert!(!e.contains('\n'), "one line: {e}");
        if let Some(l) = line {
            let n = text
                .lines()
                .position(|x| x.starts_with(l))
                .expect("line in text")
                + 1;
            assert!(
                e.contains(&format!("line {n} (`")),
                "{text}\n=> {e} (want line {n})"
            );
        }
    }
}

#[test]
fn every_scenario_in_the_repo_parses() {
    let dir = scenario_file("");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 5, "{n} scenarios in {}", dir.display());
}

/// Steal of each vCPU (mean over seeds) of the VMs whose name starts with `prefix`.
fn steals(c: &CaseReport, prefix: &str) -> Vec<f64> {
    c.vms
        .iter()
        .filter(|v| v.name.starts_with(prefix))
        .flat_map(|v| v.vcpus.iter().map(|x| x.steal_pct.mean))
        .collect()
}

#[test]
fn talk_per_vm_groups_rob_the_big_vms_and_one_group_does_not() {
    let s = load("talk-cgroups.toml");
    let r = simulate(&s, &seeds(&[1, 2, 3]));
    let vcpus: u32 = s.vms.iter().map(|v| v.vcpus).sum();
    let cpus = s.file.host.cpus.0;
    // Every vCPU is busy and there are more than CPUs: every CPU is used,
    // so the mean steal is 1 - CPUs/vCPUs whatever the layout.
    let theory_mean = 100.0 * (1.0 - cpus as f64 / vcpus as f64);
    for c in &r.cases {
        assert!(
            (c.steal_pct.mean - theory_mean).abs() < 1.0,
            "{}: mean steal {} vs {theory_mean}",
            c.name,
            c.steal_pct.mean
        );
    }
    // Equal weights per VM: each VM gets CPUs / VMs, split over its vCPUs.
    let per_vm = case(&r, "per-VM");
    let vm_share = cpus as f64 / s.vms.len() as f64;
    for (prefix, size) in [("big", 4.0), ("small", 2.0)] {
        let theory = 100.0 * (1.0 - vm_share / size);
        for st in steals(per_vm, prefix) {
            assert!(
                (st - theory).abs() < 5.0,
                "{prefix} vCPU steal {st} vs {theory}"
            );
        }
    }
    let big = steals(per_vm, "big")
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    let small = steals(per_vm, "small").into_iter().fold(0.0, f64::max);
    assert!(big > small, "big VMs robbed more: {big} vs {small}");
    // One group for every vCPU (the talk's fix, and stealscope's shared group):
    // each vCPU weighs the same.
    for name in ["per-host", "stealscope"] {
        let c = case(&r, name);
        assert!(c.spread_pp.max < 5.0, "{name}: spread {:?}", c.spread_pp);
    }
    assert!(per_vm.spread_pp.min > case(&r, "per-host").spread_pp.max);
}

#[test]
fn calibration_layouts_vary_with_equal_shares_and_one_group_is_fair() {
    let s = load("calibration-2cpu.toml");
    assert!(
        s.file.scheduler.timing,
        "the calibration models kernel timing"
    );
    let r = simulate(&s, &seeds(&(1..=10).collect::<Vec<_>>()));
    let vcpus: u32 = s.vms.iter().map(|v| v.vcpus).sum();
    let theory_mean = 100.0 * (1.0 - s.file.host.cpus.0 as f64 / vcpus as f64);
    for c in &r.cases {
        // Every CPU stays busy (the main loops hardly run): mean steal is
        // 1 - CPUs/vCPUs whatever the layout.
        assert!(
            (c.steal_pct.mean - theory_mean).abs() < 2.0,
            "{}: {:?}",
            c.name,
            c.steal_pct
        );
    }
    // Equal per-VM shares: the main-loop threads carry load in their VM's
    // group without using CPU, so the balancer keeps layouts in which the
    // vCPUs' shares differ, and which one depends on timing (the seed):
    // the real rounds (BENCHMARKS.md, issue 8) spread 25.6-34.8 pp.
    let equal = case(&r, "equal");
    assert!(
        equal.spread_pp.mean > 15.0 && equal.spread_pp.max - equal.spread_pp.min > 5.0,
        "equal shares: {:?}",
        equal.spread_pp
    );
    // One group for all, vCPUs pinned one per CPU (the real rounds' layout):
    // fair in every seed.
    let pinned = case(&r, "pinned");
    assert!(pinned.spread_pp.max < 2.0, "{:?}", pinned.spread_pp);
    // One group, threads left to the balancer: each vCPU weighs the same
    // wherever it runs, but the other work's queued bursts (load without
    // CPU, measured on this machine) make 3+1 layouts look balanced in some
    // seeds, as in the real rounds (6.8-13.8 pp).
    let shared = case(&r, "shared-group");
    assert!(shared.spread_pp.max > 5.0, "{:?}", shared.spread_pp);
    for name in ["weights", "shared-group"] {
        assert!(
            case(&r, name).policy_actions > 0.0,
            "{name}: the planner acted"
        );
    }
}

#[test]
fn without_the_other_work_one_group_settles_on_two_and_two() {
    // The same scenario without its background: the balancer evens out
    // the group's four threads (2+2) in every seed, so it is the other
    // work's load that keeps uneven layouts, not the group's own threads.
    let text = std::fs::read_to_string(scenario_file("calibration-2cpu.toml")).unwrap();
    assert!(
        text.contains("background = ["),
        "the calibration has other work"
    );
    let s = parse(&without_background(&text)).unwrap();
    assert!(s.file.host.background.is_empty());
    let r = simulate(&s, &seeds(&(1..=10).collect::<Vec<_>>()));
    let shared = case(&r, "shared-group");
    assert!(shared.spread_pp.max < 2.0, "{:?}", shared.spread_pp);
}

#[test]
fn without_kernel_timing_the_calibration_settles_in_one_layout() {
    // The coarse model (fleets): equal shares split A's weight over both
    // CPUs, A's vCPUs get 1/3 of a CPU and B's and C's 2/3, every seed.
    let r = simulate(&coarse_calibration(), &seeds(&[1, 2, 3]));
    let equal = case(&r, "equal");
    assert!(
        (equal.spread_pp.mean - 100.0 / 3.0).abs() < 5.0,
        "{:?}",
        equal.spread_pp
    );
    assert!(equal.spread_pp.max - equal.spread_pp.min < 5.0);
}

/// A busy host with idle VMs, or the idle VMs alone.
fn idle_vms(busy: bool) -> Scenario {
    let mut t = String::from("duration_s = 30\nwarmup_s = 5\n[host]\ncpus = 4\n[[vm]]\nname = \"idle\"\ncount = 2\nvcpus = 1\ndemand = \"idle\"\n");
    if busy {
        t.push_str("[[vm]]\nname = \"busy\"\nvcpus = 4\n");
    }
    t.push_str("[[case]]\nname = \"per-vm\"\n");
    parse(&t).unwrap()
}

#[test]
fn idle_vms_suffer_steal_only_next_to_busy_ones() {
    let o = seeds(&[1, 2, 3]);
    let alone = simulate(&idle_vms(false), &o);
    let crowded = simulate(&idle_vms(true), &o);
    for v in alone.cases[0].vms.iter() {
        assert!(v.steal_pct.max < 0.01, "{}: {:?}", v.name, v.steal_pct);
    }
    for v in crowded.cases[0]
        .vms
        .iter()
        .filter(|v| v.name.starts_with("idle"))
    {
        assert!(v.steal_pct.min > 0.1, "{}: {:?}", v.name, v.steal_pct);
        // The talk's "idle steal" from the VM's side: use + steal far below 100%.
        assert!(v.util_pct + v.steal_pct.max < 50.0, "{v:?}");
    }
}

#[test]
fn same_seed_same_report_and_seeds_matter() {
    let s = load("talk-idle-vms.toml");
    let o = seeds(&[7, 8, 9]);
    let a = serde_json::to_string(&simulate(&s, &o)).unwrap();
    let b = serde_json::to_string(&simulate(&s, &o)).unwrap();
    assert_eq!(a, b);
    // The balancer's order is random: some vCPU ends differently across seeds.
    let r = simulate(&s, &o);
    assert!(r
        .cases
        .iter()
        .flat_map(|c| c.vms.iter().flat_map(|v| v.vcpus.iter()))
        .any(|x| x.steal_pct.max - x.steal_pct.min > 0.1));
}

fn vm_steal(r: &SimReport) -> Vec<(String, String, f64)> {
    r.cases
        .iter()
        .flat_map(|c| {
            c.vms
                .iter()
                .map(|v| (c.name.clone(), v.name.clone(), v.steal_pct.mean))
        })
        .collect()
}

#[test]
fn summed_stretches_match_tick_by_tick() {
    let every = |o: Options| Options {
        every_tick: true,
        ..o
    };
    // Settled stretches are summed exactly (the coarse model: with kernel
    // timing every tick is drawn anew and nothing is summed).
    for (name, s) in [
        ("calibration-2cpu.toml", coarse_calibration()),
        ("talk-cgroups.toml", load("talk-cgroups.toml")),
    ] {
        let fast = simulate(&s, &seeds(&[3]));
        let slow = simulate(&s, &every(seeds(&[3])));
        let ticks = |r: &SimReport| r.cases.iter().map(|c| c.ticks_simulated).sum::<u64>();
        assert!(
            ticks(&fast) * 10 < ticks(&slow),
            "{name}: {} vs {}",
            ticks(&fast),
            ticks(&slow)
        );
        for (f, s) in vm_steal(&fast).iter().zip(vm_steal(&slow)) {
            assert!((f.2 - s.2).abs() < 0.05, "{name}: {f:?} vs {s:?}");
        }
    }
    // Stretches where threads trade places are summed at their averages:
    // the same over several seeds (each path is random either way).
    let s = load("talk-idle-vms.toml");
    let o = seeds(&[1, 2, 3, 4, 5, 6]);
    let fast = vm_steal(&simulate(&s, &o));
    let slow = vm_steal(&simulate(&s, &every(o)));
    for (f, s) in fast.iter().zip(&slow) {
        assert!((f.2 - s.2).abs() < 2.0, "{f:?} vs {s:?}");
    }
}

#[test]
fn numa_balancing_costs_and_stealscope_refuses_to_fight_it() {
    let s = load("talk-numa.toml");
    let r = simulate(&s, &seeds(&[1]));
    let on = case(&r, "NUMA balancing on (default)");
    let off = case(&r, "NUMA balancing off");
    assert!(on.numa_moves > 0.0 && off.numa_moves == 0.0);
    assert!(
        on.throughput_pct < off.throughput_pct,
        "{} vs {}",
        on.throughput_pct,
        off.throughput_pct
    );
    let fought = case(&r, "stealscope, NUMA balancing on");
    assert!(fought.policy_actions == 0.0);
    assert!(
        fought.warnings.iter().any(|w| w.contains("NUMA balancing")),
        "{:?}",
        fought.warnings
    );
    let pinned = case(&r, "stealscope, NUMA balancing off");
    assert!(pinned.policy_actions > 0.0);
    assert!(pinned.throughput_pct > on.throughput_pct);
}

#[test]
fn a_small_fleet() {
    let s = parse(
        "duration_s = 600\n[host]\ncpus = 8\nnodes = 2\n[fleet]\nhosts = 6\ninitial_vms = 5\narrivals_per_host_hour = 6\nmean_lifetime_h = 0.1\n\
         [[fleet.mix]]\nvcpus = 2\ndemand = { pattern = \"random\", mean = 0.6, change_s = 60 }\n[[fleet.mix]]\nvcpus = 1\nshare = 2\ndemand = \"busy\"\n",
    )
    .unwrap();
    let r = simulate(&s, &Options::default());
    let f = r.fleet.expect("fleet ran");
    assert_eq!(f.cases.len(), 3);
    for c in &f.cases {
        assert_eq!(c.hosts, 6);
        assert!(c.vms >= 6 * 5 / 2, "{} VMs", c.vms);
        assert!(c.vm_steal_p50 <= c.vm_steal_p90 && c.vm_steal_p90 <= c.vm_steal_p99);
        assert!(c.vm_steal_p99 <= c.vm_steal_max && c.vm_steal_max <= 100.0);
        assert!(c.idle_steal_pct <= c.steal_pct + 1e-9);
        assert!(c.ticks_simulated <= c.ticks_total);
        assert!(
            c.work_pct > 0.0 && c.work_pct <= 100.0 + 1e-9,
            "{}",
            c.work_pct
        );
        assert!(c.vcpu_spread_pp >= 0.0 && c.vm_spread_pp >= 0.0);
        let per_hour = c.placement_changes as f64 / (6.0 * 600.0 / 3600.0);
        assert!((c.changes_per_host_hour - per_hour).abs() < 0.01);
    }
    // The kernel alone changes nothing; a placing policy does (its first pass).
    assert_eq!(f.cases[0].placement_changes, 0);
    assert!(f.cases[1].placement_changes > 0);
}

/// The walk-through in the simulator: 2 CPUs, web (2 busy vCPUs),
/// db (1 busy), an idle VM and `backup`, a host loop pinned to CPU 0. Under
/// the stealscope policy (the default, and the pinned map the old plan
/// stacked on CPU 0) the busy vCPUs' steal stays within 10 pp of each
/// other and the loop keeps a share of CPU 0: what the vCPUs ran leaves it
/// at least 0.4 CPU.
#[test]
fn a_host_loop_pinned_to_a_cpu_keeps_its_cpu_and_the_vcpus_stay_even() {
    // The planner's whole plan (never_worse off): this judges its layout.
    let s = parse(
        "duration_s = 60\nwarmup_s = 20\nseeds = 3\n[host]\ncpus = 2\nbackground = [{ cpu = 0, demand = 1.0 }]\n\
         [[vm]]\nname = \"web\"\nvcpus = 2\n[[vm]]\nname = \"db\"\nvcpus = 1\n[[vm]]\nname = \"idle\"\nvcpus = 1\ndemand = \"idle\"\n\
         [[case]]\nname = \"default\"\npolicy = \"stealscope\"\nplanner = { never_worse = false }\n\
         [[case]]\nname = \"pinned\"\npolicy = \"stealscope\"\nplanner = { vcpu_mapping = \"pinned\", never_worse = false }\n",
    )
    .unwrap();
    let r = simulate(&s, &Options::default());
    for c in &r.cases {
        let busy: Vec<f64> = c
            .vms
            .iter()
            .filter(|v| v.name != "idle")
            .flat_map(|v| v.vcpus.iter().map(|x| x.steal_pct.mean))
            .collect();
        let spread = busy.iter().copied().fold(f64::MIN, f64::max)
            - busy.iter().copied().fold(f64::MAX, f64::min);
        assert!(spread <= 10.0, "{}: busy vCPU steal {busy:?}", c.name);
        let vcpus_ran: f64 = c
            .vms
            .iter()
            .flat_map(|v| v.vcpus.iter().map(|x| x.util_pct))
            .sum();
        assert!(
            vcpus_ran <= 160.0,
            "{}: the vCPUs ran {vcpus_ran:.0} % of a CPU of the 200 %: backup starved",
            c.name
        );
    }
}

fn demand() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"busy\"".to_string()),
        Just("\"idle\"".to_string()),
        (0.0..1.0f64).prop_map(|x| format!("{x:.3}")),
        (1u32..20, 0.0..1.0f64).prop_map(|(p, f)| format!(
            "{{ pattern = \"bursts\", period_s = {p}, on_s = {:.3}, low = 0.05 }}",
            p as f64 * f.max(0.01)
        )),
        (0.0..1.0f64)
            .prop_map(|m| format!("{{ pattern = \"random\", mean = {m:.3}, change_s = 2 }}")),
    ]
}

fn scenario() -> impl Strategy<Value = String> {
    (
        1u32..4,
        1u32..5,
        prop::collection::vec((1u32..5, demand(), any::<bool>()), 1..6),
        prop_oneof![Just("per-vm"), Just("per-host"), Just("proportional"), Just("none")],
        prop_oneof![Just("none"), Just("numad"), Just("stealscope")],
        any::<bool>(),
        prop_oneof![Just(10u32), Just(50), Just(100), Just(250)],
    )
        .prop_map(|(nodes, per, vms, cg, pol, numa, tick)| {
            let mut t = format!(
                "duration_s = 12\nwarmup_s = 1\ntick_ms = {tick}\n[host]\ncpus = {}\nnodes = {nodes}\nnuma_balancing = {numa}\ncgroups = \"{cg}\"\nmem_gib_per_node = 4\n",
                nodes * per
            );
            for (i, (vcpus, d, pinned)) in vms.iter().enumerate() {
                t.push_str(&format!("[[vm]]\nname = \"v{i}\"\nvcpus = {vcpus}\nmem_gib = 1\ndemand = {d}\n"));
                if *pinned {
                    t.push_str("cpus = \"0\"\n");
                }
                if i == 1 {
                    t.push_str("start_s = 3\nstop_s = 9\n");
                }
            }
            t.push_str(&format!("[[case]]\nname = \"c\"\npolicy = \"{pol}\"\n"));
            if pol == "stealscope" {
                t.push_str("planner = { interval_s = 2 }\n");
            }
            t
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn any_scenario_runs_with_percentages_in_range(text in scenario()) {
        let s = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let r = simulate(&s, &seeds(&[1, 2]));
        for c in &r.cases {
            prop_assert!((0.0..=100.0).contains(&c.spread_pp.max));
            for v in &c.vms {
                for x in &v.vcpus {
                    let st = x.steal_pct;
                    prop_assert!(0.0 <= st.min && st.min <= st.mean + 1e-9 && st.mean <= st.max + 1e-9 && st.max <= 100.0, "{x:?}");
                    prop_assert!(x.busy_steal_pct >= -1e-9 && x.idle_steal_pct >= -1e-9, "{x:?}");
                    prop_assert!((x.busy_steal_pct + x.idle_steal_pct - st.mean).abs() < 0.05, "{x:?}");
                    prop_assert!(x.util_pct + st.mean <= 100.05, "{x:?}");
                    prop_assert!(x.throughput_pct <= x.util_pct + 1e-6, "{x:?}");
                    // Work only carries over, never appears: use stays within
                    // demand but for what was left over at the warm-up: a tick,
                    // plus the backlog of a vCPU that was waiting then (bounded
                    // by its steal; a random case of the merged suite ran 0.03
                    // pp past the tick alone at 1.7 % steal).
                    prop_assert!(x.util_pct <= x.demand_pct + 3.0 + st.max, "{x:?}");
                }
            }
        }
    }
}
