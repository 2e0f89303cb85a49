//! The delta-coded sample series: /proc/stat cpu rows, /proc/interrupts,
//! vCPU thread schedstat and perf counter reads. Each encoder collects
//! samples into one open batch (about a second) and hands out the frame
//! payloads; each decoder is its inverse.
//!
//! Every value is a zigzag varint of its change since the same value in
//! the previous sample of the series, across batches (0 when it was not in
//! that sample); a table frame starts its series afresh. Times are the
//! CLOCK_MONOTONIC change since the previous sample (the header's start for
//! the first).

use super::codec::{err, pack, put_delta, put_str, put_u64, unpack, DResult, Dec};
use super::format::{IrqSample, Kind, StatSample, ThreadTimes, VcpuEntry, VcpuSample};
use crate::interrupts::{Interrupts, IrqRow};
use crate::perf::{Counter, CounterSample, CpuRead, GroupRead};
use crate::stat::{CpuRow, CpuTimes, ProcStat};
use std::collections::BTreeMap;

/// Frames an encoder wants written now, in order (a closed batch before
/// the table that replaces its own).
pub type Frames = Vec<(Kind, Vec<u8>)>;

/// The time of a sample from the change since the previous one.
fn next_time(d: &mut Dec, last: &mut u64) -> DResult<u64> {
    let dt = d.u64()?;
    *last = last
        .checked_add(dt)
        .ok_or_else(|| super::codec::DecodeError("time overflows 64 bits".into()))?;
    Ok(*last)
}

/// Batch state common to every series: the samples of the open batch.
struct Batch {
    body: Vec<u8>,
    n: u64,
    last_t: u64,
}

impl Batch {
    fn new(start_ns: u64) -> Self {
        Batch {
            body: Vec::new(),
            n: 0,
            last_t: start_ns,
        }
    }

    fn begin_sample(&mut self, t_ns: u64) {
        // CLOCK_MONOTONIC does not go back; a caller's clamp keeps dt >= 0.
        let t = t_ns.max(self.last_t);
        put_u64(&mut self.body, t - self.last_t);
        self.last_t = t;
        self.n += 1;
    }

    /// The batch as a payload (`head`, sample count, samples), emptied.
    fn take(&mut self, head: &[u8]) -> Option<Vec<u8>> {
        if self.n == 0 {
            return None;
        }
        let mut body = head.to_vec();
        put_u64(&mut body, self.n);
        body.extend_from_slice(&self.body);
        self.body.clear();
        self.n = 0;
        Some(pack(&body))
    }
}

// ---- /proc/stat ----

/// Row key: 0 for the aggregate `cpu` row, N+1 for `cpuN`.
fn stat_rows(s: &ProcStat) -> impl Iterator<Item = (u32, &CpuTimes)> {
    let total = s.total.as_ref().map(|t| (0, t));
    let cpus = s
        .cpus
        .iter()
        .filter_map(|r| Some((r.cpu?.checked_add(1)?, &r.times)));
    total.into_iter().chain(cpus)
}

type StatValues = Vec<(u32, [u64; 10])>;

fn base_of(prev: &StatValues, key: u32) -> [u64; 10] {
    prev.binary_search_by_key(&key, |(k, _)| *k)
        .map(|i| prev[i].1)
        .unwrap_or([0; 10])
}

/// Collects a batch as plain values and encodes it when it is taken: the
/// 100 Hz sample path only copies ~30 numbers (on caches gone cold during
/// the sleep), and the deltas are worked out in one warm loop a second.
/// The bytes are the same as encoding each sample as it comes.
pub struct StatEncoder {
    /// (key, column count) of every row of the open batch.
    layout: Vec<(u32, u8)>,
    /// Sample times of the open batch.
    times: Vec<u64>,
    /// Their values, row after row in `layout` order, `width` a sample.
    values: Vec<u64>,
    width: usize,
    /// The time and values of the last sample encoded (the deltas' base).
    last_t: u64,
    prev: StatValues,
}

impl StatEncoder {
    pub fn new(start_ns: u64) -> Self {
        StatEncoder {
            layout: Vec::new(),
            times: Vec::new(),
            values: Vec::new(),
            width: 0,
            last_t: start_ns,
            prev: Vec::new(),
        }
    }

