//! Output: renderers for the reports (text for people, JSON for scripts).

pub mod json;
pub mod place;
pub mod sim;
pub mod text;
