//! A generated Kineto trace shaped like a real inference profile (the public MI300X trace
//! `profile_trace_rank_0` of `../shared/traces/public`, event for event in proportion): per
//! GPU kernel ~17 `python_function` events, a `cpu_op` with Kineto's argument lists, 2–3
//! runtime queries (`hipGetDevicePropertiesR0600`, `hipPointerGetAttribute`) that launch
//! nothing, the `hipLaunchKernel` call, its `ac2g` flow pair and the kernel with Kineto's
//! args; per vLLM decode step one `execute_context_0(0)_generation_32(32)` annotation. Written
//! straight to a writer, so a gigabyte costs the generator no memory. Shared by the
//! `trace_parse` bench and the `trace_big` tests.

use std::io::{self, Write};

/// GPU kernels per decode step.
pub const KERNELS_PER_STEP: usize = 64;

/// The kernel names of one step, cycled (real templated names: the classifier's rules and the
/// name interner see what they see in real traces).
const KERNELS: [&str; 8] = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1",
    "void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16*, c10::BFloat16 const*, long, c10::BFloat16 const*, float, int, int)",
    "_fwd_grouped_kernel_stage1_rope",
    "void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 2>(int, int, int, __hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16*, int, int)",
    "fused_moe_kernel",
    "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>(c10::BFloat16 const&)), false>(c10::BFloat16*, c10::BFloat16 const*, int)",
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
];

/// Writes a whole trace of `steps` decode steps; returns the bytes written.
pub fn write_trace<W: Write>(w: &mut W, steps: usize) -> io::Result<u64> {
    let mut n = Counting { inner: w, bytes: 0 };
    write!(
        n,
        r#"{{"schemaVersion": 1, "deviceProperties": [{{"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992, "numSms": 304}}], "distributedInfo": {{"backend": "nccl", "rank": 0, "world_size": 1}}, "baseTimeNanoseconds": 1745000000000000000, "traceEvents": ["#
    )?;
    let mut first = true;
    let mut ext = 1u64;
    let mut corr = 60_000u64;
    let mut py = 1u64;
    for s in 0..steps {
        let base = 2_915_995_397_672.546 + s as f64 * 20_000.0;
        sep(&mut n, &mut first)?;
        write!(
            n,
            r#"{{"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_32(32)", "pid": 416, "tid": 416, "ts": {base:.3}, "dur": 9500.250, "args": {{"External id": {ext}, "Record function id": 0, "Ev Idx": {ext}}}}}"#
        )?;
        ext += 1;
        for k in 0..KERNELS_PER_STEP {
            let t = base + 10.0 + k as f64 * 140.0;
            for j in 0..17 {
                sep(&mut n, &mut first)?;
                write!(
                    n,
                    r#"{{"ph": "X", "cat": "python_function", "name": "vllm/model_executor/layers/linear.py({}): forward_{j}", "pid": 416, "tid": 0, "ts": {:.3}, "dur": {:.3}, "args": {{"Python parent id": {}, "Python id": {py}, "Ev Idx": {py}}}}}"#,
                    100 + j * 7,
                    t + j as f64 * 2.0,
                    60.0 - j as f64 * 3.0,
                    py.saturating_sub(1)
                )?;
                py += 1;
            }
            sep(&mut n, &mut first)?;
            write!(
                n,
                r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 416, "tid": 416, "ts": {:.3}, "dur": 18.898, "args": {{"External id": {ext}, "Record function id": 0, "Concrete Inputs": ["", ""], "Input type": ["c10::BFloat16", "c10::BFloat16"], "Input Strides": [[7168, 1], [1, 7168]], "Input Dims": [[32, 7168], [7168, 2048]], "Ev Idx": {ext}}}}}"#,
                t + 40.0
            )?;
            for q in 0..(2 + k % 2) {
                sep(&mut n, &mut first)?;
                let name = if q == 0 {
                    "hipPointerGetAttribute"
                } else {
                    "hipGetDevicePropertiesR0600"
                };
                write!(
                    n,
                    r#"{{"ph": "X", "cat": "cuda_runtime", "name": "{name}", "pid": 416, "tid": 416, "ts": {:.3}, "dur": 0.912, "args": {{"cid": 3, "correlation": {corr}}}}}"#,
                    t + 42.0 + q as f64
                )?;
                corr += 1;
            }
            let launch = t + 50.0;
            let start = t + 300.0;
            sep(&mut n, &mut first)?;
            write!(
                n,
                r#"{{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 416, "tid": 416, "ts": {launch:.3}, "dur": 6.141, "args": {{"External id": {ext}, "cid": 14, "correlation": {corr}}}}}"#
            )?;
            sep(&mut n, &mut first)?;
            write!(
                n,
                r#"{{"ph": "s", "id": {corr}, "pid": 416, "tid": 416, "ts": {launch:.3}, "cat": "ac2g", "name": "ac2g"}}"#
            )?;
            sep(&mut n, &mut first)?;
            write!(
                n,
                r#"{{"ph": "X", "cat": "kernel", "name": "{}", "pid": 2, "tid": 0, "ts": {start:.3}, "dur": 120.500, "args": {{"External id": {ext}, "device": 2, "stream": 0, "correlation": {corr}, "kind": "Dispatch Kernel", "grid": [77, 1, 1], "block": [128, 1, 1]}}}}"#,
                KERNELS[k % KERNELS.len()]
            )?;
            sep(&mut n, &mut first)?;
            write!(
                n,
                r#"{{"ph": "f", "id": {corr}, "pid": 2, "tid": 0, "ts": {start:.3}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}"#
            )?;
            corr += 1;
            ext += 1;
        }
    }
    write!(n, r#"], "traceName": "generated.json"}}"#)?;
    n.flush()?;
    Ok(n.bytes)
}

/// The trace of `steps` steps in memory.
pub fn trace_bytes(steps: usize) -> Vec<u8> {
    let mut v = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write_trace(&mut v, steps);
    v
}

fn sep<W: Write>(w: &mut W, first: &mut bool) -> io::Result<()> {
    if !*first {
        w.write_all(b",\n")?;
    }
    *first = false;
    Ok(())
}

struct Counting<'a, W> {
    inner: &'a mut W,
    bytes: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.bytes += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
