//! What can go wrong while drawing a chart. Defined here, on the ground floor, so that
//! [`crate::error::Error`] wraps it without importing `report`; `report::plot` re-exports it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{path}: unsupported plot format; expected a file name ending in .svg or .png")]
    Format { path: PathBuf },
    #[error("{path}: cannot draw the plot: {message}")]
    Draw { path: PathBuf, message: String },
    #[error("the embedded font could not be loaded: {0}")]
    Font(String),
    #[error("{path}: cannot write the plot: {message}")]
    Write { path: PathBuf, message: String },
    #[error("{path}: nothing to plot: {message}")]
    Empty { path: PathBuf, message: String },
}
