//! The report of `decodesim simulate`: one content, three formats (table, JSON, CSV).

use super::table::{bytes, num, pct, Table};
use crate::category::Category;
use crate::sim::Simulation;
use serde_json::{json, Value};

pub(crate) fn scenario_json(sim: &Simulation) -> Value {
    let s = &sim.scenario;
    json!({
        "model": s.model.name,
        "model_file": s.model.source.display().to_string(),
        "family": s.model.family.name(),
        "layers": s.model.num_layers,
        "system": s.system.name,
        "gpu": s.system.gpu.display_name,
        "gpus": s.system.gpu_count,
        "tp": s.tp,
        "batch": s.batch,
        "context": s.context,
        "cuda_graphs": s.cuda_graphs,
        "nccl_proto": s.nccl.proto.name(),
        "nccl_algo": s.nccl.algo.name(),
        "p2p": s.nccl.p2p,
        "comm_path": s.comm_path().name(),
        "kv_cache_bytes_per_elem": s.kv_bytes,
        "seed": s.seed,
    })
}

pub(crate) fn calibration_json(sim: &Simulation) -> Value {
    let p = &sim.profile;
    json!({
        "name": p.profile.name,
        "path": p.path.display().to_string(),
        "gpu": p.profile.gpu,
        "created": p.profile.created,
        "method": p.profile.method,
        "provenance": p.profile.provenance,
        "kernel_families": sim.pricing.families.iter()
            .map(|(k, src)| json!({"family": k, "source": src})).collect::<Vec<_>>(),
        "fit": serde_json::to_value(&p.fit).unwrap_or(Value::Null),
    })
}

pub fn to_json(sim: &Simulation) -> Value {
    let m = &sim.mean;
    let comm = Category::Communication.index();
    json!({
        "step_time_us": sim.step_time_us(),
        "tokens_per_s": sim.tokens_per_s(),
        "breakdown": m.entries(),
        "communication": {
            "wait_us": m.comm_wait_us,
            "transfer_us": m.comm_transfer_us,
            "exposed_us": m.exclusive_us[comm],
            "overlapped_us": m.comm_overlapped_us(),
        },
        "collectives": sim.pricing.collectives,
        "ranks": sim.per_rank.iter().enumerate().map(|(r, b)| json!({
            "rank": r,
            "end_us": sim.timeline.rank_end_us[r],
            "compute_us": Category::ALL.iter().filter(|c| c.is_compute())
                .map(|c| b.time(*c)).sum::<f64>(),
            "comm_wait_us": b.comm_wait_us,
            "comm_transfer_us": b.comm_transfer_us,
            "idle_us": b.time(Category::Idle),
        })).collect::<Vec<_>>(),
        "kernels_per_rank": sim.workload.ops.iter().filter(|o| o.is_kernel()).count(),
        "memory_per_gpu": {
            "weights_bytes": sim.memory.weights_bytes,
            "kv_cache_bytes": sim.memory.kv_cache_bytes,
            "capacity_bytes": sim.scenario.system.gpu.memory_gb * 1e9,
        },
        "scenario": scenario_json(sim),
        "calibration": calibration_json(sim),
        "warnings": sim.warnings,
    })
}

/// Long-format CSV (`section,name,field,value`) of exactly the JSON's content.
pub fn to_csv(sim: &Simulation) -> String {
    let mut out = String::from("section,name,field,value\n");
    fn flatten(prefix: &str, name: &str, v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    let field = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    flatten(&field, name, x, out);
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    flatten(
                        prefix,
                        &format!("{name}{}{i}", if name.is_empty() { "" } else { "#" }),
                        x,
                        out,
                    );
                }
            }
            _ => {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.push_str(&csv_row(&[name, prefix, &text]));
            }
        }
    }
    let j = to_json(sim);
    if let Value::Object(map) = &j {
        for (section, v) in map {
            match (section.as_str(), v) {
                ("breakdown", Value::Array(rows)) => {
                    for r in rows {
                        let cat = r["category"].as_str().unwrap_or("");
                        for f in ["time_us", "share", "busy_us"] {
                            out.push_str(&format!(
                                "breakdown,{}",
                                csv_row(&[cat, f, &r[f].to_string()])
                            ));
                        }
                    }
                }
                (_, Value::Object(_)) | (_, Value::Array(_)) => {
                    let mut body = String::new();
                    flatten("", "", v, &mut body);
                    for line in body.lines() {
                        out.push_str(&format!("{section},{line}\n"));
                    }
                }
                _ => {
                    let text = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    out.push_str(&format!("summary,{}", csv_row(&["", section, &text])));
                }
            }
        }
    }
    out
}

fn csv_row(cells: &[&str]) -> String {
    let quoted: Vec<String> = cells
        .iter()
        .map(|c| {
            if c.contains([',', '"', '\n']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.to_string()
            }
        })
        .collect();
    format!("{}\n", quoted.join(","))
}

