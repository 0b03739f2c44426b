//! A replica's parallel layout: tensor parallel within each group (`tp`), pipeline stages
//! (`pp`), data-parallel attention ranks whose routed experts are spread over every GPU of the
//! replica (`dp`, `ep`), and decode context parallel within the TP group (`dcp`). The planner
//! and `capacity --layouts` compare layouts; each one is applied to a scenario through the
//! scenario's own knobs, so the scenario check holds it like any flag.

use crate::error::{Error, Result};
use crate::scenario::deployment::EpComm;
use crate::scenario::knobs;
use crate::scenario::{ModelSpec, SystemSpec};
use crate::sim::ScenarioRequest;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    /// Expert-parallel size; 1: experts sharded by TP.
    pub ep: u32,
    pub dcp: u32,
}

/// The keys a layout is written with, in the order its label shows them.
const KEYS: [&str; 5] = ["tp", "pp", "dp", "ep", "dcp"];

impl Layout {
    pub fn tp(tp: u32) -> Self {
        Layout {
            tp,
            pp: 1,
            dp: 1,
            ep: 1,
            dcp: 1,
        }
    }

    /// GPUs one replica of this layout takes.
    pub fn gpus(&self) -> u32 {
        self.tp * self.pp * self.dp
    }

    fn field(&mut self, key: &str) -> &mut u32 {
        match key {
            "tp" => &mut self.tp,
            "pp" => &mut self.pp,
            "dp" => &mut self.dp,
            "ep" => &mut self.ep,
            _ => &mut self.dcp,
        }
    }

    /// A size as the scenario runs it: DP attention spreads the experts over every GPU of the
    /// replica (vLLM's EP size is DP × TP), so `dp16` alone means EP 16.
    fn value(&self, key: &str) -> u32 {
        if key == "ep" && self.dp > 1 && self.ep == 1 {
            return self.dp * self.tp;
        }
        let mut c = *self;
        *c.field(key)
    }

