//! `stealscope fleet` end to end against a real Prometheus: a simulated
//! fleet written as serve exports it (sim::openmetrics), backfilled with
//! `promtool tsdb create-blocks-from openmetrics`, served by Prometheus on
//! loopback, read by `fleet plan`; the moves are then applied in the
//! simulator and the fleet's figures compared with the plan's prediction.
//! Also the anchors' rules on the same fleet (reported), and bad input.
//!
//! STEALSCOPE_FLEET_HOSTS (default 24) and STEALSCOPE_FLEET_SEEDS (default
//! "1") size it, STEALSCOPE_FLEET_PLAN_ARGS adds `fleet plan` flags;
//! BENCHMARKS.md has the 200-host, 3-seed run.

mod common;

use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use stealscope_fleet::model::FleetFigures;
use stealscope_sim::measured::{run_steps, summarize, HostRun, Summary};
use stealscope_sim::openmetrics::{self, step_runs, SynthHost, WriteSpec};

const STEP_S: f64 = 900.0;
const STEPS: usize = 96;

struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A Prometheus serving the TSDB in `data` (no scrapes), until dropped.
fn serve_tsdb(dir: &Path, data: &Path) -> (Reaped, String) {
    std::fs::write(
        dir.join("prometheus.yml"),
        "global:\n  scrape_interval: 1m\n",
    )
    .unwrap();
    let addr = free_addr();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg("--storage.tsdb.retention.time=30d")
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus");
    let url = format!("http://{addr}");
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = std::net::TcpStream::connect(addr).is_ok_and(|mut s| {
            let _ = s.write_all(b"GET /-/ready HTTP/1.0\r\n\r\n");
            let mut b = String::new();
            std::io::Read::read_to_string(&mut s, &mut b).is_ok() && b.contains(" 200 ")
        });
        if ready {
            break;
        }
        assert!(Instant::now() < end, "prometheus not ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    (Reaped(child), url)
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// Each host's replay by its name and VMs: a host no move touched is
/// replayed once for all the plans compared.
#[derive(Default)]
struct Replays(Mutex<HashMap<String, Summary>>);

fn state_key(h: &SynthHost) -> String {
    let vms: Vec<&str> = h.vms.iter().map(|v| v.vm.name.as_str()).collect();
    format!("{}|{}", h.name, vms.join(","))
}

/// `f` over `items` on two threads (the machine CI runs on has two CPUs).
fn on_two<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let f = &f;
        let parts: Vec<_> = items
            .chunks(items.len().div_ceil(2).max(1))
            .map(|c| s.spawn(move || c.iter().map(f).collect::<Vec<R>>()))
            .collect();
        parts.into_iter().flat_map(|p| p.join().unwrap()).collect()
    })
}

/// Each host replayed step by step with its VMs' demand.
fn truth(hosts: &[SynthHost], cache: &Replays) -> FleetFigures {
    let todo: Vec<&SynthHost> = {
        let c = cache.0.lock().unwrap();
        hosts
            .iter()
            .filter(|h| !c.contains_key(&state_key(h)))
            .collect()
    };
    let done = on_two(&todo, |h| {
        (
            state_key(h),
            summarize(&run_steps(h.cpus, &h.measured(), STEP_S, 1)),
        )
    });
    let mut c = cache.0.lock().unwrap();
    c.extend(done);
    FleetFigures::of(hosts.iter().map(|h| {
        let r = &c[&state_key(h)];
        (
            r.busy_steal,
            h.vms.iter().map(|v| v.vm.vcpus).sum(),
            r.vm_steal_pct.clone(),
        )
    }))
}

/// The fleet with each (vm, from, to) applied.
fn apply(hosts: &[SynthHost], moves: &[(String, String, String)]) -> Vec<SynthHost> {
    let mut out = hosts.to_vec();
    for (vm, from, to) in moves {
        let f = out.iter().position(|h| &h.name == from).expect("from host");
        let t = out.iter().position(|h| &h.name == to).expect("to host");
        let i = out[f]
            .vms
            .iter()
            .position(|v| &v.vm.name == vm)
            .expect("vm");
        let mut v = out[f].vms.remove(i);
        // It runs wherever the destination's scheduler puts it.
        v.vm.pinned = None;
        out[t].vms.push(v);
    }
    out
}

fn moves_of(plan: &Value) -> Vec<(String, String, String)> {
    plan["moves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap().to_string();
            (s("vm"), s("from"), s("to"))
        })
        .collect()
}

