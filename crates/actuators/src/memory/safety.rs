//! The safety check run before the first step and again before every step:
//! the bytes still to move must fit in the target node's free memory minus a
//! margin, swap (when in use) must have headroom for them, and memory
//! pressure must be below the stop threshold.

use super::{MemoryError, MoveLimits};
use serde::Serialize;
use stealscope_readers::{kernel, numa, psi, ReadError, Source};

pub const PSI_MEMORY: &str = "/proc/pressure/memory";

/// The numbers one check decided on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub node: u32,
    pub node_total_bytes: u64,
    pub node_free_bytes: u64,
    /// Free memory the node must keep: max(margin_pct of total, margin_min).
    pub margin_bytes: u64,
    /// Bytes still to move.
    pub needed_bytes: u64,
    pub swap_total_bytes: u64,
    pub swap_free_bytes: u64,
    /// /proc/pressure/memory "some avg10"; None when the kernel has no PSI
    /// (then pressure is not checked, and `summary` says so).
    pub psi_some_avg10: Option<f64>,
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn sys(e: ReadError) -> MemoryError {
    MemoryError::Sys {
        path: e.path().to_string(),
        msg: match e {
            ReadError::Io { source, .. } => source.to_string(),
            ReadError::Parse { msg, .. } => msg,
        },
    }
}

impl MoveLimits {
    pub fn margin_bytes(&self, node_total: u64) -> u64 {
        let pct = (node_total as f64 * self.margin_pct / 100.0) as u64;
        pct.max(self.margin_min_bytes)
    }
}

/// Reads the target node's memory, swap and pressure. A node without a
/// meminfo file, or a host without /proc/meminfo, is refused: the move
/// cannot be shown to be safe.
pub fn read(
    src: &dyn Source,
    node: u32,
    needed_bytes: u64,
    limits: &MoveLimits,
) -> Result<Check, MemoryError> {
    let path = format!("{}/node{node}/meminfo", numa::NODE_DIR);
    let text = src.read_text(&path).map_err(sys)?.ok_or_else(|| {
        MemoryError::Refused(format!("node {node} does not exist ({path} is missing)"))
    })?;
    let (total, free) = numa::parse_node_meminfo(&text, &path).map_err(sys)?;
    let (Some(total_kb), Some(free_kb)) = (total, free) else {
        return Err(MemoryError::Refused(format!(
            "{path}: no MemTotal/MemFree, the node's free memory is unknown"
        )));
    };
    let mem = kernel::meminfo(src).map_err(sys)?.ok_or_else(|| {
        MemoryError::Refused(format!(
            "{} is missing: swap cannot be checked",
            kernel::MEMINFO
        ))
    })?;
    let psi = psi::read(src, PSI_MEMORY).map_err(sys)?;
    let node_total_bytes = total_kb.saturating_mul(1024);
    Ok(Check {
        node,
        node_total_bytes,
        node_free_bytes: free_kb.saturating_mul(1024),
        margin_bytes: limits.margin_bytes(node_total_bytes),
        needed_bytes,
        swap_total_bytes: mem.swap_total_bytes.unwrap_or(0),
        swap_free_bytes: mem.swap_free_bytes.unwrap_or(0),
        psi_some_avg10: psi.map(|p| p.some.avg10),
    })
}

impl Check {
    /// Free memory left for the move after the margin.
    pub fn room_bytes(&self) -> u64 {
        self.node_free_bytes.saturating_sub(self.margin_bytes)
    }

    fn swap_in_use(&self) -> bool {
        self.swap_total_bytes > 0 && self.swap_free_bytes < self.swap_total_bytes
    }

    fn swap_required(&self, limits: &MoveLimits) -> u64 {
        (self.needed_bytes as f64 * limits.swap_headroom).ceil() as u64
    }

    /// Each unmet condition, in words with its numbers; empty when safe.
    pub fn failures(&self, limits: &MoveLimits) -> Vec<String> {
        let mut out = Vec::new();
        if self.needed_bytes > self.room_bytes() {
            out.push(format!(
                "{} to move does not fit in node {}: free {} - margin {} leaves {}",
                mib(self.needed_bytes),
                self.node,
                mib(self.node_free_bytes),
                mib(self.margin_bytes),
                mib(self.room_bytes())
            ));
        }
        if self.swap_in_use() && self.swap_free_bytes < self.swap_required(limits) {
            out.push(format!(
                "swap is in use and free swap {} < {:.2} x {} to move",
                mib(self.swap_free_bytes),
                limits.swap_headroom,
                mib(self.needed_bytes)
            ));
        }
        if let Some(p) = self.psi_some_avg10.filter(|p| *p > limits.psi_stop) {
            out.push(format!(
                "memory pressure some avg10 {p:.2} > stop {:.2}",
                limits.psi_stop
            ));
        }
        out
    }

    /// Every number of the check on one line.
    pub fn summary(&self, limits: &MoveLimits) -> String {
        let swap = if self.swap_total_bytes == 0 {
            "no swap".to_string()
        } else {
            format!(
                "swap free {} of {} ({}; needs {:.2} x to move)",
                mib(self.swap_free_bytes),
                mib(self.swap_total_bytes),
                if self.swap_in_use() {
                    "in use"
                } else {
                    "not in use"
                },
                limits.swap_headroom
            )
        };
        let psi = match self.psi_some_avg10 {
            Some(p) => format!(
                "memory PSI some avg10 {p:.2} (stop above {:.2})",
                limits.psi_stop
            ),
            None => format!("memory PSI unavailable ({PSI_MEMORY} missing), not checked"),
        };
        format!(
            "node {}: needed {}, free {}, margin {} (MemTotal {}); {swap}; {psi}",
            self.node,
            mib(self.needed_bytes),
            mib(self.node_free_bytes),
            mib(self.margin_bytes),
            mib(self.node_total_bytes)
        )
    }

    /// None when safe, else the failures followed by all the numbers.
    pub fn verdict(&self, limits: &MoveLimits) -> Option<String> {
        let f = self.failures(limits);
        (!f.is_empty()).then(|| format!("{} [{}]", f.join("; "), self.summary(limits)))
    }
}
