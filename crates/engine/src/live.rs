//! The engine as serve and top run it: the sampling loop on one thread,
//! the rule runner on another, both on a steady clock, until
//! [`Live::stop`]. The rate can change while it runs.

use crate::rules::{self, Findings};
use crate::sampler::{Sampler, SamplerOptions, Subscriber};
use crate::series::Series;
use crate::stop::{Rate, Stop};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stealscope_readers::own_threads;
use stealscope_readers::{ReadError, Source};

/// How long [`Live::stop`] waits for a rule run under way.
pub const RULES_GRACE: Duration = Duration::from_secs(1);

pub struct Live {
    stop: Arc<Stop>,
    rate: Arc<Rate>,
    threads: Vec<JoinHandle<()>>,
}

/// A sampler opened for [`Live::start`]: opened first, so that a command
/// reports a missing /proc/stat before it binds a port or takes a terminal.
pub struct Opened {
    sampler: Sampler,
    series: Arc<Series>,
}

impl Opened {
    /// The series the rule runner reads is kept by the sampler.
    pub fn open(
        mut opts: SamplerOptions,
        cpus_from: Option<&dyn Source>,
    ) -> Result<Opened, ReadError> {
        let series = Arc::new(Series::default());
        opts.series = Some(series.clone());
        Ok(Opened {
            sampler: Sampler::open(opts, cpus_from)?,
            series,
        })
    }

    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }
}

impl Live {
    /// Starts the sampler at `rate_hz`, and the rule runner every
    /// `findings_every` handing its reports to `findings`.
    pub fn start(
        opened: Opened,
        rate_hz: f64,
        findings_every: Duration,
        mut sub: impl Subscriber + Send + 'static,
        findings: Arc<dyn Findings>,
    ) -> std::io::Result<Live> {
        let stop = Arc::new(Stop::default());
        let rate = Arc::new(Rate::new(rate_hz));
        let root = opened.sampler.root().to_path_buf();
        let sampler = {
            let (stop, rate) = (stop.clone(), rate.clone());
            own_threads::spawn("sampler", move || {
                // Live subscribers report their errors themselves.
                let _ = opened.sampler.run(&rate, &mut sub, &*stop);
            })?
        };
        let rules = {
            let (stop, rate, series) = (stop.clone(), rate.clone(), opened.series);
            own_threads::spawn("rules", move || {
                rules::run(&root, findings_every, &rate, &series, &*findings, &stop)
            })
        };
        let mut threads = vec![sampler];
        match rules {
            Ok(t) => threads.push(t),
            Err(e) => {
                stop.stop();
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
        Ok(Live {
            stop,
            rate,
            threads,
        })
    }

    pub fn rate_hz(&self) -> f64 {
        self.rate.hz()
    }

    /// Changes the sampling rate from the next sample on.
    pub fn set_rate_hz(&self, hz: f64) {
        self.rate.set_hz(hz);
    }

    /// A thread of the engine ended (it only does when it panicked).
    pub fn failed(&self) -> bool {
        self.threads.iter().any(JoinHandle::is_finished)
    }

    /// Stops both threads; waits for the sampler, and for the rule runner
    /// at most [`RULES_GRACE`]. The runner sees the stop only between its
    /// reads: one caught in an interval's end and next start (every file
    /// `doctor` reads, twice) took over 10 s to return on a host with both
    /// CPUs busy, so `top` did not quit on `q`. Its result would go
    /// nowhere; the process ends with it.
    pub fn stop(self) {
        self.stop.stop();
        let mut threads = self.threads.into_iter();
        if let Some(sampler) = threads.next() {
            let _ = sampler.join();
        }
        let deadline = Instant::now() + RULES_GRACE;
        for t in threads {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}