fn figures(v: &Value) -> FleetFigures {
    FleetFigures {
        busy_steal_pct: v["busy_steal_pct"].as_f64().unwrap(),
        vm_steal_p99: v["vm_steal_p99"].as_f64().unwrap(),
        vms_over_10pct: v["vms_over_10pct"].as_u64().unwrap() as usize,
    }
}

/// Hosts whose steal is all idle steal: VMs pinned to a few CPUs, with
/// demand the host's CPUs hold at every step. A pinned host whose demand
/// exceeds its CPUs (a hot one) also has busy steal that unpinning would
/// leave: moving from it is allowed.
fn pinned(hosts: &[SynthHost]) -> Vec<String> {
    let fits = |h: &SynthHost| {
        let steps = h.vms.iter().map(|v| v.vm.levels.len()).max().unwrap_or(0);
        (0..steps).all(|k| {
            let d: f64 = h
                .vms
                .iter()
                .map(|v| v.vm.vcpus as f64 * v.vm.levels.get(k).copied().unwrap_or(0.0))
                .sum();
            d <= h.cpus as f64
        })
    };
    hosts
        .iter()
        .filter(|h| h.vms.iter().any(|v| v.vm.pinned.is_some()) && fits(h))
        .map(|h| h.name.clone())
        .collect()
}

struct Backfilled {
    _prom: Reaped,
    url: String,
    end: f64,
    _dir: tempfile::TempDir,
    write_s: f64,
    backfill_s: f64,
    samples: usize,
}

/// Writes the fleet's metrics and serves them; `edit` may drop lines
/// (a partial scrape).
fn backfill(hosts: &[SynthHost], silent: Vec<usize>, edit: impl Fn(&str) -> bool) -> Backfilled {
    let t0 = Instant::now();
    let runs: Vec<Vec<HostRun>> = on_two(hosts, |h| step_runs(h, STEP_S, 1));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // Ends on a step boundary before now, so subquery steps align.
    let end = ((now - 2.0 * STEP_S) / STEP_S).floor() * STEP_S;
    let spec = WriteSpec {
        step_s: STEP_S,
        scrapes_per_step: 2,
        start_unix: end - STEP_S * STEPS as f64,
        silent,
    };
    let mut text = Vec::new();
    openmetrics::write(&mut text, hosts, &runs, &spec).unwrap();
    let text = String::from_utf8(text).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| edit(l))
        .flat_map(|l| [l, "\n"])
        .collect();
    let samples = kept.lines().filter(|l| !l.starts_with('#')).count();
    let dir = tempfile::tempdir().unwrap();
    let om = dir.path().join("fleet.om");
    std::fs::write(&om, kept).unwrap();
    let write_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let data = dir.path().join("data");
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let backfill_s = t1.elapsed().as_secs_f64();
    let (prom, url) = serve_tsdb(dir.path(), &data);
    Backfilled {
        _prom: prom,
        url,
        end,
        _dir: dir,
        write_s,
        backfill_s,
        samples,
    }
}

fn plan_json(url: &str, end: f64, extra: &[&str]) -> Value {
    let end = format!("{end}");
    let mut args = vec![
        "fleet",
        "plan",
        "--prometheus",
        url,
        "--window",
        "24h",
        "--steps",
        "96",
        "--time",
        &end,
        "--json",
    ];
    args.extend(extra);
    let out = run(&args);
    assert_ok(&out);
    json(&out)
}

fn within(what: &str, predicted: f64, got: f64, pp: f64) {
    assert!(
        (predicted - got).abs() <= pp,
        "{what}: predicted {predicted:.2}, simulated after the moves {got:.2}"
    );
}

