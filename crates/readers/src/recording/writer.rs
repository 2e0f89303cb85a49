//! Writes a recording as a stream: each sample goes into the open batch of
//! its series, [`RecordingWriter::flush`] (about once a second) writes the
//! batches as frames, so memory does not grow with the duration and a
//! process killed with SIGKILL loses at most the batches not yet flushed.
//! Each frame reaches the file in one write.

use super::checkpoint::{CheckpointEncoder, Files};
use super::events::{encode_culprits, encode_note, encode_probes, encode_steal};
use super::format::{
    CulpritScan, EndInfo, Header, Kind, ProbeRecord, StealEpisodeRecord, ThreadTimes, VcpuEntry,
    MAGIC,
};
use super::series::{CounterEncoder, Frames, IrqEncoder, StatEncoder, VcpuEncoder};
use crate::error::{ReadError, Result};
use crate::interrupts::Interrupts;
use crate::perf::CounterSample;
use crate::stat::ProcStat;
use std::fs::File;
use std::io::Write;

/// A stat batch is closed early past this many values (1000 Hz on a big
/// host; ~1 MiB encoded, 8 MiB held).
const MAX_BATCH_VALUES: usize = 1 << 20;

pub struct RecordingWriter {
    file: File,
    path: String,
    stat: StatEncoder,
    irq: IrqEncoder,
    vcpu: VcpuEncoder,
    counters: CounterEncoder,
    probes: Vec<ProbeRecord>,
    culprits: Vec<CulpritScan>,
    steal: Vec<StealEpisodeRecord>,
    checkpoints: CheckpointEncoder,
    frames: Frames,
    bytes: u64,
}

impl RecordingWriter {
    /// Writes the magic and the header to `file` (named `path` in errors).
    pub fn create(file: File, path: &str, header: &Header) -> Result<Self> {
        let start = header.start_mono_ns;
        let mut w = RecordingWriter {
            file,
            path: path.to_string(),
            stat: StatEncoder::new(start),
            irq: IrqEncoder::new(start),
            vcpu: VcpuEncoder::new(start),
            counters: CounterEncoder::new(start),
            probes: Vec::new(),
            culprits: Vec::new(),
            steal: Vec::new(),
            checkpoints: CheckpointEncoder::default(),
            frames: Vec::new(),
            bytes: 0,
        };
        w.write_all(&MAGIC)?;
        let json = serde_json::to_vec(header).map_err(|e| ReadError::parse(path, e))?;
        w.frame(Kind::Header, &json)?;
        Ok(w)
    }

    fn write_all(&mut self, b: &[u8]) -> Result<()> {
        self.file
            .write_all(b)
            .map_err(|e| ReadError::io(&self.path, e))?;
        self.bytes += b.len() as u64;
        Ok(())
    }

    fn frame(&mut self, kind: Kind, payload: &[u8]) -> Result<()> {
        let mut f = Vec::with_capacity(payload.len() + 9);
        f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        f.push(kind as u8);
        f.extend_from_slice(payload);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&f[4..]);
        f.extend_from_slice(&crc.finalize().to_le_bytes());
        self.write_all(&f)
    }

    fn write_pending(&mut self) -> Result<()> {
        let frames = std::mem::take(&mut self.frames);
        for (k, p) in &frames {
            self.frame(*k, p)?;
        }
        Ok(())
    }

    pub fn stat(&mut self, t_ns: u64, s: &ProcStat) -> Result<()> {
        if let Some(p) = self.stat.push(t_ns, s) {
            self.frame(Kind::Stat, &p)?;
        }
        if self.stat.pending_values() > MAX_BATCH_VALUES {
            if let Some(p) = self.stat.take() {
                self.frame(Kind::Stat, &p)?;
            }
        }
        Ok(())
    }

    pub fn irq(&mut self, t_ns: u64, irq: &Interrupts) -> Result<()> {
        self.irq.push(t_ns, irq, &mut self.frames);
        self.write_pending()
    }

    pub fn vcpu(&mut self, t_ns: u64, threads: &[(VcpuEntry, ThreadTimes)]) -> Result<()> {
        self.vcpu.push(t_ns, threads, &mut self.frames);
        self.write_pending()
    }

    pub fn counters(&mut self, s: &CounterSample) {
        self.counters.push(s);
    }

    pub fn probe(&mut self, w: ProbeRecord) {
        self.probes.push(w);
    }

    /// Culprits of one host scan, written with the next flush.
    pub fn culprits(&mut self, s: CulpritScan) {
        self.culprits.push(s);
    }

    /// Steal episodes, in time order, written with the next flush.
    pub fn steal(&mut self, episodes: impl IntoIterator<Item = StealEpisodeRecord>) {
        self.steal.extend(episodes);
    }

    /// A note (what went wrong while recording) goes out at once.
    pub fn note(&mut self, t_ns: u64, text: &str) -> Result<()> {
        self.frame(Kind::Note, &encode_note(t_ns, text))
    }

    /// Writes every open batch.
    pub fn flush(&mut self) -> Result<()> {
        let batches = [
            (Kind::Stat, self.stat.take()),
            (Kind::Irq, self.irq.take()),
            (Kind::Vcpu, self.vcpu.take()),
            (Kind::Counters, self.counters.take()),
        ];
        for (k, p) in batches {
            if let Some(p) = p {
                self.frame(k, &p)?;
            }
        }
        if !self.probes.is_empty() {
            let p = encode_probes(&self.probes);
            self.probes.clear();
            self.frame(Kind::Probe, &p)?;
        }
        if !self.culprits.is_empty() {
            let p = encode_culprits(&self.culprits);
            self.culprits.clear();
            self.frame(Kind::Culprits, &p)?;
        }
        if !self.steal.is_empty() {
            let p = encode_steal(&self.steal);
            self.steal.clear();
            self.frame(Kind::Steal, &p)?;
        }
        Ok(())
    }

    /// Flushes, writes the files of a snapshot side and syncs the file, so
    /// that everything up to here survives a crash of the machine too.
    pub fn checkpoint(&mut self, t_ns: u64, files: &Files) -> Result<()> {
        self.flush()?;
        let p = self.checkpoints.encode(t_ns, files);
        self.frame(Kind::Checkpoint, &p)?;
        self.file
            .sync_data()
            .map_err(|e| ReadError::io(&self.path, e))
    }

    /// Flushes and writes the end frame. Returns the bytes written.
    pub fn finish(mut self, end: &EndInfo) -> Result<u64> {
        self.flush()?;
        let json = serde_json::to_vec(end).map_err(|e| ReadError::parse(&self.path, e))?;
        self.frame(Kind::End, &json)?;
        self.file
            .sync_data()
            .map_err(|e| ReadError::io(&self.path, e))?;
        Ok(self.bytes)
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }
}
