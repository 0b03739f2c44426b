//! Writes a simulated step as a Chrome trace (the JSON torch.profiler writes), one process per
//! rank and one thread per stream, so it opens in Perfetto beside a real profile.

use crate::sim::Simulation;
use crate::workload::Stream;
use serde_json::json;
use std::io::Write;

pub fn write_chrome_trace<W: Write>(sim: &Simulation, out: W) -> std::io::Result<()> {
    let all: Vec<usize> = (0..sim.timeline.ranks).collect();
    write_chrome_trace_ranks(sim, &all, out)
}

/// Ranks a timeline shows by default: every rank up to [`MAX_DEFAULT_RANKS`]; beyond, the
/// first node's ranks and the first rank of every other node, with a note saying so (the
/// caller shows it).
pub const MAX_DEFAULT_RANKS: usize = 64;

pub fn default_ranks(sim: &Simulation) -> (Vec<usize>, Option<String>) {
    let n = sim.timeline.ranks;
    if n <= MAX_DEFAULT_RANKS {
        return ((0..n).collect(), None);
    }
    let g = (sim.scenario.system.gpus_per_node.max(1) as usize).min(n);
    let mut ranks: Vec<usize> = (0..g).collect();
    ranks.extend((g..n).step_by(g));
    let note = format!(
        "the timeline shows {} of {n} ranks (more than {MAX_DEFAULT_RANKS}): node 0's {g} and the first rank of each other node; --timeline-ranks picks others (e.g. 0-{} for all)",
        ranks.len(),
        n - 1
    );
    (ranks, Some(note))
}

/// [`write_chrome_trace`] for the chosen `ranks` only (each below the timeline's rank count;
/// others are left out).
pub fn write_chrome_trace_ranks<W: Write>(
    sim: &Simulation,
    ranks: &[usize],
    out: W,
) -> std::io::Result<()> {
    let mut shown = vec![false; sim.timeline.ranks];
    for &r in ranks {
        if let Some(x) = shown.get_mut(r) {
            *x = true;
        }
    }
    let mut out = std::io::BufWriter::new(out);
    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    let meta = json!({
        "generator": "decodesim",
        "model": sim.scenario.model.name,
        "system": sim.scenario.system.name,
        "tp": sim.scenario.layout.tp,
        "batch": sim.scenario.batch,
        "context": sim.scenario.context,
        "calibration": sim.profile.profile.name,
        "seed": sim.scenario.seed,
        "ranks": sim.timeline.ranks,
        "ranks_shown": shown.iter().filter(|&&x| x).count(),
    });
    serde_json::to_writer(&mut out, &meta)?;
    out.write_all(b",\"traceEvents\":[")?;
    let mut events = Events {
        out: &mut out,
        first: true,
    };
    rank_names(sim, &shown, &mut events)?;
    kernels(sim, &shown, &mut events)?;
    out.write_all(b"]}\n")?;
    out.flush()
}

/// The `traceEvents` array as it is written: a comma goes before every element but the first.
struct Events<'a, W: Write> {
    out: &'a mut W,
    first: bool,
}

impl<W: Write> Events<'_, W> {
    fn emit(&mut self, v: serde_json::Value) -> std::io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *self.out, &v)?;
        Ok(())
    }
}

/// The metadata events that name each shown rank's process and streams' threads.
fn rank_names<W: Write>(
    sim: &Simulation,
    shown: &[bool],
    events: &mut Events<'_, W>,
) -> std::io::Result<()> {
    // Under --pp, ranks are stage-major (sim::pipeline): name each rank's stage.
    let pp = sim.scenario.layout.pp_size();
    let tp = sim.scenario.layout.tp.max(1) as usize;
    for rank in (0..sim.timeline.ranks).filter(|&r| shown[r]) {
        let name = if pp > 1 {
            format!("rank {rank} (simulated, stage {})", rank / tp)
        } else {
            format!("rank {rank} (simulated)")
        };
        events.emit(json!({"ph":"M","name":"process_name","pid":rank,"tid":0,
               "args":{"name": name}}))?;
        events.emit(
            json!({"ph":"M","name":"process_sort_index","pid":rank,"tid":0,"args":{"sort_index":rank}}),
        )?;
        for s in Stream::ALL {
            events.emit(
                json!({"ph":"M","name":"thread_name","pid":rank,"tid":s.index(),
                   "args":{"name": format!("stream {} ({})", s.index(), s.name())}}),
            )?;
        }
    }
    Ok(())
}

/// One complete event per kernel of a shown rank, in the timeline's order.
fn kernels<W: Write>(
    sim: &Simulation,
    shown: &[bool],
    events: &mut Events<'_, W>,
) -> std::io::Result<()> {
    for r in sim
        .timeline
        .records
        .iter()
        .filter(|r| shown[r.rank as usize])
    {
        let op = &sim.workload.ops[r.op as usize];
        events.emit(json!({
            "ph": "X",
            "cat": "kernel",
            "name": op.kernel,
            "pid": r.rank,
            "tid": r.stream.index(),
            "ts": r.start_us,
            "dur": r.end_us - r.start_us,
            "args": {
                "op": op.name,
                "layer": op.layer,
                "category": op.category.name(),
                "flops": op.flops,
                "bytes": op.bytes,
                "wait_us": r.wait_us,
            }
        }))?;
    }
    Ok(())
}
