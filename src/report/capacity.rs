//! The report of `decodesim capacity`: one content, three formats (table, JSON, CSV of the
//! curve).

use super::table::Table;
use super::units::{bytes, grouped, path};
use crate::capacity::plan::{Plan, PlanRow};
use crate::capacity::Capacity;
use serde_json::{json, Value};

/// "GPU KV cache size: N tokens", as vLLM logs it.
fn kv_cache_line(c: &Capacity) -> String {
    format!(
        "GPU KV cache size: {} tokens",
        grouped(c.memory.kv_cache_tokens as f64, 0)
    )
}

/// "Maximum concurrency for L tokens per request: X.XXx", as vLLM logs it.
fn concurrency_line(c: &Capacity) -> String {
    let l = c.demand.tokens_per_request;
    format!(
        "Maximum concurrency for {} tokens per request: {:.2}x",
        grouped(l.ceil(), 0),
        c.memory.vllm_concurrency(l)
    )
}

fn gib(b: f64) -> String {
    format!("{:.2}", b / (1u64 << 30) as f64)
}

pub fn to_json(c: &Capacity) -> Value {
    let m = &c.memory;
    json!({
        "kv_cache_tokens": m.kv_cache_tokens,
        "max_concurrency": c.max_concurrency,
        "kv_limit_concurrency": c.kv_limit,
        "max_num_seqs": m.max_num_seqs,
        "memory": m.terms,
        "memory_total_bytes": m.total_bytes,
        "gpu_memory_utilization": m.gpu_memory_utilization,
        "requested_bytes": m.requested_bytes,
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "block_size": m.block_size,
        "num_blocks": m.num_blocks,
        "dcp": m.dcp,
        "demand": c.demand,
        "curve": c.curve.points,
        "knee_concurrency": c.curve.knee,
        "plateau_concurrency": c.curve.plateau,
        "still_climbing": c.curve.still_climbing,
        "max_tpot_ms": c.curve.max_tpot_ms,
        "max_concurrency_at_tpot": c.curve.max_concurrency_at_tpot,
        "prefill": c.curve.prefill,
        "plan": c.plan,
        "plan_skipped": c.skipped,
        "scenario": super::simulation::scenario_json(&c.reference),
        "calibration": super::simulation::calibration_json(&c.reference),
        "warnings": c.warnings,
    })
}

/// The curve as CSV, one row per concurrency (what a notebook plots).
pub(crate) fn to_csv(c: &Capacity) -> String {
    let mut out = String::from(
        "concurrency,step_time_us,prefill_us,tpot_ms,tokens_per_s,tokens_per_s_per_user\n",
    );
    for p in &c.curve.points {
        out.push_str(&format!(
            "{},{},{},{},{},{}\n",
            p.concurrency,
            p.step_time_us,
            p.prefill_us,
            p.tpot_ms,
            p.tokens_per_s,
            p.tokens_per_s_per_user
        ));
    }
    out
}

