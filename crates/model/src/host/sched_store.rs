//! The scheduler-event collector's reading of one side, as stored in a
//! snapshot at /stealscope/sched.json (each side its own file), so that an
//! offline `host`/`doctor` reports the same attribution as the live one.
//! Either a cumulative sample or the reasons there is none:
//! `{"route":"bpf","monotonic_ns":N,"stats":{..},"threads":[{"tid":N,
//! "by":[{"tid":..,"tgid":..,"comm":..,"kthread":..,"ns":..}],"irq_ns":..,
//! "idle_ns":..,"unknown_ns":..,"episodes":{"buckets":[[i,n],..],"count":..,
//! "sum_ns":..,"max_ns":..,"over_1ms":..,"over_10ms":..}}]}` or
//! `{"unavailable":["bpf: ...","tracefs: ..."]}`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stealscope_who::{EpisodeHist, Route, SchedSample, SchedStats, Thread, ThreadWaits};

pub const SCHED_FILE: &str = "/stealscope/sched.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StoredSched {
    Sample(StoredSample),
    Unavailable { unavailable: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSample {
    /// "bpf" or "tracefs".
    pub route: String,
    pub monotonic_ns: u64,
    pub stats: StoredStats,
    pub threads: Vec<StoredThread>,
    /// Routes tried before this one and why each could not start
    /// (`bpf: ...`): a fallback says why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredStats {
    pub events: u64,
    pub lost_events: u64,
    pub overflows: u64,
    /// Absent in snapshots from before it was counted.
    #[serde(default)]
    pub missed_switches: u64,
    /// Threads the collector could not watch (map full); absent before
    /// issue 29 and when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unwatched: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredThread {
    pub tid: u32,
    /// Charged to each thread that ran, as rows `{tid,tgid,comm,kthread,ns}`.
    #[serde(with = "thread_rows")]
    pub by: BTreeMap<Thread, u64>,
    pub irq_ns: u64,
    pub idle_ns: u64,
    pub unknown_ns: u64,
    pub episodes: StoredHist,
    /// The thread's /proc schedstat (run ns, wait ns, times run) read on
    /// the outside of this reading (live captures): before it at an
    /// interval's start, after it later, so schedstat's interval holds the
    /// collector's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedstat: Option<[u64; 3]>,
    /// The same read on the inside (after the reading at the start, before
    /// it later): schedstat's interval inside the collector's. A wait that
    /// ends while the collector is read (a vCPU queued behind the reader
    /// itself, 1.5 ms in a CI run) is in one and not the other; the two
    /// bracket what the collector could have charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedstat_inside: Option<[u64; 3]>,
}

/// `by` as the file has always held it: a list of rows, each a thread's
/// identity with its ns beside it (a JSON object cannot key by a struct).
mod thread_rows {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;
    use stealscope_who::Thread;

    #[derive(Serialize)]
    struct RowRef<'a> {
        #[serde(flatten)]
        thread: &'a Thread,
        ns: u64,
    }

    #[derive(Deserialize)]
    struct Row {
        #[serde(flatten)]
        thread: Thread,
        ns: u64,
    }

    pub fn serialize<S: Serializer>(by: &BTreeMap<Thread, u64>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(by.iter().map(|(thread, &ns)| RowRef { thread, ns }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<Thread, u64>, D::Error> {
        let rows = Vec::<Row>::deserialize(d)?;
        Ok(rows.into_iter().map(|r| (r.thread, r.ns)).collect())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredHist {
    /// Non-empty buckets only: [index, count].
    pub buckets: Vec<(usize, u64)>,
    pub count: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    pub over_1ms: u64,
    pub over_10ms: u64,
}

impl From<&EpisodeHist> for StoredHist {
    fn from(h: &EpisodeHist) -> Self {
        StoredHist {
            buckets: h.buckets().collect(),
            count: h.count,
            sum_ns: h.sum_ns,
            max_ns: h.max_ns,
            over_1ms: h.over_1ms,
            over_10ms: h.over_10ms,
        }
    }
}

impl StoredHist {
    fn to_hist(&self) -> EpisodeHist {
        EpisodeHist::with_buckets(self.buckets.iter().copied()).totals(
            self.count,
            self.sum_ns,
            self.max_ns,
            self.over_1ms,
            self.over_10ms,
        )
    }
}

impl From<&SchedSample> for StoredSched {
    fn from(s: &SchedSample) -> Self {
        StoredSched::Sample(StoredSample {
            route: s.route.as_str().to_string(),
            monotonic_ns: s.monotonic_ns,
            stats: StoredStats {
                events: s.stats.events,
                lost_events: s.stats.lost_events,
                overflows: s.stats.overflows,
                missed_switches: s.stats.missed_switches,
                unwatched: s.stats.unwatched,
            },
            threads: s
                .threads
                .values()
                .map(|t| StoredThread {
                    tid: t.tid,
                    by: t.by_thread.clone(),
                    irq_ns: t.irq_ns,
                    idle_ns: t.idle_ns,
                    unknown_ns: t.unknown_ns,
                    episodes: (&t.episodes).into(),
                    schedstat: None,
                    schedstat_inside: None,
                })
                .collect(),
            fallbacks: Vec::new(),
        })
    }
}

impl StoredSample {
    /// Back to the collector's type; Err names what is wrong.
    pub fn to_sample(&self) -> Result<SchedSample, String> {
        let route = match self.route.as_str() {
            "bpf" => Route::Bpf,
            "tracefs" => Route::Tracefs,
            r => return Err(format!("unknown route {r:?}")),
        };
        let threads = self
            .threads
            .iter()
            .map(|t| {
                (
                    t.tid,
                    ThreadWaits {
                        tid: t.tid,
                        by_thread: t.by.clone(),
                        irq_ns: t.irq_ns,
                        idle_ns: t.idle_ns,
                        unknown_ns: t.unknown_ns,
                        episodes: t.episodes.to_hist(),
                    },
                )
            })
            .collect();
        Ok(SchedSample {
            route,
            monotonic_ns: self.monotonic_ns,
            threads,
            stats: SchedStats {
                events: self.stats.events,
                lost_events: self.stats.lost_events,
                overflows: self.stats.overflows,
                missed_switches: self.stats.missed_switches,
                unwatched: self.stats.unwatched,
            },
            procs: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json() {
        let mut t = ThreadWaits {
            tid: 7,
            irq_ns: 3,
            idle_ns: 4,
            unknown_ns: 5,
            ..Default::default()
        };
        t.by_thread.insert(
            Thread {
                tid: 9,
                tgid: 9,
                comm: "a b)".into(),
                kthread: false,
            },
            100,
        );
        t.episodes.record(1500);
        t.episodes.record(20_000_000);
        let s = SchedSample {
            route: Route::Tracefs,
            monotonic_ns: 42,
            threads: [(7, t)].into_iter().collect(),
            stats: SchedStats {
                events: 10,
                lost_events: 1,
                overflows: 0,
                missed_switches: 2,
                unwatched: 3,
            },
            procs: Default::default(),
        };
        let json = serde_json::to_string(&StoredSched::from(&s)).unwrap();
        let back: StoredSched = serde_json::from_str(&json).unwrap();
        let StoredSched::Sample(b) = back else {
            panic!("{json}")
        };
        assert_eq!(b.to_sample().unwrap(), s);
        let un: StoredSched = serde_json::from_str(r#"{"unavailable":["bpf: no"]}"#).unwrap();
        assert_eq!(
            un,
            StoredSched::Unavailable {
                unavailable: vec!["bpf: no".into()]
            }
        );
    }
}
