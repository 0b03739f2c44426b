//! The one place that decides what a trace file is: which names a folder listing takes as
//! traces, and how a file's bytes are decoded (plain JSON or gzip, told by the magic bytes and
//! never by the extension, so a `.json` that is really gzip, or the reverse, still reads).
//!
//! Every reader of traces asks here: [`crate::trace::parse`] (files and in-memory bytes),
//! `accounting::summary` (folders expanded to their traces) and `validate` (reference-step
//! folders).

/// How a trace's bytes are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TraceFormat {
    /// Kineto / Chrome trace JSON as text.
    Json,
    /// The same JSON, gzip-compressed (one or more members, as `torch.profiler` writes
    /// `*.pt.trace.json.gz`).
    Gzip,
}

/// The gzip magic bytes (RFC 1952, section 2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The file-name endings a folder of traces is searched for.
const TRACE_SUFFIXES: [&str; 2] = [".json", ".json.gz"];

impl TraceFormat {
    /// The format of a trace whose first bytes are `head` (at least two bytes are needed to
    /// see gzip; fewer read as JSON, which then fails with the JSON reader's own message).
    pub(crate) fn detect(head: &[u8]) -> TraceFormat {
        if head.starts_with(&GZIP_MAGIC) {
            TraceFormat::Gzip
        } else {
            TraceFormat::Json
        }
    }
}

/// Whether a folder listing takes the file `name` as a trace (`*.json`, `*.json.gz`).
pub(crate) fn is_trace_name(name: &str) -> bool {
    TRACE_SUFFIXES.iter().any(|s| name.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_told_by_its_magic_bytes() {
        assert_eq!(TraceFormat::detect(&[0x1f, 0x8b, 8, 0]), TraceFormat::Gzip);
        assert_eq!(
            TraceFormat::detect(b"{\"traceEvents\": []}"),
            TraceFormat::Json
        );
        assert_eq!(TraceFormat::detect(&[0x1f]), TraceFormat::Json);
        assert_eq!(TraceFormat::detect(b""), TraceFormat::Json);
    }

    #[test]
    fn folder_listings_take_json_and_gzipped_json() {
        assert!(is_trace_name("rank0.json"));
        assert!(is_trace_name("x_rank1.123.pt.trace.json.gz"));
        assert!(!is_trace_name("notes.txt"));
        assert!(!is_trace_name("trace.json.gz.tmp"));
        assert!(!is_trace_name("trace.gz"));
    }
}
