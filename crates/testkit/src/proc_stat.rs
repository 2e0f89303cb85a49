//! The tests' own reading of /proc/stat's steal column: ground truth read
//! beside the product, not through its readers (one copy for every test
//! and example that checks exact steal against it).

use std::collections::BTreeMap;

/// Each CPU's steal column of a /proc/stat text, in its units (USER_HZ).
pub fn steal_of(text: &str) -> BTreeMap<u32, u64> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let cpu = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            Some((cpu, f.nth(7)?.parse().ok()?))
        })
        .collect()
}

/// Each CPU's steal so far, read from /proc/stat now.
pub fn steal_now() -> BTreeMap<u32, u64> {
    steal_of(&std::fs::read_to_string("/proc/stat").expect("/proc/stat"))
}

/// Time all CPUs spent running anything (user, nice, system, irq and
/// softirq of the aggregate `cpu` line), in /proc/stat units: with the
/// run time of the tasks a test watches, it tells how much CPU others took.
pub fn busy_of(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq
    Some([0, 1, 2, 5, 6].iter().filter_map(|&i| f.get(i)).sum())
}

/// [`busy_of`] read from /proc/stat now, in ns.
pub fn busy_ns_now() -> u64 {
    let text = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    busy_of(&text).expect("/proc/stat: no aggregate cpu line") * unit_ns()
}

/// One /proc/stat unit in ns.
pub fn unit_ns() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1_000_000_000 / hz.max(1) as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_steal_column_of_each_cpu_line() {
        let t = "cpu  1 2 3 4 5 6 7 99 0 0\ncpu0 1 2 3 4 5 6 7 40 0 0\ncpu1 1 2 3 4 5 6 7 59 0 0\nintr 5\n";
        let s = super::steal_of(t);
        assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![(0, 40), (1, 59)]);
        // user + nice + system + irq + softirq of the aggregate line.
        assert_eq!(super::busy_of(t), Some(1 + 2 + 3 + 6 + 7));
    }
}
