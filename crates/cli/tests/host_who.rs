//! Who stole it, against real QEMU (TCG) VMs from testenv/ and real host
//! busy loops: the two cases of issue 17 (a host shell loop beside a busy
//! 2-vCPU VM; a 2-vCPU and a 1-vCPU VM each in its own autogroup) get the
//! right verdict and fix without a collector, and with the scheduler-event
//! collector the culprit of a pinned vCPU's wait is named (a host loop,
//! another VM's vCPU, both at once at different nice values) against the
//! culprits' own schedstat run times.
//!
//! Timing runs share this machine with other work: each run checks that
//! the other host work stayed small (the report's own host_work, minus what
//! the test started) and retries a few times before giving up; a run
//! rejected for load is printed.

mod common;
use common::place::*;
use common::testenv::*;
use common::who::*;
use common::*;
use serde_json::Value;
use std::process::Command;

/// kernel.sched_autogroup_enabled=1 on this machine.
fn autogroups_on() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .is_ok_and(|v| v.trim() == "1")
}

/// Issue 17, second case: VMs started with -daemonize are each in their own
/// autogroup; weights per vCPU then differ 2x, and where the 2-vCPU VM
/// waits past its fair share the finding names it and the fix is one
/// shared group.
#[test]
fn autogroup_vms_get_cgroup_weight_unfair_with_place_apply() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    if !require(
        autogroups_on(),
        "autogroups enabled (kernel.sched_autogroup_enabled=1)",
    ) {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let a: u64 = testenv("start-vm.sh", &["agA", "2", "--busy", "2"])
        .parse()
        .unwrap();
    let b: u64 = testenv("start-vm.sh", &["agB", "1", "--busy", "1"])
        .parse()
        .unwrap();
    // Both VMs on the same two CPUs, as on the 2-CPU machine.
    for pid in [a, b] {
        let st = Command::new("taskset")
            .args(["-a", "-p", "-c", "0-1", &pid.to_string()])
            .output()
            .unwrap();
        assert!(st.status.success());
    }
    let (ga, gb) = (autogroup_id(a), autogroup_id(b));
    assert_ne!(ga, gb, "each -daemonize is its own session");
    // Judged only when nothing else disturbed the run: the fair share is
    // of the CPUs the host had for these three vCPUs.
    let Some(r) = quiet_run("4s", &[], &[a, b], MAX_OTHER_CPUS, 0.0) else {
        return;
    };
    assert_valid_host(&r);
    let vs = |name: &str, pid: u64| {
        r["vms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name && v["pid"].as_u64() == Some(pid))
            .unwrap()["steal_pct"]
            .as_f64()
            .unwrap()
    };
    let (sa, sb) = (vs("agA", a), vs("agB", b));
    eprintln!("quiet run: agA steal {sa:.1}%, agB {sb:.1}%");
    // Three busy vCPUs want the same CPU each, so their fair steal is one
    // figure f and the steal over it sums to zero: 2 (sa - f) + (sb - f)
    // = 0, so agA is past fair by (sa - sb) / 3. The finding fires from
    // 5 pp (host_groups.rs STEAL_MARGIN_PP); near it either way is noise.
    let past = (sa - sb) / 3.0;
    let f = finding(&r, "host.cgroup-weight-unfair");
    if past < 4.0 {
        assert!(f.is_none(), "agA only {past:.1} pp past fair: {f:?}");
        return;
    }
    if past < 6.0 {
        return;
    }
    let f = f.unwrap_or_else(|| {
        // What the kernel said of the VMs' groups, beside the findings.
        let read = |pid: u64, file: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default()
        };
        panic!(
            "no host.cgroup-weight-unfair ({past:.1} pp past fair); autogroups agA {} agB {}; cgroups agA {} agB {}; findings {}",
            read(a, "autogroup").trim(),
            read(b, "autogroup").trim(),
            read(a, "cgroup").replace('\n', " "),
            read(b, "cgroup").replace('\n', " "),
            r["findings"]
        )
    });
    let groups = f["evidence"]["groups"].as_array().unwrap();
    for (name, g, n) in [("agA", &ga, 2), ("agB", &gb, 1)] {
        let e = groups
            .iter()
            .find(|x| x["vm"] == name)
            .unwrap_or_else(|| panic!("{name} not in {groups:?}"));
        assert_eq!(&e["group"], g, "{name}: /proc/<pid>/autogroup says {g}");
        assert_eq!(e["autogroup"], true);
        assert_eq!(e["vcpus"], n);
    }
    assert!(
        f["remedy"]
            .as_str()
            .unwrap()
            .contains("stealscope place apply"),
        "{f}"
    );
    let title = f["title"].as_str().unwrap();
    assert!(title.contains("autogroups"), "{f}");
    assert!(
        title.starts_with("VM agA gets less than its fair CPU"),
        "{title}"
    );
}