    fn same_layout(&self, s: &ProcStat) -> bool {
        let mut rows = stat_rows(s);
        self.layout.iter().all(|&(lk, ln)| {
            rows.next()
                .is_some_and(|(k, t)| k == lk && t.column_count() == ln as usize)
        }) && rows.next().is_none()
    }

    /// Adds a sample. A CPU set or column change (hotplug) closes the open
    /// batch, whose payload is returned to be written first.
    pub fn push(&mut self, t_ns: u64, s: &ProcStat) -> Option<Vec<u8>> {
        let same = self.same_layout(s);
        let closed = if same { None } else { self.take() };
        if !same {
            self.layout = stat_rows(s)
                .map(|(k, t)| (k, t.column_count() as u8))
                .collect();
            self.width = self.layout.iter().map(|&(_, n)| n as usize).sum();
        }
        self.times.push(t_ns);
        for ((_, t), &(_, n)) in stat_rows(s).zip(&self.layout) {
            self.values
                .extend((0..n as usize).map(|i| t.column(i).unwrap_or(0)));
        }
        closed
    }

    /// Samples in the open batch times their values: what it holds.
    pub fn pending_values(&self) -> usize {
        self.times.len() * (1 + self.width)
    }

    /// The open batch as a `stat` payload, if it holds samples.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        if self.times.is_empty() {
            return None;
        }
        let mut body = Vec::with_capacity(16 + self.layout.len() * 4 + self.pending_values() * 2);
        put_u64(&mut body, self.layout.len() as u64);
        for &(k, n) in &self.layout {
            put_u64(&mut body, k as u64);
            body.push(n);
        }
        put_u64(&mut body, self.times.len() as u64);
        // Each row's base: the previous sample's row with that key (zeros
        // past its columns, or for a row it did not have).
        let mut base: Vec<[u64; 10]> = self
            .layout
            .iter()
            .map(|&(k, _)| base_of(&self.prev, k))
            .collect();
        for (i, &t) in self.times.iter().enumerate() {
            // CLOCK_MONOTONIC does not go back; a caller's clamp keeps dt >= 0.
            let t = t.max(self.last_t);
            put_u64(&mut body, t - self.last_t);
            self.last_t = t;
            let mut vals = self.values[i * self.width..(i + 1) * self.width].iter();
            for (b, &(_, n)) in base.iter_mut().zip(&self.layout) {
                for slot in &mut b[..n as usize] {
                    let v = vals.next().copied().unwrap_or(0);
                    put_delta(&mut body, *slot, v);
                    *slot = v;
                }
                b[n as usize..].fill(0);
            }
        }
        self.prev.clear();
        self.prev
            .extend(self.layout.iter().map(|&(k, _)| k).zip(base));
        self.times.clear();
        self.values.clear();
        Some(pack(&body))
    }
}

pub struct StatDecoder {
    prev: StatValues,
    last_t: u64,
}

impl StatDecoder {
    pub fn new(start_ns: u64) -> Self {
        StatDecoder {
            prev: Vec::new(),
            last_t: start_ns,
        }
    }

    pub fn decode(&mut self, payload: &[u8]) -> DResult<Vec<StatSample>> {
        let body = unpack(payload)?;
        let mut d = Dec::new(&body);
        let nrows = d.count(2, "row")?;
        let mut layout = Vec::with_capacity(nrows);
        for _ in 0..nrows {
            let key = d.u32()?;
            let n = d.u8()? as usize;
            if !(4..=10).contains(&n) {
                return err(format!("row {key}: {n} columns (4 to 10 exist)"));
            }
            if layout.last().is_some_and(|&(k, _)| k >= key) {
                return err(format!("row keys not ascending at {key}"));
            }
            layout.push((key, n));
        }
        // Every value takes a byte at least, so the count is bounded by the payload.
        let per_sample = 1 + layout.iter().map(|&(_, n)| n).sum::<usize>();
        let n = d.count(per_sample, "sample")?;
        let mut out = Vec::new();
        for _ in 0..n {
            let t_ns = next_time(&mut d, &mut self.last_t)?;
            let mut cur: StatValues = Vec::with_capacity(layout.len());
            let mut stat = ProcStat::default();
            for &(key, ncols) in &layout {
                let base = base_of(&self.prev, key);
                let mut v = [0u64; 10];
                for (i, slot) in v.iter_mut().enumerate().take(ncols) {
                    *slot = d.delta(base[i])?;
                }
                let times = CpuTimes::from_columns(&v[..ncols]);
                if key == 0 {
                    stat.total = Some(times);
                } else {
                    stat.cpus.push(CpuRow {
                        cpu: Some(key - 1),
                        times,
                    });
                }
                cur.push((key, v));
            }
            self.prev = cur;
            out.push(StatSample { t_ns, stat });
        }
        d.finish()?;
        Ok(out)
    }
}

