//! The report of `decodesim simulate`: one content, three formats (table, JSON, CSV).

use super::table::Table;
use super::units::{bytes, grouped, path, pct, us};
use crate::category::Category;
use crate::sim::Simulation;
use serde_json::{json, Value};

/// The scenario echo: every knob of the table as the loaded scenario runs it (its name with
/// underscores as the key; null where unset), and what loading derived.
pub(crate) fn scenario_json(sim: &Simulation) -> Value {
    let s = &sim.scenario;
    let mut out = serde_json::Map::new();
    for k in crate::scenario::knobs::KNOBS {
        if let Some(v) = k.loaded(s) {
            out.insert(k.column(), v.map_or(Value::Null, |v| v.json()));
        }
    }
    let derived = json!({
        "model_file": crate::units::path(&s.model.source),
        "family": s.model.family.name(),
        "gpu": s.system.gpu.display_name,
        "gpus": s.system.gpu_count,
        // Tokens the step's kernels run over after CUDA-graph padding (= batch when not padded).
        "padded_tokens": s.rank_padding(1, crate::scenario::cudagraph::PadRule::Decode).padded,
        "comm_path": s.comm_path().name(),
        "kv_cache_bytes_per_elem": s.kv_bytes,
        "gpu_memory_utilization": s.gpu_memory_utilization,
    });
    if let Value::Object(d) = derived {
        out.extend(d);
    }
    Value::Object(out)
}

pub(crate) fn calibration_json(sim: &Simulation) -> Value {
    let p = &sim.profile;
    json!({
        "name": p.profile.name,
        "path": crate::units::path(&p.path),
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
        "collectives": collectives_json(sim),
        "ranks": sim.per_rank.iter().enumerate().map(|(r, b)| json!({
            "rank": r,
            "end_us": sim.timeline.rank_end_us[r],
            "compute_us": Category::ALL.iter().filter(|c| c.is_compute())
                .map(|c| b.time(*c)).sum::<f64>(),
            "comm_wait_us": b.comm_wait_us,
            "comm_transfer_us": b.comm_transfer_us,
            "idle_us": b.time(Category::Idle),
        })).collect::<Vec<_>>(),
        "kernels_per_rank": kernels_per_rank(sim),
        "memory_per_gpu": {
            "weights_bytes": sim.memory.weights_bytes,
            "kv_cache_bytes": sim.memory.kv_cache_bytes,
            "other_bytes": sim.memory.other_bytes,
            "kv_blocks_needed": sim.memory_fit.blocks_needed,
            "kv_blocks_available": sim.memory_fit.blocks_available,
            "capacity_bytes": sim.memory_fit.capacity_bytes,
            "gpu_memory_utilization": sim.memory_fit.gpu_memory_utilization,
            "usable_bytes": sim.memory_fit.usable_bytes(),
            "fits": sim.memory_fit.fits(),
        },
        "scenario": scenario_json(sim),
        "calibration": calibration_json(sim),
        "warnings": sim.warnings,
    })
}

/// Long-format CSV (`section,name,field,value`) of exactly the JSON's content.
pub(crate) fn to_csv(sim: &Simulation) -> String {
    fn text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
    /// Leaf values of `v` as (name, field, value): objects extend the field path, arrays
    /// number the name (`ranks#3`).
    fn flatten(prefix: &str, name: &str, v: &Value, out: &mut Vec<[String; 3]>) {
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
                    let sep = if name.is_empty() { "" } else { "#" };
                    flatten(prefix, &format!("{name}{sep}{i}"), x, out);
                }
            }
            _ => out.push([name.to_string(), prefix.to_string(), text(v)]),
        }
    }
    let mut rows: Vec<[String; 4]> = Vec::new();
    if let Value::Object(map) = to_json(sim) {
        for (section, v) in &map {
            match (section.as_str(), v) {
                ("breakdown", Value::Array(entries)) => {
                    for r in entries {
                        let cat = r["category"].as_str().unwrap_or("").to_string();
                        for f in ["time_us", "share", "busy_us"] {
                            rows.push([
                                "breakdown".into(),
                                cat.clone(),
                                f.into(),
                                r[f].to_string(),
                            ]);
                        }
                    }
                }
                (_, Value::Object(_)) | (_, Value::Array(_)) => {
                    let mut leaves = Vec::new();
                    flatten("", "", v, &mut leaves);
                    for [name, field, value] in leaves {
                        rows.push([section.clone(), name, field, value]);
                    }
                }
                _ => rows.push(["summary".into(), String::new(), section.clone(), text(v)]),
            }
        }
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    let written = std::iter::once(["section", "name", "field", "value"].map(String::from))
        .chain(rows)
        .try_for_each(|r| w.write_record(&r));
    // Writing into memory cannot fail; an empty report would be the only symptom.
    match (written, w.into_inner()) {
        (Ok(()), Ok(buf)) => String::from_utf8_lossy(&buf).into_owned(),
        _ => String::new(),
    }
}

