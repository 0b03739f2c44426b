//! The slim in-memory form of one trace file: only what the analysis needs (GPU activity,
//! annotations, launch calls and a little metadata), with kernel names interned.

use std::collections::HashMap;
use std::path::PathBuf;

/// What kind of GPU activity an event was, from its `cat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpuKind {
    Kernel,
    Memcpy,
    Memset,
}

/// One kernel, memcpy or memset on the GPU timeline. Every GPU op of a trace is kept until its
/// summary is made, so this is the bulk of a trace's memory: 48 bytes, holding only what the
/// analysis reads (the stream and the graph and collective ids were never read beyond "is
/// there one", and took 40 more bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuOp {
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    /// Links the op to the runtime call that launched it (`args.correlation`).
    pub correlation: Option<u64>,
    /// The GPU (`pid` of GPU events, or `args.device`).
    pub(crate) device: i64,
    /// Index into [`ParsedTrace::names`].
    pub(crate) name: u32,
    pub(crate) kind: GpuKind,
    /// Replayed from a CUDA graph (`args["graph id"]` present, CUDA 12+).
    pub(crate) graph: bool,
    /// `args["Collective name"]` present: collectives linked to `record_param_comms`.
    pub(crate) collective: bool,
    /// `args.category` when it names a category: decodesim's own timelines declare each
    /// kernel's category, and [`TraceMeta::declares_categories`] says whether to trust it.
    pub(crate) declared: Option<crate::category::Category>,
}

/// Which timeline an annotation is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `user_annotation` (or a `cpu_op` step marker) on a CPU thread.
    Cpu,
    /// `gpu_user_annotation`: Kineto's GPU-side twin of a CPU annotation.
    Gpu,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    pub name: String,
    pub side: Side,
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    pub(crate) pid: i64,
    pub(crate) tid: i64,
}

/// A runtime/driver API call (cudaLaunchKernel, cudaGraphLaunch, hipModuleLaunchKernel, ...).
/// Only the calls whose correlation id some GPU op carries are kept once a file is read: the
/// others (device queries, attribute calls: three quarters of the runtime events of a real
/// trace) can link no GPU work to a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Launch {
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    pub(crate) correlation: u64,
    /// The call replays a whole CUDA/HIP graph: one correlation id for many kernels.
    pub(crate) graph: bool,
}

/// Trace-level metadata that is useful for reporting and rank assignment.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TraceMeta {
    /// `distributedInfo.rank`.
    pub rank: Option<i64>,
    /// `distributedInfo.world_size`.
    pub(crate) world_size: Option<i64>,
    /// `deviceProperties[].name`, non-empty ones only.
    pub(crate) device_names: Vec<String>,
    /// `distributedInfo.backend` (nccl, gloo, ...).
    pub(crate) backend: Option<String>,
    /// `distributedInfo.nccl_version`.
    pub(crate) nccl_version: Option<String>,
    /// `baseTimeNanoseconds`: when this process's profiler started (wall clock, ns).
    pub(crate) base_time_ns: Option<f64>,
    /// `otherData.generator` is "decodesim": a simulated timeline whose kernels declare their
    /// category in `args.category`.
    pub(crate) declares_categories: bool,
}

/// Event counts, so a report can say what was read and what was skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounts {
    pub total: u64,
    /// Skipped from the `cat` alone, before decoding (python_function, cpu_op, flows, ...).
    pub skipped_early: u64,
    /// Decoded but missing a field the analysis needs (for example a kernel without `dur`).
    pub malformed: u64,
    /// Events whose invalid UTF-8 was replaced with U+FFFD so they could be read.
    pub lossy_utf8: u64,
}

#[derive(Debug, Clone, Default)]
pub struct ParsedTrace {
    pub(crate) path: PathBuf,
    pub(crate) meta: TraceMeta,
    pub gpu_ops: Vec<GpuOp>,
    pub annotations: Vec<Annotation>,
    pub launches: Vec<Launch>,
    /// Interned kernel and collective names.
    pub names: Vec<String>,
    pub counts: EventCounts,
    /// Things that were tolerated but that the user may want to know (first few only).
    pub warnings: Vec<String>,
}

impl ParsedTrace {
    pub(crate) fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// Interns strings so each distinct kernel name is stored and classified once.
#[derive(Default)]
pub(crate) struct Interner {
    map: HashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.to_owned());
        self.map.insert(s.to_owned(), id);
        id
    }

    pub(crate) fn into_names(self) -> Vec<String> {
        self.names
    }
}
