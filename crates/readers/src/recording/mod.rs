//! Recordings (`stealscope record`, format `stealscope-recording/1`, see
//! docs/recording-format.md): a magic, a JSON header frame, then CRC-checked
//! frames of checkpoints (snapshot sides) and delta-coded sample batches.

pub mod checkpoint;
pub mod codec;
pub mod events;
pub mod format;
pub mod reader;
pub mod series;
pub mod writer;

#[cfg(test)]
mod stat_encoder_tests;
#[cfg(test)]
mod tests;

pub use format::*;
pub use reader::{is_recording, RecordingReader};
pub use writer::RecordingWriter;
