//! Recorded-style counter sequences (fixtures/counters/*: multiplexed groups,
//! counts wrapping past 2^64, uneven windows with tsc/aperf/mperf/smi) through
//! the model's window arithmetic, against what the generator derived from the
//! true rates it made each sequence from (fixtures/gen/gen_counters.py).

use serde_json::Value;
use std::path::PathBuf;
use stealscope_model::hw::{windows, CpuHwWindow};
use stealscope_readers::perf::CounterCapture;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/counters")
}

fn close(ours: Option<f64>, want: &Value, what: &str) -> Result<(), String> {
    match (ours, want.as_f64()) {
        (None, None) => Ok(()),
        (Some(a), Some(b)) if (a - b).abs() <= 1e-6 * b.abs().max(1.0) => Ok(()),
        (a, _) => Err(format!("{what}: ours {a:?}, expected {want}")),
    }
}

fn check(w: &CpuHwWindow, e: &Value) -> Result<(), String> {
    close(w.cycles, &e["cycles"], "cycles")?;
    close(w.instructions, &e["instructions"], "instructions")?;
    close(w.ipc(), &e["ipc"], "ipc")?;
    close(w.miss_rate(), &e["miss_rate"], "miss_rate")?;
    close(w.hw_running_share, &e["running_share"], "running_share")?;
    // Frequencies come from integer counts: 1e-6 relative is far below a count.
    close(w.tsc_mhz, &e["tsc_mhz"], "tsc_mhz")?;
    close(w.busy_mhz, &e["busy_mhz"], "busy_mhz")?;
    close(w.avg_mhz, &e["avg_mhz"], "avg_mhz")?;
    close(w.busy_pct, &e["busy_pct"], "busy_pct")?;
    close(w.smi.map(|v| v as f64), &e["smi"], "smi")
}

#[test]
fn counter_sequences_give_the_true_per_window_figures() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(dir()).expect("fixtures/counters") {
        let d = entry.unwrap().path();
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        let cap: CounterCapture =
            serde_json::from_str(&std::fs::read_to_string(d.join("counters.json")).unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        let exp: Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("expect.json")).unwrap()).unwrap();
        let origin = cap.samples[0].t_ns;
        let got = windows(&cap.samples, origin);
        let want = exp["windows"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{name}: window count");
        for (i, (g, e)) in got.iter().zip(want).enumerate() {
            assert!(
                (g.start_s - e["start_ns"].as_f64().unwrap() / 1e9).abs() < 1e-9,
                "{name} window {i} start"
            );
            assert!((g.wall_s - e["wall_ns"].as_f64().unwrap() / 1e9).abs() < 1e-9);
            let ecpus = e["cpus"].as_array().unwrap();
            assert_eq!(g.cpus.len(), ecpus.len(), "{name} window {i}");
            for (gc, ec) in g.cpus.iter().zip(ecpus) {
                assert_eq!(gc.cpu as u64, ec["cpu"].as_u64().unwrap());
                if let Err(msg) = check(gc, ec) {
                    panic!("{name} window {i} cpu {}: {msg}", gc.cpu);
                }
            }
        }
        seen.push(name);
    }
    seen.sort();
    assert_eq!(seen, ["multiplexed", "turbostat", "wrapping"]);
}

#[test]
fn wrapping_fixture_really_wraps_and_multiplexed_really_multiplexes() {
    // Guards the fixtures themselves: without these properties the test above
    // would not exercise wrap handling or scaling.
    let load = |n: &str| -> CounterCapture {
        serde_json::from_str(&std::fs::read_to_string(dir().join(n).join("counters.json")).unwrap())
            .unwrap()
    };
    let w = load("wrapping");
    let cycles: Vec<u64> = w
        .samples
        .iter()
        .map(|s| {
            s.cpus[0]
                .get(stealscope_readers::perf::Counter::Cycles)
                .unwrap()
                .0
        })
        .collect();
    assert!(cycles.windows(2).any(|p| p[1] < p[0]), "{cycles:?}");
    let m = load("multiplexed");
    let g = &m.samples.last().unwrap().cpus[0].groups[0];
    assert!(g.running_ns < g.enabled_ns);
}
