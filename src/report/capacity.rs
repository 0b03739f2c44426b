//! The report of `decodesim capacity`: one content, three formats (table, JSON, CSV of the
//! curve).

use super::table::Table;
use super::units::{bytes, grouped, path};
use crate::capacity::disagg::{Colocated, Disaggregation, RatioRow, Winner};
use crate::capacity::plan::{Plan, PlanRow};
use crate::capacity::Capacity;
use crate::cost::kv_transfer::KvTransfer;
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
        "binds": c.binds.name(),
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
        "knee_padding": knee_padding(c).map(|(k, n, padded)| json!({
            "knee": k, "next_concurrency": n, "padded_to": padded,
        })),
        "plateau_concurrency": c.curve.plateau,
        "still_climbing": c.curve.still_climbing,
        "max_tpot_ms": c.curve.max_tpot_ms,
        "min_tokens_per_s_per_user": c.min_tokens_per_s_per_user,
        "max_concurrency_at_tpot": c.curve.max_concurrency_at_tpot,
        "prefill": c.curve.prefill,
        "plan": c.plan,
        "plan_skipped": c.skipped,
        "plan_curves": c.candidates.iter().map(|k| json!({
            "system": k.system,
            "layout": k.layout.label(),
            "gpus": k.layout.gpus(),
            "max_concurrency": k.max_concurrency,
            "curve": k.curve,
        })).collect::<Vec<_>>(),
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
    let mut out = header(c);
    out.push_str(&memory_section(c));
    out.push_str(&concurrency_section(c));
    out.push_str(&curve_section(c));
    out.push_str(&curve_notes(c));
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

/// The scenario, the demand and the calibration the study ran with.
fn header(c: &Capacity) -> String {
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
    out
}

/// The memory account's table, term by term.
fn memory_section(c: &Capacity) -> String {
    let m = &c.memory;
    let mut out = String::from("memory per GPU, as vLLM accounts it\n");
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
    out
}

/// vLLM's KV cache lines and the concurrency limit with what binds it.
fn concurrency_section(c: &Capacity) -> String {
    let m = &c.memory;
    let binds = if let crate::capacity::Binds::BatchLimit(cap) = c.binds {
        format!(
            "the simulator's largest batch binds before the KV cache and max_num_seqs: {} sequences ({} per data-parallel rank)",
            grouped(cap as f64, 0),
            grouped(crate::scenario::deployment::MAX_BATCH as f64, 0)
        )
    } else if c.binds == crate::capacity::Binds::MaxNumSeqs {
        format!(
            "max_num_seqs {} binds before the KV cache{}",
            m.max_num_seqs,
            if m.dp > 1 {
                " (per data-parallel rank)"
            } else {
                ""
            }
        )
    } else {
        format!(
            "the KV cache binds: {} blocks of {} tokens, {} B per token per GPU",
            grouped(m.num_blocks as f64, 0),
            m.block_size,
            grouped(m.kv_bytes_per_token, 0)
        )
    };
    let per_dp = if m.dp > 1 {
        format!(
            " over {} data-parallel ranks, each with its own KV cache: {} each",
            m.dp,
            grouped((c.max_concurrency / m.dp as u64) as f64, 0)
        )
    } else {
        String::new()
    };
    format!(
        "{}\n{}\nmax concurrency: {}{per_dp} ({binds})\n\n",
        kv_cache_line(c),
        concurrency_line(c),
        grouped(c.max_concurrency as f64, 0)
    )
}

