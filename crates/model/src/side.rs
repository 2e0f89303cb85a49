//! Which end of an interval a side is read at (own module: the guest
//! observation and the host side both need it, and neither owns the other).

/// Which end of an interval is read: some inputs are only used at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Start,
    End,
}
