//! The spinner: reads CLOCK_MONOTONIC in a tight loop on its CPU and records
//! every gap above the threshold, with nothing in the loop that could itself
//! cause one (no allocation, no page fault, no system call but the clock
//! and, after a gap, the thread's context-switch count).

use super::attribution::RawGap;
use crate::harness::ThreadCtx;
use crate::sys;
use std::sync::atomic::{AtomicBool, Ordering};

/// Gap records pre-touched per spinner, so recording the first ones takes no
/// page fault (which would itself be a gap).
const INITIAL_GAPS: usize = 1 << 16;
/// At most this many gaps are kept per CPU (24 MB); more are counted only.
const MAX_GAPS: usize = 1 << 20;

/// Spins on the clock until `duration` passes or `stop` is set; returns the
/// first and last reading, the gaps above `threshold` and how many gaps
/// past [`MAX_GAPS`] were only counted. None when the run was aborted.
pub(super) fn spin(
    duration: u64,
    threshold: u64,
    stop: &AtomicBool,
    ctx: &ThreadCtx,
) -> Option<(u64, u64, Vec<RawGap>, u64)> {
    let mut gaps = vec![RawGap::default(); INITIAL_GAPS];
    gaps.clear();
    // Dry calls: the loop's code is mapped before the first measured gap.
    std::hint::black_box((sys::now_ns(), sys::thread_ctx_switches()));
    if !ctx.start() {
        return None;
    }
    let start = sys::now_ns();
    let end = start + duration;
    let mut csw = sys::thread_ctx_switches();
    let mut dropped = 0u64;
    let mut last = start;
    let mut n: u32 = 0;
    loop {
        let t = sys::now_ns();
        if t.saturating_sub(last) > threshold {
            let c = sys::thread_ctx_switches();
            if gaps.len() < MAX_GAPS {
                gaps.push(RawGap {
                    start: last,
                    end: t,
                    switched: c != csw,
                });
            } else {
                dropped += 1;
            }
            csw = c;
            // The bookkeeping above is not a gap: restart the clock after it.
            last = sys::now_ns();
        } else {
            last = t;
        }
        n = n.wrapping_add(1);
        if n & 0x3ff == 0 && (t >= end || stop.load(Ordering::Relaxed)) {
            return Some((start, last, gaps, dropped));
        }
    }
}