// ---- /proc/interrupts ----

/// Counts in one interrupt table at most: 4096 CPUs x 4096 sources.
const MAX_IRQ_COUNTS: usize = 1 << 24;

fn same_irq_table(a: &Interrupts, b: &Interrupts) -> bool {
    a.cpus == b.cpus
        && a.rows.len() == b.rows.len()
        && a.rows
            .iter()
            .zip(&b.rows)
            .all(|(x, y)| x.name == y.name && x.desc == y.desc && x.counts.len() == y.counts.len())
}

pub struct IrqEncoder {
    batch: Batch,
    /// The current table (its counts are the previous sample's).
    table: Option<Interrupts>,
}

impl IrqEncoder {
    pub fn new(start_ns: u64) -> Self {
        IrqEncoder {
            batch: Batch::new(start_ns),
            table: None,
        }
    }

    pub fn push(&mut self, t_ns: u64, irq: &Interrupts, out: &mut Frames) {
        let same = self.table.as_ref().is_some_and(|t| same_irq_table(t, irq));
        if !same {
            out.extend(self.take().map(|p| (Kind::Irq, p)));
            let mut body = Vec::new();
            put_u64(&mut body, irq.cpus.len() as u64);
            for &c in &irq.cpus {
                put_u64(&mut body, c as u64);
            }
            put_u64(&mut body, irq.rows.len() as u64);
            for r in &irq.rows {
                put_str(&mut body, &r.name);
                put_str(&mut body, &r.desc);
                put_u64(&mut body, r.counts.len() as u64);
            }
            out.push((Kind::IrqTable, pack(&body)));
            let mut t = irq.clone();
            t.rows.iter_mut().for_each(|r| r.counts.fill(0));
            self.table = Some(t);
        }
        self.batch.begin_sample(t_ns);
        let Some(table) = self.table.as_mut() else {
            return;
        };
        for (prev, cur) in table.rows.iter_mut().zip(&irq.rows) {
            for (p, &c) in prev.counts.iter_mut().zip(&cur.counts) {
                put_delta(&mut self.batch.body, *p, c);
                *p = c;
            }
        }
    }

    pub fn take(&mut self) -> Option<Vec<u8>> {
        self.batch.take(&[])
    }
}

pub struct IrqDecoder {
    table: Option<Interrupts>,
    last_t: u64,
}

impl IrqDecoder {
    pub fn new(start_ns: u64) -> Self {
        IrqDecoder {
            table: None,
            last_t: start_ns,
        }
    }

    pub fn table(&mut self, payload: &[u8]) -> DResult<()> {
        let body = unpack(payload)?;
        let mut d = Dec::new(&body);
        let ncpus = d.count(1, "cpu")?;
        let mut cpus = Vec::with_capacity(ncpus);
        for _ in 0..ncpus {
            cpus.push(d.u32()?);
        }
        let nrows = d.count(3, "row")?;
        if nrows.saturating_mul(ncpus.max(1)) > MAX_IRQ_COUNTS {
            return err(format!(
                "{nrows} rows x {ncpus} CPUs is more than a host has"
            ));
        }
        let mut rows = Vec::with_capacity(nrows);
        for _ in 0..nrows {
            let name = d.str()?.to_string();
            let desc = d.str()?.to_string();
            let n = d.u64()?;
            if n != 1 && n != ncpus as u64 {
                return err(format!(
                    "row {name}: {n} counts for {ncpus} CPUs (1 or one per CPU)"
                ));
            }
            rows.push(IrqRow {
                name,
                counts: vec![0; n as usize],
                desc,
            });
        }
        d.finish()?;
        self.table = Some(Interrupts { cpus, rows });
        Ok(())
    }

