//! Helpers that append ops with their FLOPs and bytes computed one way everywhere.

use super::op::{CostFamily, MeasureKey, Op, Shape, Stream};
use super::role::OpRole;
use crate::category::Category;
use crate::scenario::WeightFormat;

/// Activations are BF16 throughout the decode step.
pub(crate) const ACT_BYTES: f64 = 2.0;

pub(crate) struct Builder {
    pub(crate) ops: Vec<Op>,
    pub(crate) layer: i32,
    stream: Stream,
}

impl Builder {
    pub(crate) fn new() -> Self {
        Builder {
            ops: Vec::with_capacity(2048),
            layer: -1,
            stream: Stream::Compute,
        }
    }

    fn label(&self, name: &str) -> String {
        if self.layer >= 0 {
            format!("L{}.{}", self.layer, name)
        } else {
            name.to_string()
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push(
        &mut self,
        role: OpRole,
        name: &str,
        kernel: &'static str,
        family: CostFamily,
        category: Category,
        shape: Shape,
        weights: &str,
        flops: f64,
        bytes: f64,
    ) {
        let stream = if family.is_collective() {
            Stream::Comm
        } else {
            self.stream
        };
        self.ops.push(Op {
            name: self.label(name),
            role,
            kernel,
            layer: self.layer,
            family,
            category,
            stream,
            shape,
            weights: weights.to_string(),
            flops,
            bytes,
            message_bytes: 0,
            measure: None,
            group: 0,
            rank_scale: Vec::new(),
            waits_for: None,
            fused_norm: None,
            micro_batch: None,
            draft_pass: None,
        });
    }

    /// Records where the last op's kernel sits in a measurement table.
    pub fn measured(&mut self, key: MeasureKey) {
        if let Some(op) = self.ops.last_mut() {
            op.measure = Some(key);
        }
    }

    /// A dense GEMM: `m` tokens × (`k` → `n`), weights stored as `w`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm(
        &mut self,
        role: OpRole,
        name: &str,
        kernel: &'static str,
        category: Category,
        m: u64,
        n: u64,
        k: u64,
        w: WeightFormat,
    ) {
        let (mf, nf, kf) = (m as f64, n as f64, k as f64);
        let bytes = nf * kf * w.bytes_per_weight() + mf * kf * ACT_BYTES + mf * nf * ACT_BYTES;
        self.push(
            role,
            name,
            kernel,
            CostFamily::gemm_for(w),
            category,
            Shape { m, n, k, batch: 1 },
            &w.name(),
            2.0 * mf * nf * kf,
            bytes,
        );
        if w == WeightFormat::Bf16 {
            self.measured(MeasureKey::new("gemm_bf16", m, n, k));
        }
    }

    /// `batch` independent BF16 products (MLA's absorbed per-head projections).
    pub(crate) fn bmm(
        &mut self,
        name: &str,
        kernel: &'static str,
        batch: u64,
        m: u64,
        n: u64,
        k: u64,
    ) {
        let (b, mf, nf, kf) = (batch as f64, m as f64, n as f64, k as f64);
        let bytes = b * (nf * kf + mf * kf + mf * nf) * ACT_BYTES;
        self.push(
            OpRole::AbsorbedBmm,
            name,
            kernel,
            CostFamily::GemmBf16,
            Category::Gemm,
            Shape { m, n, k, batch },
            "bf16",
            2.0 * b * mf * nf * kf,
            bytes,
        );
        self.measured(MeasureKey {
            batch,
            ..MeasureKey::new("gemm_bf16", m, n, k)
        });
    }

    /// RMSNorm over `rows` vectors of `width`; `fused_add` also reads and writes the residual.
    pub(crate) fn norm(
        &mut self,
        name: &str,
        kernel: &'static str,
        rows: u64,
        width: u64,
        fused_add: bool,
    ) {
        let elems = (rows * width) as f64;
        let passes = if fused_add { 4.0 } else { 2.0 };
        self.push(
            OpRole::Norm,
            name,
            kernel,
            CostFamily::Norm,
            Category::Norm,
            Shape {
                m: rows,
                n: width,
                k: 0,
                batch: 1,
            },
            "bf16",
            5.0 * elems,
            passes * elems * ACT_BYTES + width as f64 * ACT_BYTES,
        );
        let family = if fused_add {
            "norm_fused_add_rms"
        } else {
            "norm_rms"
        };
        self.measured(MeasureKey::new(family, rows, width, 0));
    }

    /// A pointwise kernel that reads `read_elems` and writes `write_elems` BF16 values.
    pub(crate) fn elementwise(
        &mut self,
        role: OpRole,
        name: &str,
        kernel: &'static str,
        category: Category,
        read_elems: u64,
        write_elems: u64,
    ) {
        self.push(
            role,
            name,
            kernel,
            CostFamily::Elementwise,
            category,
            Shape {
                m: read_elems,
                n: write_elems,
                k: 0,
                batch: 1,
            },
            "-",
            read_elems as f64,
            (read_elems + write_elems) as f64 * ACT_BYTES,
        );
    }

    /// A collective over the tensor-parallel group.
    pub(crate) fn collective(
        &mut self,
        role: OpRole,
        name: &str,
        kernel: &'static str,
        family: CostFamily,
        message_bytes: u64,
    ) {
        self.push(
            role,
            name,
            kernel,
            family,
            Category::Communication,
            Shape::default(),
            "-",
            0.0,
            message_bytes as f64,
        );
        self.ops.last_mut().expect("just pushed").message_bytes = message_bytes;
    }

    /// Forks the auxiliary stream from the compute stream and appends `body`'s ops to it;
    /// later ops go to the compute stream again until [`Builder::join`] makes it wait.
    pub(crate) fn on_aux(&mut self, body: impl FnOnce(&mut Builder)) {
        self.sync("fork", CostFamily::Fork);
        self.stream = Stream::Aux;
        body(self);
        self.stream = Stream::Compute;
    }

    /// The compute stream waits for the auxiliary stream.
    pub(crate) fn join(&mut self) {
        self.sync("join", CostFamily::Join);
    }

    fn sync(&mut self, name: &str, family: CostFamily) {
        let shape = Shape::default();
        self.push(
            OpRole::Sync,
            name,
            "",
            family,
            Category::Idle,
            shape,
            "-",
            0.0,
            0.0,
        );
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}
