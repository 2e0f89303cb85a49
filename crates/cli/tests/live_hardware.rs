//! Hardware evidence on this machine: CPUID read for real and shown in
//! doctor, every counter either measured or missing with one line saying
//! why, exit 0. Expectations come from the machine: /proc/cpuinfo, the
//! kernel log, the CPUID instruction executed here, the PMUs in sysfs and a
//! raw perf_event_open; the TSC rate from rdtsc against CLOCK_MONOTONIC.

mod common;
use common::*;
use serde_json::Value;

const COUNTERS: [(&str, &str); 7] = [
    ("cycles", "hw"),
    ("instructions", "hw"),
    ("cache-references", "hw"),
    ("cache-misses", "hw"),
    ("msr/aperf/", "aperf"),
    ("msr/mperf/", "mperf"),
    ("msr/smi/", "smi"),
];

fn msr_events() -> Vec<String> {
    std::fs::read_dir("/sys/bus/event_source/devices/msr/events")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(target_arch = "x86_64")]
fn cpuid(leaf: u32) -> [u32; 4] {
    #[allow(unused_unsafe)]
    let r = unsafe { core::arch::x86_64::__cpuid(leaf) };
    [r.eax, r.ebx, r.ecx, r.edx]
}

/// TSC MHz over 300 ms of CLOCK_MONOTONIC.
#[cfg(target_arch = "x86_64")]
fn tsc_mhz() -> f64 {
    let t0 = std::time::Instant::now();
    let a = unsafe { core::arch::x86_64::_rdtsc() };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let b = unsafe { core::arch::x86_64::_rdtsc() };
    (b - a) as f64 / t0.elapsed().as_secs_f64() / 1e6
}

#[test]
fn doctor_shows_cpuid_and_accounts_for_every_counter() {
    if !require(
        is_root(),
        "root (per-CPU perf events need CAP_PERFMON or root)",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let snap = tmp.path().join("hw");
    let out = run(&[
        "doctor",
        "--json",
        "--interval",
        "2s",
        "--save-snapshot",
        snap.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let report = json(&out);
    assert_valid(&report);
    let hw = &report["hardware"];
    let notes: Vec<String> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    assert!(snap.join("cpuid.json").is_file() && snap.join("counters.json").is_file());

    // CPUID against /proc/cpuinfo and the CPUID instruction run here.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags"))
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let c = &hw["cpuid"];
    if cfg!(target_arch = "x86_64") {
        assert_eq!(
            c["hypervisor_bit"],
            Value::from(flags.contains(&"hypervisor"))
        );
        assert_eq!(c["aperfmperf"], Value::from(flags.contains(&"aperfmperf")));
    } else {
        assert!(notes.iter().any(|n| n.contains("not x86")), "{notes:?}");
    }
    #[cfg(target_arch = "x86_64")]
    {
        let kvm_base = (0x4000_0000u32..=0x4000_ff00).step_by(0x100).find(|b| {
            let r = cpuid(*b);
            let mut s = Vec::new();
            for w in &r[1..] {
                s.extend_from_slice(&w.to_le_bytes());
            }
            s == b"KVMKVMKVM\0\0\0"
        });
        let dmesg = std::process::Command::new("dmesg").output().ok();
        let log = dmesg
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        match kvm_base.filter(|_| flags.contains(&"hypervisor")) {
            None => assert!(c["kvm"].is_null(), "{c}"),
            Some(base) => {
                let f = cpuid(base + 1);
                let k = &c["kvm"];
                assert_eq!(k["base"], format!("{base:#x}"));
                assert_eq!(k["features_eax"], format!("{:#x}", f[0]));
                assert_eq!(k["hints_edx"], format!("{:#x}", f[3]));
                assert_eq!(k["realtime_hint"], Value::from(f[3] & 1 != 0));
                assert_eq!(k["poll_control"], Value::from(f[0] & (1 << 12) != 0));
                // The guest kernel read the same bits at boot and said so.
                let features: Vec<&str> = k["features"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                for (line, bit) in [
                    (
                        "kvm-guest: setup PV sched yield",
                        "KVM_FEATURE_PV_SCHED_YIELD",
                    ),
                    ("kvm-guest: setup PV IPIs", "KVM_FEATURE_PV_SEND_IPI"),
                    ("KVM setup pv remote TLB flush", "KVM_FEATURE_PV_TLB_FLUSH"),
                ] {
                    if log.contains(line) {
                        assert!(features.contains(&bit), "{line} but no {bit}: {features:?}");
                    }
                }
                let text = run(&["doctor", "--snapshot", snap.to_str().unwrap()]);
                let t = String::from_utf8_lossy(&text.stdout);
                assert!(
                    t.contains(&format!("KVM at {base:#x}")) && t.contains("KVM features:"),
                    "{t}"
                );
            }
        }
    }

    // Counters: what sysfs lists and a raw open allows is measured; the rest
    // is one note line each, naming the counter.
    let counters = &hw["counters"];
    let opened: Vec<&str> = counters["opened"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let pmu = perf_raw::hardware_pmu_opens();
    let msr = msr_events();
    for (name, kind) in COUNTERS {
        let expect = if kind == "hw" {
            pmu
        } else {
            msr.iter().any(|e| e == kind)
        };
        assert_eq!(opened.contains(&name), expect, "{name}: opened {opened:?}");
        let lines: Vec<&String> = notes
            .iter()
            .filter(|n| n.starts_with(&format!("{name} not available")))
            .collect();
        assert_eq!(
            lines.len(),
            usize::from(!expect),
            "{name}: one note when missing: {notes:?}"
        );
        if let Some(l) = lines.first() {
            assert!(!l.contains('\n') && l.contains(": "), "{l}");
        }
    }
    // The TSC through the msr PMU runs at the rate rdtsc shows.
    #[cfg(target_arch = "x86_64")]
    if msr.iter().any(|e| e == "tsc") {
        let want = tsc_mhz();
        let cpus = counters["cpus"].as_array().unwrap();
        assert!(!cpus.is_empty());
        for cpu in cpus {
            let got = cpu["tsc_mhz"].as_f64().expect("tsc_mhz");
            assert!(
                (got - want).abs() <= 0.02 * want,
                "cpu {}: msr/tsc/ {got:.1} MHz vs rdtsc {want:.1} MHz",
                cpu["cpu"]
            );
        }
    }
    if pmu {
        let cpus = counters["cpus"].as_array().unwrap();
        assert!(cpus
            .iter()
            .any(|c| c["ipc"].as_f64().is_some_and(|v| v > 0.0)));
    }
}
