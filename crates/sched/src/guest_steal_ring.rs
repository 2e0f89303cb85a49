//! Episodes from the guest steal program's BPF ring buffer: the record's
//! layout (`struct steal_event` in bpf/guest_steal.bpf.c) and the bounded
//! list of recent ones user space keeps.

use std::collections::VecDeque;
use stealscope_who::guest_steal::{StealEpisode, StealTaskId, StealVictim};

/// Bytes of one `struct steal_event`.
pub const RECORD_LEN: usize = 56;

/// Episodes kept for views (`top`, the largest of an interval): older ones
/// leave the list, and [`stealscope_who::GuestStealSample::episodes_unlisted`]
/// counts what an interval lost that way.
pub const RECENT: usize = 4096;

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

/// A record as the program wrote it, numbered `seq`; None when it is too
/// short to be one (never from a matching object).
pub fn decode(b: &[u8], seq: u64) -> Option<StealEpisode> {
    if b.len() < RECORD_LEN {
        return None;
    }
    let tid = u32_at(b, 28);
    let victim = if tid == 0 {
        StealVictim::Idle
    } else {
        let comm = &b[40..56];
        let end = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
        StealVictim::Task(StealTaskId {
            tid,
            tgid: u32_at(b, 32),
            start_ns: u64_at(b, 16),
            comm: String::from_utf8_lossy(&comm[..end]).into_owned(),
        })
    };
    Some(StealEpisode {
        seq,
        monotonic_ns: u64_at(b, 0),
        ns: u64_at(b, 8),
        cpu: u32_at(b, 24),
        victim,
    })
}

/// The most recent episodes, oldest first, at most `cap`.
#[derive(Debug, Clone)]
pub struct EpisodeLog {
    recent: VecDeque<StealEpisode>,
    cap: usize,
    /// Records taken so far (the next one's seq).
    seen: u64,
    /// Records too short to decode (a layout mismatch; counted, not hidden).
    pub malformed: u64,
}

impl EpisodeLog {
    pub fn new(cap: usize) -> EpisodeLog {
        EpisodeLog {
            recent: VecDeque::new(),
            cap,
            seen: 0,
            malformed: 0,
        }
    }

    /// Takes one raw record from the ring; the episode, when it decodes.
    pub fn push(&mut self, record: &[u8]) -> Option<&StealEpisode> {
        let Some(e) = decode(record, self.seen) else {
            self.malformed += 1;
            return None;
        };
        self.seen += 1;
        if self.recent.len() == self.cap {
            self.recent.pop_front();
        }
        if self.cap == 0 {
            return None;
        }
        self.recent.push_back(e);
        self.recent.back()
    }

    pub fn seen(&self) -> u64 {
        self.seen
    }

    pub fn recent(&self) -> impl Iterator<Item = &StealEpisode> {
        self.recent.iter()
    }
}