pub fn render_table(c: &Capacity) -> String {
    let sim = &c.reference;
    let s = &sim.scenario;
    let m = &c.memory;
    let mut out = String::new();
    out.push_str(&format!(
        "decodesim capacity: {}{}\n",
        super::simulation::headline(s),
        if m.dcp > 1 {
            format!(" DCP={}", m.dcp)
        } else {
            String::new()
        }
    ));
    out.push_str(&format!(
        "{} | KV cache {} | gpu_memory_utilization {} | CUDA graphs {} | NCCL {}/{}\n",
        c.demand.described,
        if s.kv_bytes == 1.0 { "fp8" } else { "bf16" },
        m.gpu_memory_utilization,
        if s.cuda_graphs { "on" } else { "off" },
        s.nccl.algo,
        s.nccl.proto,
    ));
    out.push_str(&format!(
        "calibration: {} ({})\n\n",
        sim.profile.profile.name,
        path(&sim.profile.path)
    ));

    out.push_str("memory per GPU, as vLLM accounts it\n");
    let mut t = Table::new(&["component", "bytes", "GiB", "source"])
        .align_left(&[3])
        .wrap(3, 72);
    for term in &m.terms {
        t.row(vec![
            term.component.to_string(),
            grouped(term.bytes, 0),
            gib(term.bytes),
            term.source.clone(),
        ]);
    }
    t.row(vec![
        "total".into(),
        grouped(m.total_bytes, 0),
        gib(m.total_bytes),
        format!(
            "{} requested by vLLM (total × {})",
            bytes(m.requested_bytes),
            m.gpu_memory_utilization
        ),
    ]);
    out.push_str(&t.render());
    out.push('\n');
    out.push_str(&format!("{}\n{}\n", kv_cache_line(c), concurrency_line(c)));
    let binds = if c.max_concurrency < c.kv_limit {
        format!("max_num_seqs {} binds before the KV cache", m.max_num_seqs)
    } else {
        format!(
            "the KV cache binds: {} blocks of {} tokens, {} B per token per GPU",
            grouped(m.num_blocks as f64, 0),
            m.block_size,
            grouped(m.kv_bytes_per_token, 0)
        )
    };
    out.push_str(&format!(
        "max concurrency: {} ({binds})\n\n",
        grouped(c.max_concurrency as f64, 0)
    ));

    out.push_str("throughput and latency by concurrency (decode step simulated at each point)\n");
    if let Some(pc) = &c.curve.prefill {
        out.push_str(&format!(
            "prefill: {:.2} prompt tokens per output token at {:.2} µs each ({:.2} kernels priced at a {}-token chunk + {:.2} attention roofline), added to every step\n",
            c.demand.prefill_per_output,
            pc.us_per_token,
            pc.kernels_us_per_token,
            pc.chunk_tokens,
            pc.attention_us_per_token
        ));
    } else {
        out.push_str(
            "prefill: not counted (decode only; give --input-len/--output-len or --request-mix)\n",
        );
    }
    let mut t = Table::new(&[
        "concurrency",
        "step (µs)",
        "prefill (µs)",
        "TPOT (ms)",
        "tokens/s",
        "tokens/s/user",
        "",
    ])
    .align_left(&[6]);
    for p in &c.curve.points {
        let mut marks = Vec::new();
        if c.curve.knee == Some(p.concurrency) {
            marks.push("knee");
        }
        if c.curve.plateau == Some(p.concurrency) {
            marks.push("plateau");
        }
        if c.curve.max_concurrency_at_tpot == Some(p.concurrency) {
            marks.push("max under TPOT limit");
        }
        t.row(vec![
            p.concurrency.to_string(),
            grouped(p.step_time_us, 1),
            grouped(p.prefill_us, 1),
            grouped(p.tpot_ms, 2),
            grouped(p.tokens_per_s, 1),
            grouped(p.tokens_per_s_per_user, 2),
            marks.join(", "),
        ]);
    }
    out.push_str(&t.render());
    out.push_str(&format!(
        "knee: {} (the marginal tokens/s of one more user falls below {:.0}% of the first user's)\nplateau: {} (within {:.0}% of the best tokens/s on the curve){}\n",
        c.curve.knee.map_or("none".into(), |k| k.to_string()),
        crate::capacity::curve::KNEE_MARGINAL_SHARE * 100.0,
        c.curve.plateau.map_or("none".into(), |k| k.to_string()),
        crate::capacity::curve::PLATEAU_SHARE * 100.0,
        if c.curve.still_climbing {
            "; the curve still climbs at the concurrency limit: memory ends it before a plateau"
        } else {
            ""
        }
    ));
    if let Some(limit) = c.curve.max_tpot_ms {
        out.push_str(&match c.curve.max_concurrency_at_tpot {
            Some(n) => format!("--max-tpot-ms {limit}: at most {n} concurrent users\n"),
            None => format!(
                "--max-tpot-ms {limit}: not met even by one user (TPOT {:.2} ms)\n",
                c.curve.points.first().map_or(f64::NAN, |p| p.tpot_ms)
            ),
        });
    }
    if let Some(plan) = &c.plan {
        out.push('\n');
        out.push_str(&render_plan(plan));
        if !c.skipped.is_empty() {
            out.push_str("not considered:\n");
            for s in &c.skipped {
                for (i, line) in super::table::wrap_text(s, 94).iter().enumerate() {
                    out.push_str(&format!("  {} {line}\n", if i == 0 { "-" } else { " " }));
                }
            }
        }
    }
    if !c.warnings.is_empty() {
        out.push_str("\nwarnings\n");
        for w in &c.warnings {
            out.push_str(&format!("  - {}\n", crate::units::one_line(w)));
        }
    }
    out
}

fn money(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| grouped(x, 2))
}

fn render_plan(plan: &Plan) -> String {
    let t = &plan.target;
    let mut want = Vec::new();
    if let Some(x) = t.tokens_per_s {
        want.push(format!("{} tokens/s", grouped(x, 0)));
    }
    if let Some(u) = t.users {
        want.push(format!("{u} users"));
    }
    if let Some(m) = t.max_tpot_ms {
        want.push(format!("TPOT at most {m} ms"));
    }
    let mut out = if t.is_comparison() {
        format!(
            "layouts compared, one replica each at its best tokens/s{}\n",
            t.max_tpot_ms
                .map(|m| format!(" with TPOT at most {m} ms"))
                .unwrap_or_default()
        )
    } else {
        format!(
            "plan: {} on at most {} system{}\n",
            want.join(", "),
            t.max_systems,
            if t.max_systems == 1 { "" } else { "s" }
        )
    };
    let mut tab = Table::new(&[
        "system",
        "layout",
        "replicas",
        "GPUs",
        "max users",
        "users/replica",
        "tokens/s",
        "tokens/s/GPU",
        "TPOT (ms)",
        "USD/h",
        "USD/M tokens",
        "verdict",
    ])
    .align_left(&[0, 1, 11])
    .wrap(11, 48);
    let is_best = |r: &PlanRow| {
        plan.best
            .as_ref()
            .is_some_and(|b| b.system == r.system && b.layout == r.layout)
    };
    for r in &plan.rows {
        let verdict = if is_best(r) {
            plan.best_word().to_string()
        } else if r.meets {
            "meets".to_string()
        } else {
            format!("{} binds: {}", r.limit.map_or("?", |l| l.name()), r.note)
        };
        let ok = r.meets || r.limit == Some(crate::capacity::plan::Limit::Throughput);
        tab.row(vec![
            r.system.clone(),
            r.layout.label(),
            if ok {
                r.replicas.to_string()
            } else {
                "-".into()
            },
            if ok { r.gpus.to_string() } else { "-".into() },
            if r.fits {
                r.max_concurrency.to_string()
            } else {
                "-".into()
            },
            if ok {
                r.concurrency_per_replica.to_string()
            } else {
                "-".into()
            },
            if ok {
                grouped(r.tokens_per_s, 0)
            } else {
                "-".into()
            },
            if ok {
                grouped(r.tokens_per_s_per_gpu, 1)
            } else {
                "-".into()
            },
            if ok {
                grouped(r.tpot_ms, 1)
            } else {
                "-".into()
            },
            money(r.usd_per_hour),
            money(r.usd_per_million_tokens),
            verdict,
        ]);
    }
    out.push_str(&tab.render());
    out.push_str(&plan.message);
    out.push('\n');
    out
}
