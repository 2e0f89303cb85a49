//! `host` and `place` against a real libvirtd (testenv/libvirt.sh: daemons
//! started without systemd, a transient TCG domain booting the testenv
//! kernel). The domain is found by name with libvirt as its manager; the plan
//! goes through virsh; apply leaves every thread with its planned CPUs and
//! libvirt's view (virsh vcpupin/emulatorpin/schedinfo, the domain XML's
//! cputune) says the same; undo restores both; a domain destroyed (and
//! re-created under its name) between plan and apply is left alone.

mod common;
use common::libvirt::{have_libvirt, Libvirt};
use common::place::*;
use common::testenv;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// What libvirt says of a domain's placement.
#[derive(Debug, Clone, PartialEq)]
struct View {
    /// `virsh vcpupin DOMAIN`: vCPU -> CPUs.
    vcpus: BTreeMap<u32, Vec<u32>>,
    /// `virsh emulatorpin DOMAIN`.
    emulator: Vec<u32>,
    /// `virsh schedinfo DOMAIN` cpu_shares.
    shares: u64,
    /// The live domain XML's <cputune>, entries that are absent filled
    /// with what libvirt applies then (the three above).
    xml: Tune,
}

/// vCPU pins, emulator pin, cpu_shares.
type Tune = (BTreeMap<u32, Vec<u32>>, Vec<u32>, u64);

fn view(lv: &Libvirt, dom: &str) -> View {
    let vcpus: BTreeMap<u32, Vec<u32>> = lv
        .virsh(&["vcpupin", dom])
        .lines()
        .filter_map(|l| {
            let (i, cpus) = l.trim().split_once(char::is_whitespace)?;
            Some((i.parse().ok()?, cpulist(cpus)))
        })
        .collect();
    let emulator = lv
        .virsh(&["emulatorpin", dom])
        .lines()
        .find_map(|l| l.trim().strip_prefix("*:").map(cpulist))
        .expect("virsh emulatorpin: a `*:` line");
    let shares = lv
        .virsh(&["schedinfo", dom])
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "cpu_shares").then(|| v.trim().parse().unwrap())
        })
        .expect("virsh schedinfo: cpu_shares");
    let mut v = View {
        vcpus,
        emulator,
        shares,
        xml: Default::default(),
    };
    v.xml = cputune(&lv.virsh(&["dumpxml", dom]), &v);
    v
}

/// <cputune> of a domain XML; what it leaves out is taken from `live`.
fn cputune(xml: &str, live: &View) -> Tune {
    let attr = |l: &str, name: &str| {
        l.split(&format!("{name}='"))
            .nth(1)
            .and_then(|r| r.split('\'').next())
            .map(str::to_string)
    };
    let (mut vcpus, mut emulator, mut shares) =
        (live.vcpus.clone(), live.emulator.clone(), live.shares);
    for l in xml.lines().map(str::trim) {
        if l.starts_with("<vcpupin ") {
            let i = attr(l, "vcpu").unwrap().parse().unwrap();
            vcpus.insert(i, cpulist(&attr(l, "cpuset").unwrap()));
        } else if l.starts_with("<emulatorpin ") {
            emulator = cpulist(&attr(l, "cpuset").unwrap());
        } else if let Some(v) = l.strip_prefix("<shares>") {
            shares = v.trim_end_matches("</shares>").parse().unwrap();
        }
    }
    (vcpus, emulator, shares)
}

/// The persistent definition's <cputune> (`dumpxml --inactive`).
fn inactive_cputune(lv: &Libvirt, dom: &str, live: &View) -> Tune {
    cputune(&lv.virsh(&["dumpxml", dom, "--inactive"]), live)
}

/// vCPU index -> thread id, from libvirt's own monitor connection.
fn libvirt_vcpu_tids(lv: &Libvirt, dom: &str) -> BTreeMap<u64, u64> {
    let r: Value = serde_json::from_str(&lv.virsh(&[
        "qemu-monitor-command",
        dom,
        r#"{"execute":"query-cpus-fast"}"#,
    ]))
    .unwrap();
    testenv::vcpu_threads(&r["return"]).into_iter().collect()
}

