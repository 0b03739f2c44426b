//! The trace reader's error type and result. The type is defined on the ground floor
//! ([`crate::error::trace`]) so that the crate's `Error` can wrap it without importing `trace`.

pub use crate::error::trace::TraceError;

pub type Result<T> = std::result::Result<T, TraceError>;
