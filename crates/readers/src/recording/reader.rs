//! Reads a recording front to back, one record per frame, in bounded
//! memory. A cut-off tail (an incomplete last frame, a bad CRC in the last
//! frame, or a zero-filled tail after a crash) ends the reading with a note;
//! anything else that is wrong is an error naming the file, the offset and
//! what was wrong. No length is used before it is checked against the file.

use super::checkpoint::CheckpointDecoder;
use super::codec::DecodeError;
use super::events::{decode_culprits, decode_note, decode_probes, decode_steal};
use super::format::*;
use super::series::{CounterDecoder, IrqDecoder, StatDecoder, VcpuDecoder};
use crate::error::{ReadError, Result};
use std::io::{BufReader, Read};
use std::path::Path;

pub struct RecordingReader<R> {
    r: R,
    name: String,
    len: u64,
    offset: u64,
    header: Header,
    stat: StatDecoder,
    irq: IrqDecoder,
    vcpu: VcpuDecoder,
    counters: CounterDecoder,
    checkpoints: CheckpointDecoder,
    truncated: Option<String>,
}

/// A frame as read: where it starts, its kind byte and payload.
struct Frame {
    at: u64,
    kind: u8,
    payload: Vec<u8>,
}

fn kind_name(k: u8) -> String {
    Kind::from_u8(k).map_or_else(|| format!("kind-{k}"), |k| k.name().to_string())
}

impl RecordingReader<BufReader<std::fs::File>> {
    pub fn open(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| ReadError::io(&name, e))?;
        let len = f.metadata().map_err(|e| ReadError::io(&name, e))?.len();
        RecordingReader::new(BufReader::with_capacity(64 * 1024, f), len, &name)
    }
}

impl<R: Read> RecordingReader<R> {
    /// Reads the magic and the header from `r`, which holds `len` bytes.
    pub fn new(r: R, len: u64, name: &str) -> Result<Self> {
        let mut rd = RecordingReader {
            r,
            name: name.to_string(),
            len,
            offset: 0,
            header: Header::new(1.0, 0.0, 0),
            stat: StatDecoder::new(0),
            irq: IrqDecoder::new(0),
            vcpu: VcpuDecoder::new(0),
            counters: CounterDecoder::new(0),
            checkpoints: CheckpointDecoder::default(),
            truncated: None,
        };
        let mut magic = [0u8; 8];
        if len < 8 || rd.read_exact(&mut magic).is_err() || magic != MAGIC {
            return Err(rd.error(0, "not a stealscope recording (no recording magic)"));
        }
        rd.offset = 8;
        let frame = match rd.frame()? {
            Some(f) if f.kind == Kind::Header as u8 => f,
            Some(f) => {
                return Err(rd.error(
                    f.at,
                    format!("first frame is {}, not the header", kind_name(f.kind)),
                ))
            }
            None => {
                let why = rd.truncated.take().unwrap_or_else(|| "no frames".into());
                return Err(rd.error(8, format!("header incomplete: {why}")));
            }
        };
        let h: Header = serde_json::from_slice(&frame.payload)
            .map_err(|e| rd.error(8, format!("header is not valid: {e}")))?;
        if !h.format.starts_with(FORMAT_PREFIX) {
            return Err(rd.error(8, format!("format {:?} is not a recording", h.format)));
        }
        if h.min_reader_version > VERSION {
            return Err(rd.error(
                8,
                format!(
                    "needs a reader of version {} (this build reads version {VERSION}); update stealscope",
                    h.min_reader_version
                ),
            ));
        }
        if !(h.rate_hz.is_finite() && h.rate_hz > 0.0) {
            return Err(rd.error(8, format!("rate_hz {} is not a positive number", h.rate_hz)));
        }
        if h.clk_tck == Some(0) {
            return Err(rd.error(8, "clk_tck is 0"));
        }
        let s = h.start_mono_ns;
        rd.stat = StatDecoder::new(s);
        rd.irq = IrqDecoder::new(s);
        rd.vcpu = VcpuDecoder::new(s);
        rd.counters = CounterDecoder::new(s);
        rd.header = h;
        Ok(rd)
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Why reading stopped before the end of the file, if it did.
    pub fn truncation(&self) -> Option<&str> {
        self.truncated.as_deref()
    }

    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// Bytes read so far (the end of the last complete frame).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn error(&self, at: u64, msg: impl std::fmt::Display) -> ReadError {
        ReadError::parse(&self.name, format!("offset {at}: {msg}"))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        self.r
            .read_exact(buf)
            .map_err(|e| ReadError::io(&self.name, e))
    }

