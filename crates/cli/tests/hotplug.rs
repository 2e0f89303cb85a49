//! CPU hotplug during sampling, for real (own test binary so no other live
//! test runs while a CPU is offline).

mod common;
use common::*;
use std::time::Duration;

/// Brings a CPU back online even if the test fails half-way.
struct Online(String);
impl Drop for Online {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "1");
    }
}

#[test]
fn cpu_going_offline_mid_sample_is_handled() {
    let ctl = "/sys/devices/system/cpu/cpu1/online";
    let can = is_root() && std::path::Path::new(ctl).exists();
    if !require(
        can,
        "root and a hot-pluggable cpu1 (/sys/devices/system/cpu/cpu1/online)",
    ) {
        return;
    }
    let _guard = Online(ctl.to_string());
    let child = bin()
        .args(["doctor", "--json", "--interval", "3s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(900));
    std::fs::write(ctl, "0").expect("offline cpu1");
    std::thread::sleep(Duration::from_millis(1200));
    std::fs::write(ctl, "1").expect("online cpu1");
    let out = child.wait_with_output().unwrap();
    let report = json(&out);
    assert_valid(&report);
    let notes = report["notes"].to_string();
    assert!(notes.contains("cpu1 went offline"), "{notes}");
    assert!(notes.contains("cpu1 came online"), "{notes}");
    assert!(
        !finding_ids(&report).contains(&"steal.counter-anomaly".to_string()),
        "hotplug is not a counter anomaly"
    );

    // Offline at the end of the interval: cpu1 is dropped from the summary.
    let child = bin()
        .args(["doctor", "--json", "--interval", "2s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    std::fs::write(ctl, "0").expect("offline cpu1");
    let out = child.wait_with_output().unwrap();
    std::fs::write(ctl, "1").expect("online cpu1");
    let report = json(&out);
    let cpus: Vec<u64> = report["summary"]["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cpu"].as_u64().unwrap())
        .collect();
    assert!(
        !cpus.contains(&1),
        "offline CPU has no interval figures: {cpus:?}"
    );
}