    pub fn decode(&mut self, payload: &[u8]) -> DResult<Vec<IrqSample>> {
        let Some(table) = self.table.as_mut() else {
            return err("irq frame before any irq-table frame");
        };
        let body = unpack(payload)?;
        let mut d = Dec::new(&body);
        let per_sample = 1 + table.rows.iter().map(|r| r.counts.len()).sum::<usize>();
        let n = d.count(per_sample, "sample")?;
        let mut out = Vec::new();
        for _ in 0..n {
            let t_ns = next_time(&mut d, &mut self.last_t)?;
            for r in table.rows.iter_mut() {
                for c in r.counts.iter_mut() {
                    *c = d.delta(*c)?;
                }
            }
            out.push(IrqSample {
                t_ns,
                irq: table.clone(),
            });
        }
        d.finish()?;
        Ok(out)
    }
}

// ---- vCPU threads ----

pub struct VcpuEncoder {
    batch: Batch,
    table: Option<Vec<VcpuEntry>>,
    prev: Vec<ThreadTimes>,
}

impl VcpuEncoder {
    pub fn new(start_ns: u64) -> Self {
        VcpuEncoder {
            batch: Batch::new(start_ns),
            table: None,
            prev: Vec::new(),
        }
    }

    /// One scan of every vCPU thread. Nothing is written while there has
    /// never been a vCPU (a guest, not a host).
    pub fn push(&mut self, t_ns: u64, threads: &[(VcpuEntry, ThreadTimes)], out: &mut Frames) {
        let same = self.table.as_ref().is_some_and(|t| {
            t.len() == threads.len() && t.iter().zip(threads).all(|(a, (b, _))| a == b)
        });
        if !same {
            if self.table.is_none() && threads.is_empty() {
                return;
            }
            out.extend(self.take().map(|p| (Kind::Vcpu, p)));
            let mut body = Vec::new();
            put_u64(&mut body, threads.len() as u64);
            for (e, _) in threads {
                put_u64(&mut body, e.pid as u64);
                put_u64(&mut body, e.tid as u64);
                put_u64(&mut body, e.vcpu as u64);
                put_str(&mut body, &e.vm);
            }
            out.push((Kind::VcpuTable, pack(&body)));
            self.table = Some(threads.iter().map(|(e, _)| e.clone()).collect());
            self.prev = vec![
                ThreadTimes {
                    run_ns: 0,
                    wait_ns: 0
                };
                threads.len()
            ];
        }
        if threads.is_empty() {
            return;
        }
        self.batch.begin_sample(t_ns);
        for (p, (_, c)) in self.prev.iter_mut().zip(threads) {
            put_delta(&mut self.batch.body, p.run_ns, c.run_ns);
            put_delta(&mut self.batch.body, p.wait_ns, c.wait_ns);
            *p = *c;
        }
    }

    pub fn take(&mut self) -> Option<Vec<u8>> {
        self.batch.take(&[])
    }
}

pub struct VcpuDecoder {
    table: Option<Vec<(VcpuEntry, ThreadTimes)>>,
    last_t: u64,
}

impl VcpuDecoder {
    pub fn new(start_ns: u64) -> Self {
        VcpuDecoder {
            table: None,
            last_t: start_ns,
        }
    }

    pub fn table(&mut self, payload: &[u8]) -> DResult<()> {
        let body = unpack(payload)?;
        let mut d = Dec::new(&body);
        let n = d.count(4, "vCPU")?;
        let mut t = Vec::with_capacity(n);
        for _ in 0..n {
            let e = VcpuEntry {
                pid: d.u32()?,
                tid: d.u32()?,
                vcpu: d.u32()?,
                vm: d.str()?.to_string(),
            };
            t.push((
                e,
                ThreadTimes {
                    run_ns: 0,
                    wait_ns: 0,
                },
            ));
        }
        d.finish()?;
        self.table = Some(t);
        Ok(())
    }

    pub fn decode(&mut self, payload: &[u8]) -> DResult<Vec<VcpuSample>> {
        let Some(table) = self.table.as_mut() else {
            return err("vcpu frame before any vcpu-table frame");
        };
        let body = unpack(payload)?;
        let mut d = Dec::new(&body);
        let n = d.count(1 + 2 * table.len(), "sample")?;
        let mut out = Vec::new();
        for _ in 0..n {
            let t_ns = next_time(&mut d, &mut self.last_t)?;
            for (_, t) in table.iter_mut() {
                t.run_ns = d.delta(t.run_ns)?;
                t.wait_ns = d.delta(t.wait_ns)?;
            }
            out.push(VcpuSample {
                t_ns,
                threads: table.clone(),
            });
        }
        d.finish()?;
        Ok(out)
    }
}

