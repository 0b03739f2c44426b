//! The co-located (chunked-prefill) answer a study is held against, and the winner between it
//! and the ratios with the sentence that says so.

use super::{best_point, per_million, Colocated, DisaggOptions, RatioRow, Winner};
use crate::capacity::curve::CurvePoint;
use crate::capacity::{Capacity, CapacityRequest};

/// The co-located answer from the chunked-prefill curve (see the module notes).
pub(super) fn colocated(
    req: &CapacityRequest,
    o: &DisaggOptions,
    cap: &Capacity,
    input: f64,
    longest: f64,
    output: f64,
    price: Option<f64>,
) -> Colocated {
    let tp = cap.reference.scenario.layout.tp;
    let dp = cap.reference.scenario.layout.dp_size();
    if dp > 1 {
        return Colocated {
            modelled: false,
            note: format!(
                "co-located chunked prefill with data-parallel attention (--dp {dp}) is not modelled"
            ),
            ..unmet(tp * dp, None)
        };
    }
    let mnbt = req.memory.max_num_batched_tokens as f64;
    let per_token = cap.curve.prefill.as_ref().map_or(0.0, |c| c.us_per_token);
    let ttft_us = |pt: &CurvePoint, len: f64| {
        let budget = (mnbt - pt.concurrency as f64).max(1.0);
        (len / budget).ceil() * pt.step_time_us + len * per_token
    };
    let ok = |pt: &CurvePoint| {
        o.max_ttft_ms
            .is_none_or(|t| ttft_us(pt, longest) <= t * 1e3)
    };
    let usd_h = price.map(|p| p * tp as f64);
    match best_point(&cap.curve.points, req.max_tpot_ms, ok) {
        Some(pt) => Colocated {
            meets: true,
            modelled: true,
            note: String::new(),
            gpus: tp,
            concurrency: pt.concurrency,
            requests_per_s: pt.tokens_per_s / output,
            tokens_per_s: pt.tokens_per_s,
            tokens_per_s_per_gpu: pt.tokens_per_s / tp as f64,
            tpot_ms: pt.tpot_ms,
            ttft_min_ms: ttft_us(pt, input) / 1e3,
            usd_per_hour: usd_h,
            usd_per_million_tokens: per_million(usd_h, pt.tokens_per_s),
        },
        None => {
            let first = cap.curve.points.first();
            Colocated {
                note: match first {
                    Some(f) if req.max_tpot_ms.is_some_and(|m| f.tpot_ms > m) => format!(
                        "TPOT binds: one user already takes {:.1} ms per token",
                        f.tpot_ms
                    ),
                    Some(f) => format!(
                        "TTFT binds: one user's prompt already takes {:.1} ms at the lower bound",
                        ttft_us(f, longest) / 1e3
                    ),
                    None => "no point on the curve".into(),
                },
                tpot_ms: first.map_or(0.0, |f| f.tpot_ms),
                ttft_min_ms: first.map_or(0.0, |f| ttft_us(f, input) / 1e3),
                ..unmet(tp, usd_h)
            }
        }
    }
}

/// A modelled co-located answer on `gpus` that carries nothing.
fn unmet(gpus: u32, usd_per_hour: Option<f64>) -> Colocated {
    Colocated {
        meets: false,
        modelled: true,
        note: String::new(),
        gpus,
        concurrency: 0,
        requests_per_s: 0.0,
        tokens_per_s: 0.0,
        tokens_per_s_per_gpu: 0.0,
        tpot_ms: 0.0,
        ttft_min_ms: 0.0,
        usd_per_hour,
        usd_per_million_tokens: None,
    }
}