    /// Parses `tp8-pp2`, `dp16-ep16`, `tp8-dp2-ep16`, `tp8-dcp8` (keys in any order, `-` or
    /// `.` between them, each at most once; unnamed sizes are 1).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: String| Error::FlagUse {
            flag: "--layouts",
            problem: format!(
                "'{}': {why}; expected sizes like tp8-pp2, dp16-ep16 or tp8-dp2-ep16 (keys: {})",
                crate::units::echo(text),
                KEYS.join(", ")
            ),
        };
        let mut l = Layout::tp(1);
        let mut seen: Vec<&str> = Vec::new();
        let parts: Vec<&str> = text
            .trim()
            .split(['-', '.'])
            .filter(|p| !p.is_empty())
            .collect();
        if parts.is_empty() {
            return Err(bad("no sizes".into()));
        }
        for part in parts {
            let lower = part.to_ascii_lowercase();
            // The longest key first: "dcp8" is not "dp" of "cp8".
            let Some(key) = ["dcp", "tp", "pp", "dp", "ep"]
                .into_iter()
                .find(|k| lower.starts_with(k))
            else {
                return Err(bad(format!("'{part}' names no size")));
            };
            let n: u32 = lower[key.len()..]
                .parse()
                .ok()
                .filter(|n| (1..=4096).contains(n))
                .ok_or_else(|| bad(format!("'{part}': the size must be a whole number 1..4096")))?;
            if seen.contains(&key) {
                return Err(bad(format!("{key} is given twice")));
            }
            seen.push(key);
            *l.field(key) = n;
        }
        Ok(l)
    }

    /// `TP8`, `TP8×PP2`, `DP16×EP16`: the sizes above 1 (TP always).
    pub fn label(&self) -> String {
        let mut parts = vec![format!("TP{}", self.tp)];
        for k in &KEYS[1..] {
            let v = self.value(k);
            if v > 1 {
                parts.push(format!("{}{v}", k.to_ascii_uppercase()));
            }
        }
        parts.join("×")
    }

    /// Sets the request's knobs to this layout. A size whose knob this build lacks, or that
    /// the scenario check refuses, is an error naming the layout.
    pub fn apply(&self, req: &mut ScenarioRequest) -> Result<()> {
        req.tp = Some(self.tp);
        // Data-parallel attention moves tokens to the experts by all-to-all: a layout with DP
        // left at the default `--ep-comm allreduce` takes NCCL's all-to-all (`--ep-comm rdma-ll`
        // given by the user is kept).
        if self.dp > 1 && req.comm.ep_comm == EpComm::AllReduce {
            req.comm.ep_comm = EpComm::AllToAll;
        }
        for key in &KEYS[1..] {
            let v = self.value(key);
            let Some(k) = knobs::find(key) else {
                if v > 1 {
                    return Err(Error::FlagUse {
                        flag: "--layouts",
                        problem: format!(
                            "{}: {key} is not a setting decodesim models",
                            self.label()
                        ),
                    });
                }
                continue;
            };
            // Every size is the layout's, 1 included: a base `--dp 32` does not leak into a
            // `tp8-pp4` layout.
            k.set(req, &v.to_string())?;
        }
        Ok(())
    }

    /// The layouts the planner considers on `system` when none are named: every TP that
    /// divides the system's GPUs; on a system of several nodes, a node per pipeline stage
    /// (TP within the node); for a MoE model, data-parallel attention with the experts over
    /// every GPU, at TP 1 and at TP within the node. Shapes the scenario check refuses are
    /// skipped by the planner with the reason.
    pub fn defaults(system: &SystemSpec, model: &ModelSpec) -> Vec<Layout> {
        let gpus = system.gpu_count;
        let per_node = system.gpus_per_node.max(1);
        let mut out: Vec<Layout> = (1..=gpus)
            .rev()
            .filter(|t| gpus.is_multiple_of(*t))
            .map(Layout::tp)
            .collect();
        let nodes = system.nodes.max(1);
        if nodes > 1 && knobs::find("pp").is_some() {
            out.push(Layout {
                pp: nodes,
                ..Layout::tp(per_node)
            });
        }
        if model.moe.is_some() && gpus > 1 && knobs::find("dp").is_some() {
            out.push(Layout {
                dp: gpus,
                ep: gpus,
                ..Layout::tp(1)
            });
            if nodes > 1 {
                out.push(Layout {
                    dp: nodes,
                    ep: gpus,
                    ..Layout::tp(per_node)
                });
            }
        }
        out
    }
}

/// Parses `--layouts A,B,...`; the same layout twice is an error.
pub fn parse_list(text: &str) -> Result<Vec<Layout>> {
    let mut out: Vec<Layout> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let l = Layout::parse(item)?;
        if out.contains(&l) {
            return Err(Error::FlagUse {
                flag: "--layouts",
                problem: format!("{} is listed twice", l.label()),
            });
        }
        out.push(l);
    }
    if out.is_empty() {
        return Err(Error::FlagUse {
            flag: "--layouts",
            problem: "no layout given; expected a list like tp8,tp8-pp2,dp16-ep16".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes_in_any_order() {
        let l = Layout::parse("pp2-TP8").unwrap();
        assert_eq!((l.tp, l.pp, l.dp, l.ep, l.dcp), (8, 2, 1, 1, 1));
        assert_eq!(l.gpus(), 16);
        assert_eq!(l.label(), "TP8×PP2");
        let w = Layout::parse("dp16.ep16").unwrap();
        assert_eq!((w.tp, w.dp, w.ep, w.gpus()), (1, 16, 16, 16));
        assert_eq!(w.label(), "TP1×DP16×EP16");
        assert_eq!(Layout::parse("tp8-dp2").unwrap().label(), "TP8×DP2×EP16");
        let d = Layout::parse("tp8-dcp8").unwrap();
        assert_eq!((d.tp, d.dcp, d.gpus()), (8, 8, 8));
    }

    #[test]
    fn refuses_what_is_not_a_layout() {
        for bad in ["", "tp", "tp0", "xx8", "tp8-tp4", "tp99999", "tp-8"] {
            let e = Layout::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--layouts"), "{bad}: {e}");
        }
        let e = parse_list("tp8,pp1-tp8").unwrap_err().to_string();
        assert!(e.contains("TP8 is listed twice"), "{e}");
    }
}
