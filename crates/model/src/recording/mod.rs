//! Recordings: the engine writes one from the running machine
//! (crates/engine/src/record.rs), [`load`] turns one into a snapshot and a
//! timeline, so that `doctor --snapshot` and `report` read recordings with
//! the model code they use for snapshots.

pub mod load;

pub use load::{open, open_snapshot, Recording};

#[cfg(test)]
mod tests;