fn online_cpus() -> Vec<u32> {
    cpulist(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap())
}

/// The domain's machine group in the v1 cpu hierarchy: the cpu line of
/// /proc/<pid>/cgroup without libvirt's /emulator.
fn machine_group(pid: u64) -> String {
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let p = cg
        .lines()
        .find_map(|l| l.split_once(":cpu:").map(|(_, p)| p.to_string()))
        .expect("a v1 cpu line");
    let p = p
        .strip_suffix("/emulator")
        .expect("libvirt's emulator group");
    format!("/sys/fs/cgroup/cpu{p}")
}

/// The same group in the v1 cpuset hierarchy.
fn cpuset_group(pid: u64) -> String {
    format!(
        "/sys/fs/cgroup/cpuset{}",
        machine_group(pid).trim_start_matches("/sys/fs/cgroup/cpu")
    )
}

fn results(r: &Value) -> &Vec<Value> {
    r["results"].as_array().unwrap()
}

#[test]
fn place_on_a_real_libvirt_domain() {
    let have = have_libvirt()
        && Path::new("/sys/fs/cgroup/cpu/cgroup.procs").exists()
        && online_cpus().len() >= 2;
    if !require(
        have,
        "root, qemu-system-x86_64, libvirt (libvirtd, virtlogd, virsh), a v1 cpu cgroup and 2 CPUs",
    ) {
        return;
    }
    let lv = match Libvirt::start() {
        Ok(lv) => lv,
        Err(e) => {
            require(false, &format!("libvirt starts: {e}"));
            return;
        }
    };
    let dom = format!("lvPl{}", std::process::id());
    let pid = lv.create(&dom, 2, 2);
    let xml = format!("{}/{dom}/domain.xml", testenv::run_dir());
    let serial =
        std::fs::read_to_string(format!("{}/{dom}/serial.log", testenv::run_dir())).unwrap();
    assert!(
        serial.contains("stealscope-guest: 2 cpus, busy=2"),
        "the guest runs both vCPUs: {serial}"
    );
    let online = online_cpus();
    let dir = tempfile::tempdir().unwrap();
    let (cfg, journal) = (dir.path().join("place.toml"), dir.path().join("journal"));
    // Emulator threads on the first CPU, vCPUs on the rest: every kind of
    // libvirt knob (vcpupin, emulatorpin, schedinfo) has something to do.
    std::fs::write(
        &cfg,
        format!(
            "manage = [\"{dom}\"]\nhousekeeping_cpus = \"{}\"\nfairness = \"weights\"\n{WHOLE_PLAN}",
            online[0]
        ),
    )
    .unwrap();
    let place = |args: &[&str]| {
        place_cmd(args, &cfg, &journal)
            .env("LIBVIRT_DEFAULT_URI", &lv.uri)
            .output()
            .unwrap()
    };

    // 1. host: the domain by name, managed by libvirt, its vCPU threads as
    // libvirt's monitor names them (and its per-vCPU cgroups hold them).
    let host = json(&run(&[
        "host",
        "--json",
        "--interval",
        "1s",
        "--exit-sample",
        "0",
    ]));
    let vm = host["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["pid"] == pid)
        .unwrap_or_else(|| panic!("domain pid {pid} in {host}"));
    assert_eq!(vm["name"], dom.as_str());
    assert_eq!(vm["manager"], "libvirt");
    assert_eq!(vm["kind"], "qemu-tcg");
    let tids = libvirt_vcpu_tids(&lv, &dom);
    let found: BTreeMap<u64, u64> = vm["vcpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["index"].as_u64().unwrap(), c["tid"].as_u64().unwrap()))
        .collect();
    assert_eq!(found, tids);
    for (i, tid) in &tids {
        let cg = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/cgroup")).unwrap();
        assert!(cg.contains(&format!(".libvirt-qemu/vcpu{i}\n")), "{cg}");
    }

    // 2. A known placement set through libvirt, with a pin of vCPU 0 so
    // undo has something exact to restore. A CPU hotplug elsewhere on the
    // machine (other tests) shrinks v1 cpusets for good: the partition and
    // the domain's group get every online CPU back first.
    let all = stealscope_readers::cpulist::format(&online);
    let cs = cpuset_group(pid);
    for g in ["/sys/fs/cgroup/cpuset/machine", cs.as_str()] {
        std::fs::write(format!("{g}/cpuset.cpus"), &all).unwrap();
    }
    lv.virsh(&["vcpupin", &dom, "0", &online[0].to_string(), "--live"]);
    lv.virsh(&["vcpupin", &dom, "1", &all, "--live"]);
    lv.virsh(&["emulatorpin", &dom, &all, "--live"]);
    let masks_before = masks(&[pid]);
    let view_before = view(&lv, &dom);
    assert_eq!(view_before.vcpus[&0], vec![online[0]]);

    // 3. plan: every action through virsh on this domain.
    let plan = json(&place(&["plan", "--json", "--interval", "1s"]));
    let actions = plan["actions"].as_array().unwrap();
    assert!(
        actions
            .iter()
            .all(|a| a["via"]["owner"] == "libvirt" && a["via"]["domain"] == dom.as_str()),
        "{plan}"
    );
    let pins = |vcpu: bool| {
        actions
            .iter()
            .filter(|a| a["kind"] == "affinity" && a["vcpu"].is_u64() == vcpu)
            .count()
    };
    assert!(pins(true) >= 1 && pins(false) >= 1, "{plan}");
    let weight = actions
        .iter()
        .find(|a| a["kind"] == "cpu_weight")
        .unwrap_or_else(|| panic!("weights for a libvirt VM: {plan}"));
    // libvirt sets cpu_shares on the machine group, not on its emulator group.
    assert_eq!(weight["group"]["dir"], machine_group(pid).as_str());
    assert_eq!(weight["value"], 2 * 1024, "2 vCPUs x the default 1024");
    let want = planned(&plan);
    let pv = &plan["vms"][0];
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, serde_json::to_vec(&plan).unwrap()).unwrap();
    let apply_plan = |more: &[&str]| {
        // Mechanics, not policy: the prediction and the watchdog have their
        // own tests (place_safe.rs).
        let mut a = vec![
            "apply",
            "--yes",
            "--force",
            "--watch",
            "0s",
            "--plan",
            plan_file.to_str().unwrap(),
        ];
        a.extend_from_slice(more);
        place(&a)
    };

    // 3b. The domain's cpuset without the planned CPUs, as a CPU hotplug
    // leaves it on cgroup v1 (children first, the kernel wants subsets):
    // refused with the reason, nothing changed, no batch.
    let sub: Vec<String> = std::fs::read_dir(&cs)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().join("cpuset.cpus")).filter(|p| p.exists()))
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    let saved: Vec<(String, String)> = sub
        .iter()
        .chain([&format!("{cs}/cpuset.cpus")])
        .map(|f| (f.clone(), std::fs::read_to_string(f).unwrap()))
        .collect();
    for (f, _) in &saved {
        std::fs::write(f, online[0].to_string()).unwrap();
    }
    let shrunk = (masks(&[pid]), view(&lv, &dom));
    let batches = journal_lines(&journal).len();
    let out = apply_plan(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not in the domain's cpuset") && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!((masks(&[pid]), view(&lv, &dom)), shrunk);
    assert_eq!(
        journal_lines(&journal).len(),
        batches,
        "no batch for a refused plan"
    );
    for (f, v) in saved.iter().rev() {
        std::fs::write(f, v.trim()).unwrap();
    }
    assert_eq!(masks(&[pid]), masks_before);

    // 4. apply: the kernel's masks and libvirt's view both as planned.
    let r = json(&apply_plan(&["--json"]));
    assert!(
        results(&r)
            .iter()
            .all(|x| x["outcome"] == "done" || x["outcome"] == "already"),
        "{r}"
    );
    for ((p, tid), cpus) in &want {
        assert_eq!(mask(*p, *tid).as_ref(), Some(cpus), "thread {tid}");
    }
    let applied = view(&lv, &dom);
    let v = applied.clone();
    let planned_vcpus: BTreeMap<u32, Vec<u32>> = pv["vcpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t[0].as_u64().unwrap() as u32, cpulist_of(&t[2])))
        .collect();
    let planned_emu = cpulist_of(&pv["other_cpus"]);
    let shares = weight["value"].as_u64().unwrap();
    assert_eq!(v.vcpus, planned_vcpus);
    assert_eq!(v.emulator, planned_emu);
    assert_eq!(v.shares, shares);
    assert_eq!(v.xml, (planned_vcpus, planned_emu, shares), "domain XML");
    let cg = std::fs::read_to_string(format!("{}/cpu.shares", machine_group(pid))).unwrap();
    assert_eq!(cg.trim(), shares.to_string());

    // 5. undo: the exact previous masks and libvirt's view.
    let u = json(&place(&["undo", "--yes", "--json"]));
    assert!(results(&u).iter().all(|x| x["outcome"] == "done"), "{u}");
    assert_eq!(masks(&[pid]), masks_before, "undo restores the exact masks");
    assert_eq!(view(&lv, &dom), view_before, "undo restores libvirt's view");
    assert_journal_consistent(&journal);

    // 6. The same domain made persistent (virsh define of its live XML): now
    // the persistent XML changes with the live one (--config), so a restart
    // keeps the placement; undo restores both.
    let live_xml = dir.path().join("live.xml");
    std::fs::write(&live_xml, lv.virsh(&["dumpxml", &dom])).unwrap();
    lv.virsh(&["define", live_xml.to_str().unwrap()]);
    assert!(lv.virsh(&["dominfo", &dom]).contains("Persistent:     yes"));
    lv.virsh(&[
        "vcpupin",
        &dom,
        "0",
        &online[0].to_string(),
        "--live",
        "--config",
    ]);
    let before = (masks(&[pid]), view(&lv, &dom));
    let r = json(&apply_plan(&["--json"]));
    assert!(results(&r).iter().any(|x| x["outcome"] == "done"), "{r}");
    assert_eq!(view(&lv, &dom), applied, "live view as planned");
    assert_eq!(
        inactive_cputune(&lv, &dom, &applied),
        applied.xml,
        "persistent XML as planned"
    );
    json(&place(&["undo", "--yes", "--json"]));
    let after = (masks(&[pid]), view(&lv, &dom));
    assert_eq!(after, before, "undo restores a persistent domain too");
    assert_eq!(
        inactive_cputune(&lv, &dom, &after.1),
        after.1.xml,
        "persistent XML restored"
    );
    assert_journal_consistent(&journal);

    // 7. The domain destroyed and created again under its name between plan
    // and apply: the plan's actions are gone (virsh would reach the new
    // domain by name), nothing changes, the journal stays consistent.
    let plan = place(&["plan", "--json", "--interval", "1s"]);
    std::fs::write(&plan_file, &plan.stdout).unwrap();
    assert!(!json(&plan)["actions"].as_array().unwrap().is_empty());
    lv.destroy(&dom);
    lv.virsh(&["create", &xml]);
    let pid2: u64 = std::fs::read_to_string(format!("/run/libvirt/qemu/{dom}.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(pid2, pid);
    let fresh = (masks(&[pid2]), view(&lv, &dom));
    let out = apply_plan(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("gone: {dom} (pid {pid}) is no longer running"))
            && text.contains("0 done before it went"),
        "{text}"
    );
    assert_eq!(
        (masks(&[pid2]), view(&lv, &dom)),
        fresh,
        "the new domain untouched"
    );
    let recs = journal_lines(&journal);
    let last = recs.iter().rev().find(|r| r["type"] == "batch").unwrap()["batch"].clone();
    assert!(
        !recs
            .iter()
            .any(|r| r["type"] == "begin" && r["batch"] == last),
        "nothing begun for a destroyed domain"
    );
    assert_journal_consistent(&journal);
}

fn cpulist_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap() as u32)
        .collect()
}
