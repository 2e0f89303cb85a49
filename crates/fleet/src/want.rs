//! What a VM wants of the CPUs, step by step, from what it got (run) and
//! how long it was runnable (run + wait): the demand the planner adds up
//! and the prediction replays.
//!
//! A vCPU that got all it wanted ran exactly what it wanted; its wait is
//! queueing behind the others, which a replay produces again (counted as
//! demand too, it was counted twice and every destination and source
//! looked fuller than it was). A vCPU that did not get all it wanted was
//! runnable the whole time: it wants between what it ran and a whole CPU,
//! and nothing in the metrics says where, so the plan is made, and
//! predicted, at the bound (a whole CPU). The middle was tried: it halved
//! the moves, and the simulator then left more VMs over 10 % than the
//! prediction said, by more than 2 pp (BENCHMARKS.md, issue 31).

/// Runnable share of its vCPUs from which a VM counts as starved: it
/// did not get all it wanted.
pub const STARVED: f64 = 0.97;

/// Per step, CPUs the VM wants, from its `run` and `runnable` (run + wait)
/// histories in CPUs: what it ran when served, what it was runnable
/// (about all its vCPUs) when starved; steps missing from `run` keep
/// `runnable`.
pub fn want(run: &[f64], runnable: &[f64], vcpus: u32) -> Vec<f64> {
    let n = vcpus.max(1) as f64;
    runnable
        .iter()
        .enumerate()
        .map(|(k, &r)| match run.get(k) {
            Some(&u) if r < STARVED * n => u.min(r),
            _ => r,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_when_served_and_runnable_when_starved() {
        // 2 vCPUs: step 0 ran 1.0 and queued 0.2 (served: wants 1.0);
        // step 1 runnable all the time, ran 1.2 (wants 1.2-2.0: the bound);
        // step 2 has no run sample (runnable kept).
        let w = want(&[1.0, 1.2], &[1.2, 2.0, 1.5], 2);
        assert!((w[0] - 1.0).abs() < 1e-9, "{w:?}");
        assert!((w[1] - 2.0).abs() < 1e-9, "{w:?}");
        assert!((w[2] - 1.5).abs() < 1e-9, "{w:?}");
    }
}