/// The throughput–latency curve's table, after the line saying how prefill is counted.
fn curve_section(c: &Capacity) -> String {
    let mut out = String::from(
        "throughput and latency by concurrency (decode step simulated at each point)\n",
    );
    if let Some(pc) = &c.curve.prefill {
        out.push_str(&format!(
            "prefill: {:.2} prompt tokens per output token at {:.2} µs each ({:.2} kernels priced at a {}-token chunk + {:.2} attention roofline), added to every step\n",
            c.demand.prefill_per_output,
            pc.us_per_token,
            pc.kernels_us_per_token,
            pc.chunk_tokens,
            pc.attention_us_per_token
        ));
    } else if c.demand.prefill_per_output > 0.0 {
        // A disaggregated study's decode pool (data-parallel attention): prefill runs elsewhere.
        out.push_str(
            "prefill: on instances of its own (--disaggregate, below); this curve is the decode pool's, without prefill in its steps\n",
        );
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
    out
}

/// The curve's knee and plateau, the padding note and the TPOT limit's answer.
fn curve_notes(c: &Capacity) -> String {
    let mut out = format!(
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
    );
    if let Some((k, n, padded)) = knee_padding(c) {
        out.push_str(&format!(
            "  CUDA-graph padding shapes the curve at the knee: vLLM runs concurrency {n} as a batch of {padded} (the next captured size), so its step costs what {padded} users' does and tokens/s climbs in steps between captured sizes; the knee at {k} marks a padding step as much as a saturation (--cuda-graphs off shows the curve unpadded)\n"
        ));
    }
    if let Some(limit) = c.curve.max_tpot_ms {
        let flag = match c.min_tokens_per_s_per_user {
            Some(n) => format!(
                "--min-tokens-per-s-per-user {n} (TPOT at most {} ms)",
                grouped(limit, 2)
            ),
            None => format!("--max-tpot-ms {limit}"),
        };
        out.push_str(&match c.curve.max_concurrency_at_tpot {
            Some(n) => format!("{flag}: at most {n} concurrent users\n"),
            None => format!(
                "{flag}: not met even by one user (TPOT {:.2} ms, {:.2} tokens/s per user)\n",
                c.curve.points.first().map_or(f64::NAN, |p| p.tpot_ms),
                c.curve
                    .points
                    .first()
                    .map_or(f64::NAN, |p| p.tokens_per_s_per_user)
            ),
        });
    }
    out
}

fn money(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| grouped(x, 2))
}