/// Mean run of `a`'s vCPUs over that of `b`'s (each per vCPU), from
/// schedstat over `span`.
fn run_ratio(a: (u64, &[u64]), b: (u64, &[u64]), span: std::time::Duration) -> f64 {
    let read = |(pid, tids): (u64, &[u64])| -> Vec<u64> {
        tids.iter().map(|t| schedstat(pid, *t).0).collect()
    };
    let (a0, b0) = (read(a), read(b));
    std::thread::sleep(span);
    let (a1, b1) = (read(a), read(b));
    let per = |x: Vec<u64>, y: Vec<u64>| {
        let n = x.len() as f64;
        x.iter().zip(&y).map(|(p, q)| (q - p) as f64).sum::<f64>() / n
    };
    per(a0, a1) / per(b0, b1)
}

fn pin_all(pid: u64, cpus: &str) {
    let st = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .output()
        .unwrap();
    assert!(st.status.success());
}

fn autogroup_nice(pid: u64) -> i32 {
    let t = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).unwrap();
    t.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Issue 27: fairness on a host whose VMs are autogroups. All three busy
/// vCPUs of a 2-vCPU and a 1-vCPU VM on CPU 0, so the split is the
/// kernel's weight arithmetic alone: per vCPU, the 2-vCPU VM's get
/// w_A / 2 against w_B. `place apply` with `fairness = "weights"` sets A's
/// autogroup to the nice nearest 2 x 1024 (-3: 1991) and leaves B's
/// (1 vCPU: nice 0 already); the run ratio then follows the new weights,
/// and `place undo` gives the nice back.
#[test]
fn place_weighs_autogroup_vms_through_their_nice_and_undo_gives_it_back() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)")
        || !require(
            autogroups_on(),
            "autogroups enabled (kernel.sched_autogroup_enabled=1)",
        )
    {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let tag = std::process::id();
    let (na, nb) = (format!("agwA{tag}"), format!("agwB{tag}"));
    let a: u64 = testenv("start-vm.sh", &[&na, "2", "--busy", "2"])
        .parse()
        .unwrap();
    let b: u64 = testenv("start-vm.sh", &[&nb, "1", "--busy", "1"])
        .parse()
        .unwrap();
    let (ta, tb) = (qmp_tids(&na), qmp_tids(&nb));
    let ratio = || {
        for pid in [a, b] {
            pin_all(pid, "0");
        }
        run_ratio((a, &ta), (b, &tb), std::time::Duration::from_secs(3))
    };
    let w = |n: i32| stealscope_readers::autogroup::nice_weight(n);
    let expect = |na: i32, nb: i32| w(na) / 2.0 / w(nb);
    assert_eq!((autogroup_nice(a), autogroup_nice(b)), (0, 0));
    let before = ratio();
    eprintln!(
        "before: run per vCPU A/B {before:.2} (weights say {:.2})",
        expect(0, 0)
    );
    assert!((before - expect(0, 0)).abs() < 0.15, "before {before:.2}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("place.toml");
    std::fs::write(
        &cfg,
        format!("manage = [\"{na}\", \"{nb}\"]\nfairness = \"weights\"\n{NO_MARGIN}"),
    )
    .unwrap();
    let journal = dir.path().join("place.journal");
    // The whole plan (--force): which part of it is offered turns on the
    // prediction's noise (without it, 2 of 5 runs here applied the
    // affinity changes alone); that choice is sim::choose's test, the nice
    // and its effect this one's.
    let out = place(
        &[
            "apply",
            "--yes",
            "--force",
            "--watch",
            "0s",
            "--interval",
            "2s",
        ],
        &cfg,
        &journal,
    );
    assert_ok(&out);
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let nices: Vec<Value> = journal_lines(&journal)
        .into_iter()
        .filter(|l| l["action"]["kind"] == "autogroup_nice")
        .collect();
    assert!(!nices.is_empty(), "no autogroup nice journaled:\n{said}");
    assert!(
        nices.iter().all(|l| l["action"]["pid"] == a),
        "only A's: {nices:?}"
    );
    assert_eq!((autogroup_nice(a), autogroup_nice(b)), (-3, 0), "{said}");
    let after = ratio();
    eprintln!(
        "after: run per vCPU A/B {after:.2} (weights say {:.2})",
        expect(-3, 0)
    );
    assert!(
        (after - expect(-3, 0)).abs() < 0.15,
        "after {after:.2}\n{said}"
    );

    assert_ok(&place(&["undo", "--yes"], &cfg, &journal));
    assert_eq!((autogroup_nice(a), autogroup_nice(b)), (0, 0));
    assert_journal_consistent(&journal);
}

fn assert_valid_host(r: &Value) {
    assert_eq!(r["schema"], "stealscope/host/1");
    assert!(
        r["attribution"]["route"].is_string(),
        "{}",
        r["attribution"]
    );
}

/// Issue 17, first case: a busy 2-vCPU VM and a host shell loop on two CPUs.
/// The VMs alone fit; the verdict names the loop and the fix is about it.
#[test]
fn host_loop_beside_a_busy_vm_is_named_not_oversubscription() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let pid: u64 = testenv("start-vm.sh", &["hlA", "2", "--busy", "2"])
        .parse()
        .unwrap();
    let st = Command::new("taskset")
        .args(["-a", "-p", "-c", "0-1", &pid.to_string()])
        .output()
        .unwrap();
    assert!(st.status.success());
    let hog = Hog::start("whohog", 0, Some("0-1"));
    let Some(r) = quiet_run("4s", &[hog.pid()], &[pid], MAX_OTHER_CPUS_NAMING, 0.5) else {
        return;
    };
    let busy = finding(&r, "host.steal.busy")
        .unwrap_or_else(|| panic!("no host.steal.busy: {}", r["findings"]));
    let title = busy["title"].as_str().unwrap();
    assert!(title.contains("the VMs alone fit"), "{title}");
    assert!(
        title.contains(&format!("whohog (pid {})", hog.pid())),
        "{title}"
    );
    let remedy = busy["remedy"].as_str().unwrap();
    assert!(!remedy.contains("Only moving VMs"), "{remedy}");
    // With autogroups on, the loop's session weighs as much as the VM's:
    // the host's structure gives it a whole CPU against a fair 2/3 (three
    // runnable threads on two CPUs), whatever one sample gave it, so it is
    // the noisy neighbour by structure. With them off every thread weighs
    // alike: it is one only when it ran well over its fair share.
    let ran = r["host_work"]["top"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["pid"] == hog.pid())
        .map_or(0.0, |w| w["run_cpus"].as_f64().unwrap());
    let nn = finding(&r, "host.noisy-neighbor");
    eprintln!(
        "loop ran {ran:.2} CPU; noisy-neighbor: {:?}",
        nn.map(|f| &f["title"])
    );
    if autogroups_on() {
        let nn = nn.unwrap_or_else(|| panic!("no host.noisy-neighbor: {}", r["findings"]));
        let e = &nn["evidence"];
        assert_eq!(e["over"], "structure", "{nn}");
        assert_eq!(e["culprit"]["name"], "whohog", "{nn}");
        assert_eq!(e["culprit"]["pid"], hog.pid(), "{nn}");
        let (exp, fair) = (
            e["expected_cpus"].as_f64().unwrap(),
            e["fair_cpus"].as_f64().unwrap(),
        );
        assert!(
            exp >= e["threshold_fair_excess"].as_f64().unwrap() * fair,
            "{nn}"
        );
        // The weight command that acts here: the session's nice (renice
        // does not act across sessions).
        let cmd = format!("echo 10 > /proc/{}/autogroup", hog.pid());
        assert!(nn["remedy"].as_str().unwrap().contains(&cmd), "{nn}");
    } else if ran < 0.8 {
        assert!(nn.is_none(), "the loop near its fair share: {nn:?}");
    }
    // The verdict's fix starts with the loop (host.steal.busy's or, when
    // it fires, host.noisy-neighbor's).
    let fix = r["verdict"]["fix"].as_str().unwrap_or_default();
    assert!(
        fix.starts_with(&format!("host process `whohog` (pid {}) ", hog.pid())),
        "{fix}"
    );
    // The loop's run time in the report against its own schedstat is the
    // whole-CPU share a shell loop takes: at least a third of a CPU here.
    let w = r["host_work"]["top"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["pid"] == hog.pid())
        .unwrap();
    assert!(w["run_cpus"].as_f64().unwrap() > 0.33, "{w}");
}

