//! Kernel → [`Category`] by ordered regex rules read from a TOML file
//! (`data/rules/kernels.toml` is built in; `--rules FILE` replaces it). The rules are data so
//! a user can add a kernel without recompiling; the order is the data's, first match wins.

use super::error::{Result, TraceError};
use super::model::{GpuKind, GpuOp, ParsedTrace};
use crate::category::Category;
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use std::path::{Path, PathBuf};

const BUILTIN: &str = include_str!("../../data/rules/kernels.toml");
const BUILTIN_NAME: &str = "data/rules/kernels.toml (built in)";

#[derive(Debug, Clone)]
struct Rule {
    category: Category,
    pattern: Regex,
    exclude: Option<Regex>,
}

/// How a kernel got its category, so reports can list the ones no rule matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// From the event's `cat` (gpu_memcpy / gpu_memset).
    ByCat,
    /// From `args["Collective name"]`.
    Collective,
    /// Declared by the trace itself (`args.category` in decodesim's own timelines).
    Declared,
    /// Rule number (0-based, in file order).
    Rule(usize),
    /// No rule matched: counted as the fallback category and reported.
    Unclassified,
}

#[derive(Debug, Clone)]
pub struct Classifier {
    rules: Vec<Rule>,
    fallback: Category,
    /// Where the rules came from, for reports.
    pub(crate) source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    #[allow(dead_code)]
    version: Option<u32>,
    #[serde(default)]
    fallback: Option<String>,
    #[serde(default)]
    rule: Vec<RuleFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    category: String,
    pattern: String,
    #[serde(default)]
    exclude: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    why: Option<String>,
}

impl Classifier {
    /// The rules shipped in `data/rules/kernels.toml`.
    pub fn builtin() -> Classifier {
        // The shipped file is tested (`builtin_rules_load`), so this cannot fail at run time.
        Self::from_toml(BUILTIN, Path::new(BUILTIN_NAME))
            .unwrap_or_else(|e| unreachable!("built-in rules are tested: {e}"))
    }

    /// Reads rules from a file, refused before reading when it is not a regular file or is
    /// larger than a rules file may be (`--rules /dev/zero`, a FIFO).
    pub(crate) fn from_file(path: &Path) -> Result<Classifier> {
        let text = crate::files::read_text(path, crate::files::InputKind::Rules)
            .map_err(|e| super::parse::input_error(path, e))?;
        Self::from_toml(&text, path)
    }

    fn from_toml(text: &str, origin: &Path) -> Result<Classifier> {
        let err = |message: String| TraceError::Rules {
            path: PathBuf::from(origin),
            message,
        };
        let file: RulesFile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let fallback = match &file.fallback {
            Some(f) => f
                .parse::<Category>()
                .map_err(|e| err(format!("field 'fallback': {e}")))?,
            None => Category::Elementwise,
        };
        let compile = |i: usize, field: &str, p: &str| {
            RegexBuilder::new(p)
                .case_insensitive(true)
                .build()
                .map_err(|e| {
                    err(format!(
                        "rule {} field '{field}': invalid regex: {e}",
                        i + 1
                    ))
                })
        };
        let mut rules = Vec::with_capacity(file.rule.len());
        for (i, r) in file.rule.iter().enumerate() {
            let category = r
                .category
                .parse::<Category>()
                .map_err(|e| err(format!("rule {} field 'category': {e}", i + 1)))?;
            if category == Category::Idle {
                return Err(err(format!(
                    "rule {} field 'category': idle is not a kernel category",
                    i + 1
                )));
            }
            rules.push(Rule {
                category,
                pattern: compile(i, "pattern", &r.pattern)?,
                exclude: r
                    .exclude
                    .as_deref()
                    .map(|p| compile(i, "exclude", p))
                    .transpose()?,
            });
        }
        Ok(Classifier {
            rules,
            fallback,
            source: origin.display().to_string(),
        })
    }