/// The plan's effect in the simulator against its prediction, and the
/// anchors' rules on the same fleet.
fn one_seed(n: u32, seed: u64) {
    let hosts = openmetrics::synthetic(n, STEPS, STEP_S, seed);
    let silent = vec![hosts.len() - 1];
    let live: Vec<SynthHost> = hosts[..hosts.len() - 1].to_vec();
    let b = backfill(&hosts, silent, |_| true);
    // STEALSCOPE_FLEET_PLAN_ARGS: more `fleet plan` flags, to measure
    // another planner on the same fleet.
    let extra = env_or("STEALSCOPE_FLEET_PLAN_ARGS", "");
    let mut args: Vec<&str> = extra.split_whitespace().collect();
    if !args.contains(&"--max-moves") {
        args.extend(["--max-moves", "500"]);
    }
    let plan = plan_json(&b.url, b.end, &args);
    // The silent host is named, not planned for.
    let unseen = plan["not_seen"].to_string();
    assert!(
        unseen.contains(&hosts[n as usize - 1].instance()),
        "{unseen}"
    );
    assert!(unseen.contains("target-down"), "{unseen}");
    let moves = moves_of(&plan);
    assert!(
        !moves.is_empty(),
        "no moves: hot {} unfixed {}",
        plan["hot_hosts"],
        plan["unfixed"]
    );
    // No VM leaves a host whose steal is idle steal.
    let idle = pinned(&live);
    assert!(
        moves.iter().all(|m| !idle.contains(&m.1)),
        "{moves:?} from {idle:?}"
    );
    let cache = Replays::default();
    let before = truth(&live, &cache);
    let after = truth(&apply(&live, &moves), &cache);
    let (pb, pa) = (
        figures(&plan["fleet_before"]),
        figures(&plan["fleet_predicted"]),
    );
    let vms: usize = live.iter().map(|h| h.vms.len()).sum();
    let pct = |c: usize| 100.0 * c as f64 / vms as f64;
    eprintln!(
        "seed {seed}: {n} hosts {vms} VMs, {} samples (write {:.1} s, backfill {:.1} s), {} moves, plan {:.1} s\n  \
         measured {pb:?}\n  simulated before {before:?}\n  predicted {pa:?}\n  simulated after {after:?}",
        b.samples,
        b.write_s,
        b.backfill_s,
        moves.len(),
        plan["plan_seconds"]
    );
    within(
        "busy steal before",
        pb.busy_steal_pct,
        before.busy_steal_pct,
        2.0,
    );
    within("busy steal", pa.busy_steal_pct, after.busy_steal_pct, 2.0);
    within("p99 VM steal", pa.vm_steal_p99, after.vm_steal_p99, 2.0);
    within(
        "VMs over 10 % (pp of VMs)",
        pct(pa.vms_over_10pct),
        pct(after.vms_over_10pct),
        2.0,
    );
    assert!(after.busy_steal_pct < before.busy_steal_pct);
    assert!(after.vms_over_10pct < before.vms_over_10pct);
    anchors(&b, &live, &plan, (before, after), &cache);
}

/// DRS-like and Watcher-like rules on the fleet as read from the same
/// Prometheus, applied in the simulator.
fn anchors(
    b: &Backfilled,
    live: &[SynthHost],
    plan: &Value,
    (before, ours): (FleetFigures, FleetFigures),
    cache: &Replays,
) {
    let mut prom = stealscope_fleet::prom::Prom::new(&b.url, Duration::from_secs(60)).unwrap();
    prom.at = Some(b.end);
    let fleet = stealscope_fleet::read(
        &mut prom,
        &stealscope_fleet::ReadOptions {
            selector: String::new(),
            window: "24h".into(),
            steps: 96,
        },
    )
    .unwrap();
    let ours_moves = plan["moves"].as_array().unwrap().len();
    let idle = pinned(live);
    let named = |p: &stealscope_fleet::Plan| -> Vec<(String, String, String)> {
        p.moves
            .iter()
            .map(|m| {
                (
                    fleet.hosts[m.from].vms[m.vm].name.clone(),
                    fleet.hosts[m.from].name.clone(),
                    fleet.hosts[m.to].name.clone(),
                )
            })
            .collect()
    };
    for (name, p) in [
        (
            "drs-like",
            stealscope_fleet::anchors::drs_like(&fleet, 0.05, 10_000),
        ),
        (
            "watcher-like",
            stealscope_fleet::anchors::watcher_like(&fleet, 0.8, 10_000),
        ),
    ] {
        let moves = named(&p);
        let after = truth(&apply(live, &moves), cache);
        let from_idle = moves.iter().filter(|m| idle.contains(&m.1)).count();
        eprintln!(
            "  {name}: {} moves ({from_idle} from idle-steal hosts), busy steal {:.2} -> {:.2} %, over 10 %: {} (ours: {ours_moves} moves, {:.2} %, {})",
            moves.len(),
            before.busy_steal_pct,
            after.busy_steal_pct,
            after.vms_over_10pct,
            ours.busy_steal_pct,
            ours.vms_over_10pct
        );
        // Asserted: fewer VMs left over 10 % than either rule. Reported, not
        // asserted: busy steal removed and moves; the DRS-like rule removes
        // about as much with fewer moves on these fleets (BENCHMARKS.md).
        assert!(
            ours.vms_over_10pct <= after.vms_over_10pct,
            "{name} left fewer VMs over 10 %: {after:?} against ours {ours:?}"
        );
    }
}