fn render_plan(plan: &Plan) -> String {
    let mut out = plan_headline(plan);
    let mut tab = Table::new(&[
        "system",
        "layout",
        "replicas",
        "GPUs",
        "fit/replica",
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
    for r in &plan.rows {
        tab.row(plan_cells(plan, r));
    }
    out.push_str(&tab.render());
    out.push_str(&plan.message);
    out.push('\n');
    out
}

/// What the plan looks for: the target, or layouts compared at their best.
fn plan_headline(plan: &Plan) -> String {
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
    if t.is_comparison() {
        format!(
            "layouts compared, each filling one system with its replicas, at its best tokens/s{}\n",
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
    }
}

/// One (system, layout) row of the plan: its figures where it meets the target or only the
/// throughput binds it, its verdict.
fn plan_cells(plan: &Plan, r: &PlanRow) -> Vec<String> {
    let is_best = plan
        .best
        .as_ref()
        .is_some_and(|b| b.system == r.system && b.layout == r.layout);
    let verdict = if is_best {
        plan.best_word().to_string()
    } else if r.meets {
        "meets".to_string()
    } else {
        format!("{} binds: {}", r.limit.map_or("?", |l| l.name()), r.note)
    };
    let ok = r.meets || r.limit == Some(crate::capacity::plan::Limit::Throughput);
    let shown = |cell: String| if ok { cell } else { "-".into() };
    vec![
        r.system.clone(),
        r.layout.label(),
        shown(r.replicas.to_string()),
        shown(r.gpus.to_string()),
        if r.fits {
            r.max_concurrency.to_string()
        } else {
            "-".into()
        },
        shown(r.concurrency_per_replica.to_string()),
        shown(grouped(r.tokens_per_s, 0)),
        shown(grouped(r.tokens_per_s_per_gpu, 1)),
        shown(grouped(r.tpot_ms, 1)),
        money(r.usd_per_hour),
        money(r.usd_per_million_tokens),
        verdict,
    ]
}

/// `capacity --disaggregate` as JSON (placed under the report's `disaggregation` key).
pub fn disagg_json(d: &Disaggregation) -> Value {
    serde_json::to_value(d).unwrap_or(Value::Null)
}

/// `capacity --disaggregate` as CSV: one row per prefill:decode ratio and one for co-located.
pub(crate) fn disagg_csv(d: &Disaggregation) -> String {
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| x.to_string());
    let mut out = String::from(
        "layout,prefill_instances,decode_instances,gpus,link,meets,binds,requests_per_s,tokens_per_s,tokens_per_s_per_gpu,decode_concurrency,tpot_ms,kv_transfer_ms,ttft_min_ms,ttft_ms,prefill_utilization,usd_per_million_tokens\n",
    );
    for r in &d.rows {
        out.push_str(&format!(
            "disaggregated,{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.prefill_instances,
            r.decode_instances,
            r.gpus,
            r.link,
            r.meets,
            r.binds,
            r.requests_per_s,
            r.tokens_per_s,
            r.tokens_per_s_per_gpu,
            r.decode_concurrency,
            r.tpot_ms,
            r.kv_transfer_ms,
            r.ttft_min_ms,
            opt(r.ttft_ms),
            r.prefill_utilization,
            opt(r.usd_per_million_tokens)
        ));
    }
    let c = &d.colocated;
    out.push_str(&format!(
        "colocated,,,{},-,{},-,{},{},{},{},{},0,{},,,{}\n",
        c.gpus,
        c.meets,
        c.requests_per_s,
        c.tokens_per_s,
        c.tokens_per_s_per_gpu,
        c.concurrency,
        c.tpot_ms,
        c.ttft_min_ms,
        opt(c.usd_per_million_tokens)
    ));
    out
}

/// `capacity --disaggregate` as text, after the capacity report.
pub fn render_disagg_table(d: &Disaggregation) -> String {
    let mut out = String::from("\ndisaggregated prefill and decode\n");
    out.push_str(&disagg_pools(d));
    let mut t = Table::new(&[
        "layout",
        "GPUs",
        "link",
        "req/s",
        "tokens/s",
        "tokens/s/GPU",
        "users/D",
        "TPOT (ms)",
        "KV (ms)",
        "TTFT min (ms)",
        "TTFT (ms)",
        "prefill load",
        "USD/M tokens",
        "verdict",
    ])
    .align_left(&[0, 2, 13])
    .wrap(13, 40);
    for r in &d.rows {
        t.row(ratio_cells(r, d.winner));
    }
    t.row(colocated_cells(&d.colocated, d.winner));
    out.push_str(&t.render());
    out.push_str("TTFT min: prefill alone + KV transfer + one decode step, no queueing; TTFT: with the M/D/1 waits of the prefill queue and the KV receiving queue at that load (co-located: the lower bound only)\n");
    out.push_str(&d.verdict);
    out.push('\n');
    if !d.warnings.is_empty() {
        out.push_str("warnings (disaggregated)\n");
        for w in &d.warnings {
            out.push_str(&format!("  - {}\n", crate::units::one_line(w)));
        }
    }
    out
}

/// The requests and targets, the prefill instance, each KV transfer and the decode instance.
fn disagg_pools(d: &Disaggregation) -> String {
    let p = &d.prefill;
    let mut out = format!(
        "requests: mean input {:.0} (longest {:.0}), mean output {:.0} tokens; targets: TPOT {}, TTFT {}\n",
        d.input_len,
        d.longest_input,
        d.output_len,
        d.max_tpot_ms.map_or("none".into(), |m| format!("at most {m} ms")),
        d.max_ttft_ms.map_or("none".into(), |m| format!("at most {m} ms")),
    );
    out.push_str(&format!(
        "prefill instance: {} TP={}: {:.2} µs per prompt token at a {}-token chunk; one mean prompt occupies it {:.1} ms ({:.2} requests/s), alone it is prefilled in {:.1} ms (longest {:.1} ms)\n",
        p.system,
        p.tp,
        p.us_per_token,
        p.chunk_tokens,
        p.service_us / 1e3,
        p.compute_requests_per_s,
        p.prefill_ms,
        p.prefill_ms_longest
    ));
    for t in &d.transfers {
        out.push_str(&transfer_line(t));
    }
    match &d.decode_limit {
        Some(l) => out.push_str(&format!(
            "decode instance: {} TP={}{} without prefill: at most {} users, {} tokens/s, TPOT {:.2} ms{}\n",
            d.decode_system,
            d.tp,
            if d.dp > 1 { format!(" × DP={}", d.dp) } else { String::new() },
            l.concurrency,
            grouped(l.tokens_per_s, 1),
            l.tpot_ms,
            if d.max_tpot_ms.is_some() { " (most tokens/s within --max-tpot-ms)" } else { " (most tokens/s on the curve)" }
        )),
        None => out.push_str("decode instance: no concurrency meets --max-tpot-ms\n"),
    }
    out
}

/// One KV transfer: bytes, ranks and rate (each end's where the instances' TPs differ).
fn transfer_line(t: &KvTransfer) -> String {
    if t.sending_ranks != t.ranks {
        let eff = |g: f64| g * t.link.efficiency;
        return format!(
            "KV transfer over {}: {} from each of {} prefill ranks at {:.1} GB/s, {} to each of {} decode ranks at {:.1} GB/s ({:.0} input tokens), the slower end + {:.1} µs = {:.3} ms ({})\n",
            t.link.class,
            bytes(t.bytes_per_sending_rank),
            t.sending_ranks,
            eff(t.link.send_gbps),
            bytes(t.bytes_per_rank),
            t.ranks,
            eff(t.link.recv_gbps),
            t.input_len,
            t.link.latency_us,
            t.time_us / 1e3,
            t.link.source
        );
    }
    format!(
        "KV transfer over {}: {} per rank × {} ranks ({:.0} input tokens) at {:.1} GB/s per rank + {:.1} µs = {:.3} ms ({})\n",
        t.link.class,
        bytes(t.bytes_per_rank),
        t.ranks,
        t.input_len,
        t.link.effective_gbps(),
        t.link.latency_us,
        t.time_us / 1e3,
        t.link.source
    )
}

/// One ratio's row of the table (its figures shown only where it meets the targets).
fn ratio_cells(r: &RatioRow, winner: Winner) -> Vec<String> {
    let best = winner
        == Winner::Disaggregated {
            prefill: r.prefill_instances,
            decode: r.decode_instances,
        };
    let v = |f: String| if r.meets { f } else { "-".into() };
    vec![
        format!("{}P:{}D", r.prefill_instances, r.decode_instances),
        r.gpus.to_string(),
        r.link.to_string(),
        v(grouped(r.requests_per_s, 2)),
        v(grouped(r.tokens_per_s, 0)),
        v(grouped(r.tokens_per_s_per_gpu, 1)),
        v(r.decode_concurrency.to_string()),
        v(grouped(r.tpot_ms, 1)),
        v(grouped(r.kv_transfer_ms, 2)),
        v(grouped(r.ttft_min_ms, 1)),
        v(r.ttft_ms.map_or("unbounded".into(), |x| grouped(x, 1))),
        v(format!("{:.0}%", r.prefill_utilization * 100.0)),
        money(r.usd_per_million_tokens),
        if !r.meets {
            format!("{} binds: {}", r.binds, r.note)
        } else if best {
            format!("best; {} binds", r.binds)
        } else {
            format!("{} binds", r.binds)
        },
    ]
}

/// The co-located answer's row of the table.
fn colocated_cells(c: &Colocated, winner: Winner) -> Vec<String> {
    let cv = |f: String| if c.meets { f } else { "-".into() };
    vec![
        "co-located".into(),
        c.gpus.to_string(),
        "-".into(),
        cv(grouped(c.requests_per_s, 2)),
        cv(grouped(c.tokens_per_s, 0)),
        cv(grouped(c.tokens_per_s_per_gpu, 1)),
        cv(c.concurrency.to_string()),
        cv(grouped(c.tpot_ms, 1)),
        "-".into(),
        cv(grouped(c.ttft_min_ms, 1)),
        "-".into(),
        "-".into(),
        money(c.usd_per_million_tokens),
        if !c.meets {
            c.note.clone()
        } else if winner == Winner::Colocated {
            "best; chunked prefill".into()
        } else {
            "chunked prefill".into()
        },
    ]
}

/// Where CUDA-graph padding shapes the knee: the knee, the curve point after it and the batch
/// that point runs as when vLLM pads it to the next captured size (None: graphs off, or
/// neither point padded).
pub(crate) fn knee_padding(c: &Capacity) -> Option<(u32, u32, u64)> {
    let k = c.curve.knee?;
    let s = &c.reference.scenario;
    if !s.cuda_graphs {
        return None;
    }
    let next = c
        .curve
        .points
        .iter()
        .map(|p| p.concurrency)
        .filter(|&x| x > k)
        .min()?;
    let padded = |b: u32| {
        let mut t = s.clone();
        t.batch = b;
        let p = t.padding(1, crate::scenario::cudagraph::PadRule::Decode);
        p.captured.then_some(p.padded)
    };
    match (padded(k), padded(next)) {
        (Some(pk), _) if pk > u64::from(k) => Some((k, k, pk)),
        (_, Some(pn)) if pn > u64::from(next) => Some((k, next, pn)),
        _ => None,
    }
}
