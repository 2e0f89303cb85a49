//! The live tests' require/skip rule is the workspace's one
//! (`stealscope_testkit`): a test that cannot run here FAILS when `CI` is
//! set to anything but empty, `0` or `false`, and otherwise skips, saying
//! why on a `SKIPPED (not CI): ...` line and in the skip log.

#[allow(unused_imports)]
pub use stealscope_testkit::{ci, require, skip};
