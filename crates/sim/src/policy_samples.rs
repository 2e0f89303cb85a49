//! What the simulated `place` measures for its prediction: each task's
//! demand (run plus run-queue wait) as one value per [`SAMPLE_S`], the
//! last [`KEEP_S`] kept, as the daemon keeps its 0.5 s samples; turned into
//! the prediction's input at a pass.

use crate::host::Host;
use std::collections::VecDeque;

/// One demand value per this many simulated seconds.
pub const SAMPLE_S: f64 = 1.0;
/// Samples kept: the prediction replays this much of the past.
pub const KEEP_S: f64 = 60.0;

#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Per task: demand-seconds and seconds summed since the last sample.
    acc: Vec<f64>,
    acc_s: f64,
    by_task: Vec<VecDeque<f64>>,
}

impl Samples {
    /// Adds what each live task ran and waited over `secs`.
    pub fn observe(&mut self, h: &Host, secs: f64) {
        if self.acc.len() < h.tasks.len() {
            self.acc.resize(h.tasks.len(), 0.0);
            self.by_task.resize(h.tasks.len(), VecDeque::new());
        }
        for (i, t) in h.live_tasks() {
            self.acc[i] += (t.run + t.wait).min(1.0) * secs;
        }
        self.acc_s += secs;
        if self.acc_s + 1e-9 < SAMPLE_S {
            return;
        }
        let keep = (KEEP_S / SAMPLE_S) as usize;
        for (i, t) in h.tasks.iter().enumerate() {
            let q = &mut self.by_task[i];
            if t.alive {
                q.push_back((self.acc[i] / self.acc_s).min(1.0));
                if q.len() > keep {
                    q.pop_front();
                }
            } else {
                q.clear();
            }
            self.acc[i] = 0.0;
        }
        self.acc_s = 0.0;
    }

    /// The samples of `h`'s live tasks (index into `h.tasks`), oldest
    /// first; tasks not sampled yet are left out.
    pub fn of_live(&self, h: &Host) -> Vec<(usize, Vec<f64>)> {
        h.live_tasks()
            .filter_map(|(i, _)| {
                let q = self.by_task.get(i).filter(|q| !q.is_empty())?;
                Some((i, q.iter().copied().collect()))
            })
            .collect()
    }
}