/// CPU the loop ran over `secs` (its own schedstat), after `settle` s, and
/// the CPU everything but the loop and the VM took meanwhile (/proc/stat):
/// a window with more than a quarter CPU of other work is measured again,
/// and under CI one that never is fails.
fn loop_cpus(hog: u32, vm: u64, settle: f64, secs: f64) -> f64 {
    std::thread::sleep(std::time::Duration::from_secs_f64(settle));
    for _ in 0..6 {
        let (r0, v0, b0, t0) = (
            schedstat(u64::from(hog), u64::from(hog)).0,
            process_run_ns(vm),
            cpu_busy(),
            boottime(),
        );
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        let wall = boottime() - t0;
        let b1 = cpu_busy();
        let hog_cpus = (schedstat(u64::from(hog), u64::from(hog)).0 - r0) as f64 / 1e9 / wall;
        let vm_cpus = (process_run_ns(vm) - v0) as f64 / 1e9 / wall;
        let busy = (b1.0 - b0.0) / (b1.1 - b0.1) * ncpus();
        let other = busy - hog_cpus - vm_cpus;
        if other <= 0.25 {
            return hog_cpus;
        }
        eprintln!(
            "window rejected: other work {other:.2} CPUs (loop {hog_cpus:.2}, VM {vm_cpus:.2})"
        );
    }
    skip("every window was disturbed by other work");
    f64::NAN
}

