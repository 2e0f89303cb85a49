//! Payloads of the frames that are not series: probe latency windows,
//! culprits per host scan, steal episodes and notes.

use super::codec::{err, pack, put_delta, put_str, put_u64, unpack, DResult, Dec};
use super::format::{CulpritScan, ProbeRecord, StealEpisodeRecord, StealVictimRecord};
use stealscope_who::{Culprit, Kind};

pub fn encode_probes(windows: &[ProbeRecord]) -> Vec<u8> {
    let mut b = Vec::new();
    put_u64(&mut b, windows.len() as u64);
    for w in windows {
        put_str(&mut b, &w.probe);
        put_u64(&mut b, w.cpu.map_or(0, |c| c as u64 + 1));
        for v in [
            w.start_ns, w.wall_ns, w.samples, w.p50_ns, w.p99_ns, w.max_ns,
        ] {
            put_u64(&mut b, v);
        }
        put_u64(&mut b, w.buckets.len() as u64);
        for &(le, n) in &w.buckets {
            put_u64(&mut b, le);
            put_u64(&mut b, n);
        }
    }
    pack(&b)
}

pub fn decode_probes(payload: &[u8]) -> DResult<Vec<ProbeRecord>> {
    let body = unpack(payload)?;
    let mut d = Dec::new(&body);
    let n = d.count(9, "window")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let probe = d.str()?.to_string();
        let cpu = match d.u64()? {
            0 => None,
            c => Some(u32::try_from(c - 1).or_else(|_| err(format!("cpu {c} too large")))?),
        };
        let mut v = [0u64; 6];
        for x in v.iter_mut() {
            *x = d.u64()?;
        }
        let nb = d.count(2, "bucket")?;
        let mut buckets = Vec::with_capacity(nb);
        for _ in 0..nb {
            buckets.push((d.u64()?, d.u64()?));
        }
        let [start_ns, wall_ns, samples, p50_ns, p99_ns, max_ns] = v;
        out.push(ProbeRecord {
            probe,
            cpu,
            start_ns,
            wall_ns,
            samples,
            p50_ns,
            p99_ns,
            max_ns,
            buckets,
        });
    }
    d.finish()?;
    Ok(out)
}

pub fn encode_note(t_ns: u64, text: &str) -> Vec<u8> {
    let mut b = Vec::new();
    put_u64(&mut b, t_ns);
    b.extend_from_slice(text.as_bytes());
    b
}

pub fn decode_note(payload: &[u8]) -> DResult<(u64, String)> {
    let mut d = Dec::new(payload);
    let t = d.u64()?;
    let text = std::str::from_utf8(d.rest()).or_else(|_| err("note is not UTF-8"))?;
    Ok((t, text.to_string()))
}

pub fn encode_culprits(scans: &[CulpritScan]) -> Vec<u8> {
    let mut b = Vec::new();
    put_u64(&mut b, scans.len() as u64);
    for s in scans {
        put_u64(&mut b, s.t_ns);
        put_u64(&mut b, s.vms.len() as u64);
        for (vm, rows) in &s.vms {
            put_str(&mut b, vm);
            put_u64(&mut b, rows.len() as u64);
            for (c, ns) in rows {
                put_str(&mut b, c.kind.as_str());
                put_str(&mut b, &c.name);
                put_u64(&mut b, *ns);
            }
        }
    }
    pack(&b)
}

pub fn decode_culprits(payload: &[u8]) -> DResult<Vec<CulpritScan>> {
    let body = unpack(payload)?;
    let mut d = Dec::new(&body);
    let n = d.count(2, "scan")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t_ns = d.u64()?;
        let nv = d.count(2, "VM")?;
        let mut vms = Vec::with_capacity(nv);
        for _ in 0..nv {
            let vm = d.str()?.to_string();
            let nr = d.count(3, "culprit")?;
            let mut rows = Vec::with_capacity(nr);
            for _ in 0..nr {
                // A kind a newer writer added reads as unknown, its name kept.
                let kind = Kind::parse(d.str()?).unwrap_or(Kind::Unknown);
                rows.push((Culprit::new(kind, d.str()?), d.u64()?));
            }
            vms.push((vm, rows));
        }
        out.push(CulpritScan { t_ns, vms });
    }
    d.finish()?;
    Ok(out)
}

/// Episodes in time order, each time a delta from the one before (the
/// first from 0): a busy ring's batch is mostly 2-4 bytes a time.
pub fn encode_steal(episodes: &[StealEpisodeRecord]) -> Vec<u8> {
    let mut b = Vec::new();
    put_u64(&mut b, episodes.len() as u64);
    let mut prev = 0;
    for e in episodes {
        put_delta(&mut b, prev, e.t_ns);
        prev = e.t_ns;
        put_u64(&mut b, e.cpu as u64);
        put_u64(&mut b, e.ns);
        match &e.victim {
            None => put_u64(&mut b, 0),
            Some(v) => {
                put_u64(&mut b, v.tid as u64);
                put_u64(&mut b, v.pid as u64);
                put_str(&mut b, &v.comm);
            }
        }
    }
    pack(&b)
}

pub fn decode_steal(payload: &[u8]) -> DResult<Vec<StealEpisodeRecord>> {
    let body = unpack(payload)?;
    let mut d = Dec::new(&body);
    let n = d.count(4, "episode")?;
    let mut out = Vec::with_capacity(n);
    let mut prev = 0;
    for _ in 0..n {
        let t_ns = d.delta(prev)?;
        prev = t_ns;
        let cpu = d.u32()?;
        let ns = d.u64()?;
        let victim = match d.u32()? {
            0 => None,
            tid => Some(StealVictimRecord {
                tid,
                pid: d.u32()?,
                comm: d.str()?.to_string(),
            }),
        };
        out.push(StealEpisodeRecord {
            t_ns,
            cpu,
            ns,
            victim,
        });
    }
    d.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn culprit_scans_round_trip() {
        let scans = vec![
            CulpritScan {
                t_ns: 5,
                vms: vec![(
                    "web".into(),
                    vec![
                        (Culprit::new(Kind::HostProcess, "burn"), 900),
                        (Culprit::other(), 7),
                    ],
                )],
            },
            CulpritScan {
                t_ns: 1 << 40,
                vms: vec![],
            },
        ];
        assert_eq!(decode_culprits(&encode_culprits(&scans)).unwrap(), scans);
        assert!(decode_culprits(&[0, 3, 1]).is_err(), "a cut-off payload");
    }

    #[test]
    fn steal_episodes_round_trip() {
        let eps = vec![
            StealEpisodeRecord {
                t_ns: 1 << 40,
                cpu: 1,
                ns: 18_200_000,
                victim: Some(StealVictimRecord {
                    tid: 813,
                    pid: 812,
                    comm: "postgres".into(),
                }),
            },
            StealEpisodeRecord {
                t_ns: (1 << 40) + 5,
                cpu: 0,
                ns: 100_000,
                victim: None,
            },
        ];
        assert_eq!(decode_steal(&encode_steal(&eps)).unwrap(), eps);
        assert!(decode_steal(&encode_steal(&eps)[..6]).is_err(), "cut off");
    }
}