/// "kimi-k2.5 (mla+moe, 61 layers) on SYSTEM (8x GPU), TP=8": the first line of every report
/// about a simulated scenario.
pub(crate) fn headline(s: &crate::scenario::Scenario) -> String {
    format!(
        "{} ({}, {} layers) on {} ({}x {}), TP={}{}",
        s.model.name,
        s.model.family.name(),
        s.model.num_layers,
        s.system.name,
        s.system.gpu_count,
        s.system.gpu.display_name,
        s.layout.tp,
        match s.layout.pp_size() {
            1 => String::new(),
            pp => format!(" x PP={pp} (layers {})", pp_split(s)),
        }
    ) + &if s.layout.dp_size() > 1 {
        format!(
            ", DP={} EP={} ({})",
            s.layout.dp_size(),
            s.layout.ep_size(),
            s.comm.ep_comm.name()
        )
    } else {
        String::new()
    } + if s.layout.tbo {
        ", two-batch overlap"
    } else {
        ""
    }
}

/// The pipeline's layer split, `31+30`.
fn pp_split(s: &crate::scenario::Scenario) -> String {
    crate::workload::stage::layer_split(s.model.num_layers, s.layout.pp_size())
        .iter()
        .map(|r| r.len().to_string())
        .collect::<Vec<_>>()
        .join("+")
}

/// Kernels one rank launches in the step: the workload's, or under `--pp` the mean over ranks
/// of the kernels each plays (its stage's, once per micro-batch, and the sends).
fn kernels_per_rank(sim: &Simulation) -> usize {
    if sim.scenario.layout.pp_size() > 1 && sim.timeline.ranks > 0 {
        (sim.timeline.records.len() as f64 / sim.timeline.ranks as f64).round() as usize
    } else {
        sim.workload.ops.iter().filter(|o| o.is_kernel()).count()
    }
}

/// The text report; `verbose` prints the profile's full provenance instead of its one-line
/// summary.
pub fn render_table(sim: &Simulation, verbose: bool) -> String {
    let mut out = String::new();
    header(&mut out, sim, verbose);
    doubts(&mut out, sim);
    step_and_categories(&mut out, sim);
    collectives(&mut out, sim);
    ranks(&mut out, sim);
    memory_and_sources(&mut out, sim);
    warnings(&mut out, sim);
    out
}

/// The headline: model, system, parallelism, serving knobs, CUDA graph padding and the
/// calibration profile (its provenance in one line, or whole when `verbose`).
fn header(out: &mut String, sim: &Simulation, verbose: bool) {
    let s = &sim.scenario;
    out.push_str(&format!("decodesim: {}\n", headline(s)));
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
    let pad = s.rank_padding(1, crate::scenario::cudagraph::PadRule::Decode);
    if pad.padded > pad.tokens {
        out.push_str(&format!(
            "CUDA graph pads {} tokens{} to {} (the next captured size, {})\n",
            pad.tokens,
            if s.layout.dp_size() > 1 {
                " per DP rank"
            } else {
                ""
            },
            pad.padded,
            path(&s.cuda_graph_sizes.path)
        ));
    }
    out.push_str(&format!(
        "calibration: {} ({})\n",
        sim.profile.profile.name,
        path(&sim.profile.path),
    ));
    if verbose {
        for line in super::table::wrap_text(&sim.profile.profile.provenance, 96) {
            out.push_str(&format!("  {line}\n"));
        }
    } else {
        out.push_str(&format!(
            "  {} (--verbose for the full provenance)\n",
            crate::units::provenance_summary(&sim.profile.profile.provenance)
        ));
    }
    out.push('\n');
}