/// The weight command the report gives for a host loop beside a busy VM
/// acts on this host: with autogroups on, `renice` leaves the loop's CPU
/// where it was (its nice orders it only inside its own session) and the
/// report's `echo 10 > /proc/PID/autogroup` cuts it (its session's weight
/// falls from 1024 to 110). Truth is the loop's own schedstat.
#[test]
fn the_weight_fix_for_a_host_loop_acts_on_this_host() {
    if !require(have_qemu(), "root and qemu (run testenv/setup.sh)") {
        return;
    }
    if !require(
        autogroups_on(),
        "autogroups enabled (kernel.sched_autogroup_enabled=1)",
    ) {
        return;
    }
    let _turn = serial();
    let _vms = Vms;
    let pid: u64 = testenv("start-vm.sh", &["wfA", "2", "--busy", "2"])
        .parse()
        .unwrap();
    let st = Command::new("taskset")
        .args(["-a", "-p", "-c", "0-1", &pid.to_string()])
        .output()
        .unwrap();
    assert!(st.status.success());
    let hog = Hog::in_own_session("wfhog", "0-1");
    let Some(r) = quiet_run("4s", &[hog.pid()], &[pid], MAX_OTHER_CPUS_NAMING, 0.3) else {
        return;
    };
    let cmd = format!("echo 10 > /proc/{}/autogroup", hog.pid());
    let said: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["remedy"].as_str())
        .filter(|t| t.contains(&cmd))
        .collect();
    assert!(
        !said.is_empty(),
        "no finding gives `{cmd}`: {}",
        r["findings"]
    );
    assert!(
        said.iter().all(|t| !t.contains("renice -n")),
        "a fix still says renice: {said:?}"
    );
    let base = loop_cpus(hog.pid(), pid, 0.0, 3.0);
    let st = Command::new("renice")
        .args(["-n", "10", "-p", &hog.pid().to_string()])
        .output()
        .unwrap();
    assert!(st.status.success());
    let reniced = loop_cpus(hog.pid(), pid, 0.5, 3.0);
    let st = Command::new("sh").args(["-c", &cmd]).output().unwrap();
    assert!(st.status.success(), "{cmd}: {st:?}");
    let session = loop_cpus(hog.pid(), pid, 0.5, 3.0);
    eprintln!(
        "loop ran {base:.2} CPU, {reniced:.2} after renice -n 10, {session:.2} after `{cmd}`"
    );
    if [base, reniced, session].iter().any(|x| x.is_nan()) {
        // Each NaN was already skipped (a failure under CI).
        return;
    }
    assert!(
        reniced >= 0.7 * base,
        "renice cut the loop from {base:.2} to {reniced:.2} CPU: autogroups not in effect?"
    );
    assert!(
        session <= 0.5 * base.min(reniced),
        "the report's fix left the loop at {session:.2} CPU (was {base:.2}, {reniced:.2})"
    );
}