#[test]
fn plan_against_a_real_prometheus_matches_the_simulator() {
    if !require(
        have("prometheus") && have("promtool"),
        "prometheus and promtool (apt install prometheus)",
    ) {
        return;
    }
    let n: u32 = env_or("STEALSCOPE_FLEET_HOSTS", "24").parse().unwrap();
    for seed in env_or("STEALSCOPE_FLEET_SEEDS", "1").split(',') {
        one_seed(n, seed.trim().parse().unwrap());
    }
}

fn fails_with(args: &[&str], want: &str) {
    let out = run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(want), "{args:?}: {err}");
}

#[test]
fn unreachable_and_silent_prometheus_are_one_line_errors() {
    let closed = format!("http://{}", free_addr());
    fails_with(
        &["fleet", "plan", "--prometheus", &closed],
        "is unreachable",
    );
    // Accepts the connection and never answers.
    let hold = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", hold.local_addr().unwrap());
    let t0 = Instant::now();
    fails_with(
        &["fleet", "status", "--prometheus", &url, "--timeout", "1s"],
        "timed out after 1 s",
    );
    assert!(t0.elapsed() < Duration::from_secs(20));
    fails_with(
        &["fleet", "plan", "--prometheus", "localhost:9090"],
        "expected an http://",
    );
    fails_with(
        &[
            "fleet",
            "plan",
            "--prometheus",
            &closed,
            "--window",
            "1 hour",
        ],
        "--window",
    );
}

#[test]
fn partial_scrapes_are_named_and_empty_prometheus_is_an_error() {
    if !require(
        have("prometheus") && have("promtool"),
        "prometheus and promtool (apt install prometheus)",
    ) {
        return;
    }
    let hosts = openmetrics::synthetic(4, STEPS, STEP_S, 11);
    let lost_vm = hosts[1].vms[0].vm.name.clone();
    let h0 = format!("instance=\"{}\"", hosts[0].instance());
    // Host 0 lost its host families, one VM of host 1 its memory size,
    // host 3 has no serve answering.
    let b = backfill(&hosts, vec![3], |l| {
        let host_cpus = l.starts_with("stealscope_host_cpus") && l.contains(&h0);
        let memory =
            l.starts_with("stealscope_vm_memory_bytes") && l.contains(&format!("vm=\"{lost_vm}\""));
        !(host_cpus || memory)
    });
    let plan = plan_json(&b.url, b.end, &[]);
    let unseen = plan["not_seen"].as_array().unwrap();
    let has = |kind: &str, what: &str| {
        unseen
            .iter()
            .any(|u| u["kind"] == kind && u.to_string().contains(what))
    };
    assert!(has("no-host-facts", &hosts[0].instance()), "{unseen:?}");
    assert!(has("vm-partial", &lost_vm), "{unseen:?}");
    assert!(has("target-down", &hosts[3].instance()), "{unseen:?}");
    assert_eq!(plan["hosts"], 2);
    assert!(moves_of(&plan).iter().all(|m| m.0 != lost_vm));
    // The table names them too, within 80 columns.
    let end = format!("{}", b.end);
    let text = run(&[
        "fleet",
        "plan",
        "--prometheus",
        &b.url,
        "--window",
        "24h",
        "--time",
        &end,
    ]);
    assert_ok(&text);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.contains(&format!("not seen: {}", hosts[3].instance())),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    // Status: hosts ranked by busy steal, the same ones left out.
    let st = run(&[
        "fleet",
        "status",
        "--prometheus",
        &b.url,
        "--window",
        "24h",
        "--time",
        &end,
        "--json",
    ]);
    assert_ok(&st);
    let st = json(&st);
    assert_eq!(st["schema"], "stealscope/fleet-status/1");
    let busy: Vec<f64> = st["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["busy_steal_pct"].as_f64().unwrap())
        .collect();
    assert_eq!(busy.len(), 2);
    assert!(busy.windows(2).all(|w| w[0] >= w[1]), "{busy:?}");
    // A query Prometheus refuses names the query.
    fails_with(
        &[
            "fleet",
            "status",
            "--prometheus",
            &b.url,
            "--selector",
            "job=~\"(\"",
        ],
        "Prometheus refused query inventory",
    );
    // A Prometheus without stealscope series.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let (_p, empty) = serve_tsdb(dir.path(), &data);
    fails_with(
        &["fleet", "status", "--prometheus", &empty],
        "no stealscope host metrics",
    );
}