    /// Category of a kernel name by the rules alone.
    fn classify_name(&self, name: &str) -> (Category, Verdict) {
        for (i, r) in self.rules.iter().enumerate() {
            if r.pattern.is_match(name) && !r.exclude.as_ref().is_some_and(|x| x.is_match(name)) {
                return (r.category, Verdict::Rule(i));
            }
        }
        (self.fallback, Verdict::Unclassified)
    }

    /// Category of one GPU op: the category the trace declares (decodesim's own timelines only),
    /// then `cat`, then the collective name, then the name rules.
    /// `name_cache` memoises the rules per interned name (a trace has few distinct names).
    pub(crate) fn classify(
        &self,
        op: &GpuOp,
        trace: &ParsedTrace,
        name_cache: &mut Vec<Option<(Category, Verdict)>>,
    ) -> (Category, Verdict) {
        if let (true, Some(c)) = (trace.meta.declares_categories, op.declared) {
            return (c, Verdict::Declared);
        }
        if op.kind != GpuKind::Kernel {
            return (Category::Memcpy, Verdict::ByCat);
        }
        if op.collective {
            return (Category::Communication, Verdict::Collective);
        }
        let id = op.name as usize;
        if name_cache.len() < trace.names.len() {
            name_cache.resize(trace.names.len(), None);
        }
        *name_cache[id].get_or_insert_with(|| self.classify_name(trace.name(op.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_rules_load() {
        let c = Classifier::builtin();
        assert!(c.rules.len() >= 8);
        assert_eq!(c.fallback, Category::Elementwise);
    }

    /// The pitfalls known trace tools hit when they classify kernels by name, one name each.
    #[test]
    fn rule_order_pitfalls() {
        let c = Classifier::builtin();
        let cases = [
            ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", Category::Communication),
            ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>", Category::Communication),
            ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>", Category::Communication),
            ("moe::dev::routing::routingRenormalize::routingIndicesBlockKernel", Category::Router),
            ("void vllm::moe::topkGating<12, 384, 4, 16, 64>", Category::Router),
            ("_topk_forward", Category::Router),
            ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256_swiGlu_dynBatch_sm100f", Category::Moe),
            ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", Category::Moe),
            ("void marlin_moe_wna16::Marlin<256, 1, 8, 8>(int4 const*)", Category::Moe),
            ("kernel_cutlass_kernel_flashinfernormkernelsfused_add_rmsnormFusedAddRMSNormKernel_0", Category::Norm),
            ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64E", Category::Norm),
            ("triton_red_fused_add_mean_mul_pow_rsqrt_0", Category::Norm),
            ("fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP64ForGen", Category::Attention),
            ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64> >", Category::Attention),
            ("kernel_unified_attention_2d", Category::Attention),
            ("void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16>", Category::Attention),
            ("create_flashinfer_kv_indices_triton", Category::Elementwise),
            ("triton_poi_fused_flash_attention_backward_0", Category::Elementwise),
            ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", Category::Gemm),
            ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256", Category::Gemm),
            ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", Category::Gemm),
            ("void fbgemm_gpu::permute_2D_data_kernel<float>", Category::Elementwise),
            ("void at::native::reduce_kernel<512, 1, ReduceOp<float, at::native::ArgMaxOps<float>>>", Category::Sampling),
            ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", Category::Elementwise),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>", Category::Elementwise),
        ];
        for (name, want) in cases {
            assert_eq!(c.classify_name(name).0, want, "{name}");
        }
        assert_eq!(
            c.classify_name("some_unknown_thing").1,
            Verdict::Unclassified
        );
    }

    #[test]
    fn bad_rules_name_the_field() {
        let e = Classifier::from_toml(
            "[[rule]]\ncategory='gemv'\npattern='x'",
            Path::new("r.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("r.toml") && e.contains("'category'") && e.contains("gemm"),
            "{e}"
        );
        let e = Classifier::from_toml(
            "[[rule]]\ncategory='gemm'\npattern='('",
            Path::new("r.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("'pattern'") && e.contains("regex"), "{e}");
        let e = Classifier::from_toml("[[rule]]\ncategory='gemm'\npatern='x'", Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("patern"), "{e}");
    }
}
