//! `stealscope sim` end to end: a scenario from the repo gives a report in
//! text and JSON; a malformed one exits 2 with one line naming the file,
//! line and key.

mod common;
use common::{assert_ok, repo, run};

#[test]
fn sim_reports_every_case_in_text_and_json() {
    let scenario = repo().join("scenarios/calibration-2cpu.toml");
    let s = scenario.to_str().unwrap();
    let out = run(&["sim", s, "--seed", "1", "--json"]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "stealscope/sim/1");
    let text = std::fs::read_to_string(repo().join("schemas/sim.schema.json")).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&v)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
    let cases: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // Every case of the file, in its order (as the simulator's loader reads it).
    let want: Vec<String> = stealscope_sim::Scenario::load(&scenario)
        .unwrap()
        .cases
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert!(want.len() >= 3, "{want:?}");
    assert_eq!(cases, want);
    for c in v["cases"].as_array().unwrap() {
        let vcpus: usize = c["vms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|vm| vm["vcpus"].as_array().unwrap().len())
            .sum();
        assert_eq!(vcpus, 4, "A has 2 vCPUs, B and C one each");
    }
    let text = run(&["sim", s, "--seed", "1", "--policy", "none"]);
    assert!(text.status.success());
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(
        t.contains("equal (policy none") && !t.contains("shared-group ("),
        "{t}"
    );
}

#[test]
fn fleet_report_in_json() {
    let scenario = repo().join("scenarios/fleet.toml");
    let out = run(&[
        "sim",
        scenario.to_str().unwrap(),
        "--hosts",
        "2",
        "--policy",
        "none",
        "--json",
    ]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["fleet"]["hosts"], 2);
    assert_eq!(v["fleet"]["cases"][0]["name"], "none");
    assert!(v["fleet"]["cases"][0]["vms"].as_u64().unwrap() >= 2 * 12 / 2);
    assert!(
        v["cases"].as_array().unwrap().is_empty(),
        "a fleet-only scenario has no single-host cases"
    );
}

/// `--every-tick` simulates each tick of each host (the policy
/// comparison's exact mode): every tick counted is then a tick simulated,
/// while the default sums steady stretches.
#[test]
fn every_tick_simulates_every_tick_of_the_fleet() {
    let scenario = repo().join("scenarios/fleet.toml");
    let fleet = |extra: &[&str]| {
        let mut args = vec!["sim", scenario.to_str().unwrap(), "--hosts", "2"];
        args.extend(["--policy", "none", "--json"]);
        args.extend(extra);
        let out = run(&args);
        assert_ok(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let c = &v["fleet"]["cases"][0];
        (c["ticks_simulated"].as_u64(), c["ticks_total"].as_u64())
    };
    let (Some(fast), Some(total)) = fleet(&[]) else {
        panic!("no tick counts in the fleet JSON");
    };
    assert!(
        fast < total,
        "the fast path summed nothing: {fast} of {total}"
    );
    assert_eq!(fleet(&["--every-tick"]), (Some(total), Some(total)));
}

/// `--case` keeps the named cases, in the scenario's order; a name the
/// scenario does not have is one line naming the file and its cases.
#[test]
fn case_keeps_the_named_cases_and_an_unknown_one_is_named() {
    let scenario = repo().join("scenarios/fleet.toml");
    let sc = scenario.to_str().unwrap();
    let out = run(&[
        "sim",
        sc,
        "--hosts",
        "1",
        "--case",
        "stealscope",
        "--case",
        "none",
        "--json",
    ]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["fleet"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["none", "stealscope"]);
    let out = run(&["sim", sc, "--case", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("fleet.toml")
            && err.contains("\"nope\"")
            && err.contains("stealscope-shared-group"),
        "{err}"
    );
}

#[test]
fn malformed_scenario_exits_2_with_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "[host]\ncpus = 2\n[[vm]]\nname = \"a\"\nvcpu = 1\n").unwrap();
    let out = run(&["sim", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml") && err.contains("unknown field `vcpu`"),
        "{err}"
    );
    let missing = run(&["sim", dir.path().join("none.toml").to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("none.toml"));
}