/// What makes the numbers below moot or doubtful, first: a deployment that does not fit,
/// a profile written with a poor fit.
fn doubts(out: &mut String, sim: &Simulation) {
    let s = &sim.scenario;
    // What makes the numbers below moot or doubtful comes first, not after the tables.
    if !sim.memory_fit.fits() {
        out.push_str(&format!(
            "DOES NOT FIT: {}\n  vLLM would refuse to start; the step below is what it would take if it fit.\n\n",
            sim.memory_fit
                .describe(&sim.memory, &s.system.gpu.name)
        ));
    }
    let marks = sim.profile.poor_fit_marks();
    if !marks.is_empty() {
        out.push_str(&format!(
            "POOR FIT: profile '{}' was written (--allow-poor-fit) although these sections failed\n  the fit rules; times priced from them are doubtful:\n",
            sim.profile.profile.name
        ));
        for m in marks {
            for (i, line) in super::table::wrap_text(m, 94).iter().enumerate() {
                out.push_str(&format!("  {} {line}\n", if i == 0 { "-" } else { " " }));
            }
        }
        out.push('\n');
    }
}

/// The step time, tokens/s and kernels, the time per category and the communication split.
fn step_and_categories(out: &mut String, sim: &Simulation) {
    let m = &sim.mean;
    out.push_str(&format!(
        "step time   {} µs\ntokens/s    {}\nkernels     {} per rank\n\n",
        us(sim.step_time_us()),
        grouped(sim.tokens_per_s(), 1),
        kernels_per_rank(sim)
    ));
    let mut t = Table::new(&["category", "time (µs)", "share", "busy (µs)"]);
    let mut rows: Vec<_> = m.entries();
    rows.sort_by(|a, b| b.time_us.total_cmp(&a.time_us));
    for e in rows {
        t.row(vec![
            e.category.name().to_string(),
            us(e.time_us),
            pct(e.share),
            us(e.busy_us),
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
        "\ncommunication: {} µs in collective kernels per rank = wait {} µs ({}) + transfer {} µs; exposed {} µs, overlapped {} µs\n",
        us(comm_total),
        us(m.comm_wait_us),
        pct(wait_share),
        us(m.comm_transfer_us),
        us(m.time(Category::Communication)),
        us(m.comm_overlapped_us())
    ));
}

/// The share of the step one collective op takes on a rank: its count times its transfer time
/// (no wait) over the step time.
fn share_of_step(c: &crate::cost::CollectiveChoice, step_us: f64) -> f64 {
    if step_us > 0.0 {
        f64::from(c.count) * c.time_us / step_us
    } else {
        f64::NAN
    }
}

/// The collectives as the pricing chose them, each with `total_us` (count × time, no wait) and
/// `share_of_step` (that over the step time, 0..1).
fn collectives_json(sim: &Simulation) -> Value {
    let step = sim.step_time_us();
    Value::Array(
        sim.pricing
            .collectives
            .iter()
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
                if let Value::Object(o) = &mut v {
                    o.insert("total_us".into(), json!(f64::from(c.count) * c.time_us));
                    let share = share_of_step(c, step);
                    o.insert(
                        "share_of_step".into(),
                        if share.is_finite() {
                            json!(share)
                        } else {
                            Value::Null
                        },
                    );
                }
                v
            })
            .collect(),
    )
}