pub fn render_table(sim: &Simulation) -> String {
    let s = &sim.scenario;
    let m = &sim.mean;
    let mut out = String::new();
    out.push_str(&format!(
        "decodesim: {} ({}, {} layers) on {} ({}x {}), TP={}\n",
        s.model.name,
        s.model.family.name(),
        s.model.num_layers,
        s.system.name,
        s.system.gpu_count,
        s.system.gpu.display_name,
        s.tp
    ));
    out.push_str(&format!(
        "batch {} x context {} | CUDA graphs {} | NCCL {}/{} | P2P {} ({} path) | seed {}\n",
        s.batch,
        s.context,
        if s.cuda_graphs { "on" } else { "off" },
        s.nccl.algo,
        s.nccl.proto,
        if s.nccl.p2p { "on" } else { "off" },
        s.comm_path().name(),
        s.seed
    ));
    out.push_str(&format!(
        "calibration: {} ({})\n  {}\n\n",
        sim.profile.profile.name,
        sim.profile.path.display(),
        sim.profile.profile.provenance
    ));
    out.push_str(&format!(
        "step time   {} us\ntokens/s    {}\nkernels     {} per rank\n\n",
        num(sim.step_time_us(), 1),
        num(sim.tokens_per_s(), 1),
        sim.workload.ops.iter().filter(|o| o.is_kernel()).count()
    ));
    let mut t = Table::new(&["category", "time (us)", "share", "busy (us)"]);
    let mut rows: Vec<_> = m.entries();
    rows.sort_by(|a, b| b.time_us.total_cmp(&a.time_us));
    for e in rows {
        t.row(vec![
            e.category.name().to_string(),
            num(e.time_us, 1),
            pct(e.share),
            num(e.busy_us, 1),
        ]);
    }
    out.push_str(&t.render());
    let comm_total = m.comm_wait_us + m.comm_transfer_us;
    let wait_share = if comm_total > 0.0 {
        m.comm_wait_us / comm_total
    } else {
        0.0
    };
    out.push_str(&format!(
        "\ncommunication: {} us in collective kernels per rank = wait {} us ({}) + transfer {} us; exposed {} us, overlapped {} us\n",
        num(comm_total, 1),
        num(m.comm_wait_us, 1),
        pct(wait_share),
        num(m.comm_transfer_us, 1),
        num(m.time(Category::Communication), 1),
        num(m.comm_overlapped_us(), 1)
    ));

    out.push_str("\ncollectives per step (per rank)\n");
    let mut t = Table::new(&[
        "op",
        "count",
        "bytes each",
        "path",
        "algo",
        "proto",
        "us each, no wait",
    ]);
    for c in &sim.pricing.collectives {
        t.row(vec![
            c.op.to_string(),
            c.count.to_string(),
            num(c.bytes as f64, 0),
            c.path.to_string(),
            c.algo.clone(),
            c.proto.clone(),
            num(c.time_us, 1),
        ]);
    }
    out.push_str(&t.render());

    out.push_str("\nranks\n");
    let mut t = Table::new(&[
        "rank",
        "end (us)",
        "compute (us)",
        "comm wait (us)",
        "comm transfer (us)",
        "idle (us)",
    ]);
    for (r, b) in sim.per_rank.iter().enumerate() {
        let compute: f64 = Category::ALL
            .iter()
            .filter(|c| c.is_compute())
            .map(|c| b.time(*c))
            .sum();
        t.row(vec![
            r.to_string(),
            num(sim.timeline.rank_end_us[r], 1),
            num(compute, 1),
            num(b.comm_wait_us, 1),
            num(b.comm_transfer_us, 1),
            num(b.time(Category::Idle), 1),
        ]);
    }
    out.push_str(&t.render());
    let computes: Vec<f64> = sim
        .per_rank
        .iter()
        .map(|b| {
            Category::ALL
                .iter()
                .filter(|c| c.is_compute())
                .map(|c| b.time(*c))
                .sum()
        })
        .collect();
    let (lo, hi) = computes
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
    out.push_str(&format!(
        "spread across ranks: compute {} .. {} us ({} apart)\n",
        num(lo, 1),
        num(hi, 1),
        pct(if lo > 0.0 { hi / lo - 1.0 } else { 0.0 })
    ));

    out.push_str(&format!(
        "\nmemory per GPU: weights {} + KV cache {} = {} of {}\n",
        bytes(sim.memory.weights_bytes),
        bytes(sim.memory.kv_cache_bytes),
        bytes(sim.memory.total()),
        bytes(s.system.gpu.memory_gb * 1e9)
    ));
    let estimated: Vec<&str> = sim
        .pricing
        .families
        .iter()
        .filter(|(_, src)| src.starts_with("estimate"))
        .map(|(k, _)| k.as_str())
        .collect();
    if !estimated.is_empty() {
        out.push_str(&format!(
            "kernel families priced from estimates (not measured): {}\n",
            estimated.join(", ")
        ));
    }
    if !sim.warnings.is_empty() {
        out.push_str("\nwarnings\n");
        for w in &sim.warnings {
            out.push_str(&format!("  - {w}\n"));
        }
    }
    out
}