    /// Whether every byte from here to the end of the file is zero.
    fn rest_is_zero(&mut self) -> Result<bool> {
        let mut buf = [0u8; 8192];
        loop {
            let n = self
                .r
                .read(&mut buf)
                .map_err(|e| ReadError::io(&self.name, e))?;
            if n == 0 {
                return Ok(true);
            }
            if buf[..n].iter().any(|&b| b != 0) {
                return Ok(false);
            }
        }
    }

    /// The next complete, CRC-checked frame; None at the end or at a cut-off tail.
    fn frame(&mut self) -> Result<Option<Frame>> {
        let at = self.offset;
        let left = self.len.saturating_sub(at);
        if left == 0 || self.truncated.is_some() {
            return Ok(None);
        }
        if left < 5 {
            self.truncated = Some(format!(
                "incomplete frame header at offset {at} ({left} bytes)"
            ));
            return Ok(None);
        }
        let mut head = [0u8; 5];
        self.read_exact(&mut head)?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let kind = head[4];
        if len > MAX_FRAME_LEN {
            return Err(self.error(
                at,
                format!(
                    "frame length {len} is absurd (limit {MAX_FRAME_LEN}): the file is corrupt"
                ),
            ));
        }
        let need = FRAME_OVERHEAD + len as u64;
        if need > left {
            self.truncated = Some(format!(
                "incomplete {} frame at offset {at} ({need} bytes, {left} left)",
                kind_name(kind)
            ));
            return Ok(None);
        }
        let mut payload = vec![0u8; len as usize];
        self.read_exact(&mut payload)?;
        let mut crc = [0u8; 4];
        self.read_exact(&mut crc)?;
        let mut h = crc32fast::Hasher::new();
        h.update(&[kind]);
        h.update(&payload);
        if h.finalize() != u32::from_le_bytes(crc) {
            let after = left - need;
            if after == 0 {
                self.truncated = Some(format!(
                    "bad CRC in the last frame ({}, offset {at})",
                    kind_name(kind)
                ));
                return Ok(None);
            }
            // A crash of the machine can leave the end of the file zeroed.
            if self.rest_is_zero()? {
                self.truncated = Some(format!("zero-filled tail from offset {at}"));
                return Ok(None);
            }
            return Err(self.error(
                at,
                format!(
                    "bad CRC in a {} frame of {len} bytes, and {after} bytes follow it: the file is corrupt",
                    kind_name(kind)
                ),
            ));
        }
        self.offset += need;
        Ok(Some(Frame { at, kind, payload }))
    }

    /// The next record; None at the end of the file or of its readable part
    /// (then [`RecordingReader::truncation`] says why).
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        // Table frames only change the decoders' state: read on past them.
        loop {
            let Some(f) = self.frame()? else {
                return Ok(None);
            };
            let Some(kind) = Kind::from_u8(f.kind) else {
                return Ok(Some(Record::Unknown {
                    kind: f.kind,
                    offset: f.at,
                }));
            };
            match self.decode(kind, &f.payload) {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => continue,
                Err(e) => return Err(self.error(f.at, format!("{} frame: {e}", kind.name()))),
            }
        }
    }

    fn decode(&mut self, kind: Kind, p: &[u8]) -> std::result::Result<Option<Record>, DecodeError> {
        let json_err = |e: serde_json::Error| DecodeError(format!("not valid: {e}"));
        Ok(Some(match kind {
            Kind::Header => return Err(DecodeError("a second header frame".into())),
            Kind::Checkpoint => {
                let (t_ns, files) = self.checkpoints.decode(p)?;
                Record::Checkpoint { t_ns, files }
            }
            Kind::Stat => Record::Stat(self.stat.decode(p)?),
            Kind::IrqTable => {
                self.irq.table(p)?;
                return Ok(None);
            }
            Kind::Irq => Record::Irq(self.irq.decode(p)?),
            Kind::VcpuTable => {
                self.vcpu.table(p)?;
                return Ok(None);
            }
            Kind::Vcpu => Record::Vcpu(self.vcpu.decode(p)?),
            Kind::Counters => Record::Counters(self.counters.decode(p)?),
            Kind::Probe => Record::Probes(decode_probes(p)?),
            Kind::Culprits => Record::Culprits(decode_culprits(p)?),
            Kind::Steal => Record::Steal(decode_steal(p)?),
            Kind::Note => {
                let (t_ns, text) = decode_note(p)?;
                Record::Note { t_ns, text }
            }
            Kind::End => Record::End(serde_json::from_slice(p).map_err(json_err)?),
        }))
    }
}

/// Whether `path` is a file that starts with the recording magic.
pub fn is_recording(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == MAGIC
}