/// The collectives of one step, per rank, each with its share of the step.
fn collectives(out: &mut String, sim: &Simulation) {
    out.push_str("\ncollectives per step (per rank)\n");
    let mut t = Table::new(&[
        "op",
        "count",
        "bytes each",
        "path",
        "algo",
        "proto",
        "µs each, no wait",
        "share of step",
    ]);
    let step = sim.step_time_us();
    for c in &sim.pricing.collectives {
        t.row(vec![
            c.op.to_string(),
            c.count.to_string(),
            grouped(c.bytes as f64, 0),
            c.path.to_string(),
            c.algo.to_string(),
            c.proto.clone(),
            us(c.time_us),
            pct(share_of_step(c, step)),
        ]);
    }
    out.push_str(&t.render());
}

/// Each rank's end, compute, communication and idle time, and the compute spread.
fn ranks(out: &mut String, sim: &Simulation) {
    out.push_str("\nranks\n");
    let mut t = Table::new(&[
        "rank",
        "end (µs)",
        "compute (µs)",
        "comm wait (µs)",
        "comm transfer (µs)",
        "idle (µs)",
    ]);
    for (r, b) in sim.per_rank.iter().enumerate() {
        let compute: f64 = Category::ALL
            .iter()
            .filter(|c| c.is_compute())
            .map(|c| b.time(*c))
            .sum();
        t.row(vec![
            r.to_string(),
            us(sim.timeline.rank_end_us[r]),
            us(compute),
            us(b.comm_wait_us),
            us(b.comm_transfer_us),
            us(b.time(Category::Idle)),
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
        "spread across ranks: compute {} .. {} µs ({} apart)\n",
        us(lo),
        us(hi),
        pct(if lo > 0.0 { hi / lo - 1.0 } else { 0.0 })
    ));
}

/// Memory per GPU, and which kernel families are priced from estimates or measured tables.
fn memory_and_sources(out: &mut String, sim: &Simulation) {
    out.push_str(&format!(
        "\nmemory per GPU: weights {} + activations, graphs, buffers {} + KV cache {}{} = {} of {} usable ({:.2} of {})\n",
        bytes(sim.memory.weights_bytes),
        bytes(sim.memory.other_bytes),
        bytes(sim.memory.kv_cache_bytes),
        if sim.memory_fit.dcp > 1 {
            format!(" (sharded over DCP={})", sim.memory_fit.dcp)
        } else {
            String::new()
        },
        bytes(sim.memory.total()),
        bytes(sim.memory_fit.usable_bytes()),
        sim.memory_fit.gpu_memory_utilization,
        bytes(sim.memory_fit.capacity_bytes)
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
    if let Some(a) = &sim.profile.aiconfigurator {
        let mut from_tables: Vec<String> = sim
            .pricing
            .families
            .iter()
            .filter(|(_, src)| src.starts_with("measured: AIConfigurator"))
            .map(|(k, _)| k.clone())
            .collect();
        from_tables.dedup();
        // Each collective named as measured or not: a table holding some collectives prices
        // the others by the profile's laws, and the line must not claim them.
        let (mut measured, mut by_law): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        for c in &sim.pricing.collectives {
            let list = if c.source.contains("AIConfigurator") {
                &mut measured
            } else {
                &mut by_law
            };
            if !list.contains(&c.op) {
                list.push(c.op);
            }
        }
        if !measured.is_empty() {
            from_tables.push(format!("collectives ({})", measured.join(", ")));
        }
        if !from_tables.is_empty() {
            out.push_str(&format!(
                "priced from measured tables (AIConfigurator {}, {}): {}\n",
                a.system,
                a.tables,
                from_tables.join(", ")
            ));
            by_law.retain(|op| !measured.contains(op));
            if !by_law.is_empty() {
                out.push_str(&format!(
                    "not from those tables (priced by the profile's laws): {}\n",
                    by_law.join(", ")
                ));
            }
        }
    }
}

/// The warnings, one line each.
fn warnings(out: &mut String, sim: &Simulation) {
    if !sim.warnings.is_empty() {
        out.push_str("\nwarnings\n");
        for w in &sim.warnings {
            out.push_str(&format!("  - {}\n", crate::units::one_line(w)));
        }
    }
}