/// The winner among the rows that meet the targets, and the sentence that says so.
pub(super) fn choose(rows: &[RatioRow], co: &Colocated) -> (Winner, String) {
    let meeting: Vec<&RatioRow> = rows.iter().filter(|r| r.meets).collect();
    let priced = meeting.iter().all(|r| r.usd_per_million_tokens.is_some())
        && (!co.meets || co.usd_per_million_tokens.is_some())
        && (co.meets || !meeting.is_empty());
    // Lower is better.
    let key = |usd: Option<f64>, per_gpu: f64| {
        if priced {
            usd.unwrap_or(f64::INFINITY)
        } else {
            -per_gpu
        }
    };
    let best = meeting.iter().copied().min_by(|a, b| {
        key(a.usd_per_million_tokens, a.tokens_per_s_per_gpu)
            .total_cmp(&key(b.usd_per_million_tokens, b.tokens_per_s_per_gpu))
            .then(a.gpus.cmp(&b.gpus))
    });
    let measure = |usd: Option<f64>, per_gpu: f64| {
        if priced {
            format!(
                "{:.2} USD per million output tokens",
                usd.unwrap_or(f64::NAN)
            )
        } else {
            format!("{per_gpu:.1} tokens/s per GPU")
        }
    };
    let co_key = key(co.usd_per_million_tokens, co.tokens_per_s_per_gpu);
    match best {
        Some(b) if !co.meets || key(b.usd_per_million_tokens, b.tokens_per_s_per_gpu) < co_key => (
            Winner::Disaggregated {
                prefill: b.prefill_instances,
                decode: b.decode_instances,
            },
            format!(
                "disaggregate: {}P:{}D ({} GPUs, {} binds) gives {}, TPOT {:.1} ms, TTFT {}; co-located {}",
                b.prefill_instances,
                b.decode_instances,
                b.gpus,
                b.binds,
                measure(b.usd_per_million_tokens, b.tokens_per_s_per_gpu),
                b.tpot_ms,
                ttft_text(b),
                colocated_clause(co, measure(co.usd_per_million_tokens, co.tokens_per_s_per_gpu))
            ),
        ),
        Some(b) => (
            Winner::Colocated,
            format!(
                "do not disaggregate: co-located chunked prefill gives {}, TPOT {:.1} ms, TTFT at least {:.1} ms; the best ratio {}P:{}D gives {}",
                measure(co.usd_per_million_tokens, co.tokens_per_s_per_gpu),
                co.tpot_ms,
                co.ttft_min_ms,
                b.prefill_instances,
                b.decode_instances,
                measure(b.usd_per_million_tokens, b.tokens_per_s_per_gpu)
            ),
        ),
        None if co.meets => (
            Winner::Colocated,
            format!(
                "do not disaggregate: no ratio meets the targets; co-located chunked prefill gives {}, TPOT {:.1} ms",
                measure(co.usd_per_million_tokens, co.tokens_per_s_per_gpu),
                co.tpot_ms
            ),
        ),
        None => (
            Winner::Neither,
            format!(
                "neither meets the targets: no ratio does ({}), and co-located {}",
                rows.first().map_or("no ratio".into(), |r| format!("{} binds: {}", r.binds, r.note)),
                co.note
            ),
        ),
    }
}

/// TTFT of a row for a sentence.
pub(crate) fn ttft_text(r: &RatioRow) -> String {
    match r.ttft_ms {
        Some(t) => format!("{t:.1} ms (at least {:.1} ms)", r.ttft_min_ms),
        None => format!(
            "at least {:.1} ms (the prefill pool is saturated: its queue grows without bound)",
            r.ttft_min_ms
        ),
    }
}

/// What the co-located answer gives (`measured`: its cost or throughput as the verdict
/// measures), or why it does not count, for the verdict that disaggregates.
fn colocated_clause(co: &Colocated, measured: String) -> String {
    if co.meets {
        format!(
            "gives {measured}, TPOT {:.1} ms, TTFT at least {:.1} ms",
            co.tpot_ms, co.ttft_min_ms
        )
    } else if !co.modelled {
        format!("is not compared: {}", co.note)
    } else {
        format!("does not meet the targets ({})", co.note)
    }
}
