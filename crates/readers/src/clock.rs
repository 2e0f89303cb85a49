//! The one clock every reading is stamped with.

/// CLOCK_MONOTONIC in ns (samples.jsonl, counter reads, recordings).
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}