// ---- perf counter reads ----

const COUNTERS: [Counter; 8] = [
    Counter::Cycles,
    Counter::Instructions,
    Counter::CacheReferences,
    Counter::CacheMisses,
    Counter::Tsc,
    Counter::Aperf,
    Counter::Mperf,
    Counter::Smi,
];

/// The counter's number in the format (its index in [`COUNTERS`]).
fn counter_id(c: Counter) -> u8 {
    COUNTERS.iter().position(|&x| x == c).unwrap_or(0) as u8
}

/// The previous read of group `gi` on `cpu`, the base of the next deltas.
fn prev_group(prev: &[CpuRead], cpu: u32, gi: usize) -> Option<&GroupRead> {
    prev.iter().find(|c| c.cpu == cpu)?.groups.get(gi)
}

pub struct CounterEncoder {
    batch: Batch,
    prev: Vec<CpuRead>,
}

impl CounterEncoder {
    pub fn new(start_ns: u64) -> Self {
        CounterEncoder {
            batch: Batch::new(start_ns),
            prev: Vec::new(),
        }
    }

    pub fn push(&mut self, s: &CounterSample) {
        self.batch.begin_sample(s.t_ns);
        let b = &mut self.batch.body;
        put_u64(b, s.cpus.len() as u64);
        for c in &s.cpus {
            put_u64(b, c.cpu as u64);
            put_u64(b, c.groups.len() as u64);
            for (gi, g) in c.groups.iter().enumerate() {
                let p = prev_group(&self.prev, c.cpu, gi);
                put_delta(b, p.map_or(0, |p| p.enabled_ns), g.enabled_ns);
                put_delta(b, p.map_or(0, |p| p.running_ns), g.running_ns);
                put_u64(b, g.counts.len() as u64);
                for (&counter, &v) in &g.counts {
                    b.push(counter_id(counter));
                    let base = p.and_then(|p| p.counts.get(&counter)).copied();
                    put_delta(b, base.unwrap_or(0), v);
                }
            }
        }
        self.prev.clone_from(&s.cpus);
    }

    pub fn take(&mut self) -> Option<Vec<u8>> {
        self.batch.take(&[])
    }
}

pub struct CounterDecoder {
    prev: Vec<CpuRead>,
    last_t: u64,
}

impl CounterDecoder {
    pub fn new(start_ns: u64) -> Self {
        CounterDecoder {
            prev: Vec::new(),
            last_t: start_ns,
        }
    }

    pub fn decode(&mut self, payload: &[u8]) -> DResult<Vec<CounterSample>> {
        let body = unpack(payload)?;
        let mut d = Dec::new(&body);
        let n = d.count(1, "sample")?;
        let mut out = Vec::new();
        for _ in 0..n {
            let t_ns = next_time(&mut d, &mut self.last_t)?;
            let ncpus = d.count(2, "cpu")?;
            let mut cpus = Vec::with_capacity(ncpus);
            for _ in 0..ncpus {
                let cpu = d.u32()?;
                let ngroups = d.count(3, "group")?;
                let mut groups = Vec::with_capacity(ngroups);
                for gi in 0..ngroups {
                    let p = prev_group(&self.prev, cpu, gi);
                    let enabled_ns = d.delta(p.map_or(0, |p| p.enabled_ns))?;
                    let running_ns = d.delta(p.map_or(0, |p| p.running_ns))?;
                    let ncounts = d.count(2, "count")?;
                    let mut counts = BTreeMap::new();
                    for _ in 0..ncounts {
                        let id = d.u8()?;
                        let Some(&counter) = COUNTERS.get(id as usize) else {
                            return err(format!("unknown counter id {id}"));
                        };
                        let base = p.and_then(|p| p.counts.get(&counter)).copied();
                        counts.insert(counter, d.delta(base.unwrap_or(0))?);
                    }
                    groups.push(GroupRead {
                        enabled_ns,
                        running_ns,
                        counts,
                    });
                }
                cpus.push(CpuRead { cpu, groups });
            }
            self.prev.clone_from(&cpus);
            out.push(CounterSample { t_ns, cpus });
        }
        d.finish()?;
        Ok(out)
    }
}
