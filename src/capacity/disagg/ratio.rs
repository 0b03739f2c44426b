//! One prefill:decode ratio xP:yD priced: where it is placed, the request rate each pool and
//! link carries, the decode point at that rate, its TTFT with the queues' waits, and the load
//! lowered until it meets `--max-ttft-ms` (see the module notes of `disagg`).

use super::{per_million, RatioRow};
use crate::capacity::curve::{Curve, CurvePoint};
use crate::cost::kv_transfer::{self, KvLink, KvTransfer};
use crate::scenario::Scenario;

/// What every ratio of one study shares: the two instances, the links between them, the decode
/// pool's curve and the prefill instance's prices.
pub(super) struct RatioStudy<'a> {
    pub ps: &'a Scenario,
    pub s: &'a Scenario,
    pub same_system: bool,
    pub intra: Option<KvLink>,
    pub net: Option<KvLink>,
    pub decode_curve: &'a Curve,
    pub decode_limit: Option<CurvePoint>,
    /// The decode curve's points within `--max-tpot-ms`.
    pub usable: Vec<&'a CurvePoint>,
    pub compute_requests_per_s: f64,
    pub prefill_alone_us: f64,
    pub prefill_longest_us: f64,
    pub input: f64,
    pub longest: f64,
    pub output: f64,
    pub max_ttft_ms: Option<f64>,
    pub price_p: Option<f64>,
    pub price_d: Option<f64>,
}

/// The rates that bound one placed ratio, in requests/s, and the KV transfer times its TTFT
/// adds (µs).
struct RatioLoad {
    x: u32,
    y: u32,
    decode_limit: CurvePoint,
    /// The mean prompt's and the longest prompt's transfer alone.
    mean_transfer_us: f64,
    longest_transfer_us: f64,
    /// One decode TP group's receive time at load (the shared NICs where a pool packs a node).
    recv_us: f64,
    /// The rate the sending link allows one prefill instance.
    net_rate: f64,
    /// One prefill instance's rate: its compute or its link, the slower.
    mu: f64,
    /// The prefill pool's, the decode pool's receiving and the decode pool's token rates.
    r_p: f64,
    r_recv: f64,
    r_tokens: f64,
    r_d: f64,
    r_cap: f64,
}

/// A ratio at one request rate.
struct AtRate {
    /// The decode point that carries the rate.
    point: CurvePoint,
    /// The prefill pool's utilization.
    rho: f64,
    /// The queueing-free TTFT of the mean and of the longest prompt (µs).
    lower_us: f64,
    longest_lower_us: f64,
    /// With the M/D/1 waits; None when a queue is saturated.
    with_wait_us: Option<f64>,
}

/// How `--max-ttft-ms` caps a ratio's load.
enum TtftCap {
    /// The load it carries meets the target, or there is none.
    Untouched,
    /// The highest load that meets it.
    Lowered(f64),
    /// Not even an idle ratio meets it: why.
    Unmet(String),
}

impl RatioStudy<'_> {
    fn tp_p(&self) -> u32 {
        self.ps.layout.tp
    }

    fn gpus_of(&self, x: u32, y: u32) -> u32 {
        x * self.tp_p() + y * self.s.layout.tp * self.s.layout.dp_size()
    }

    fn fits_node(&self, x: u32, y: u32) -> bool {
        self.same_system && self.gpus_of(x, y) <= self.s.system.gpus_per_node
    }

    fn kv(&self, len: f64, link: &KvLink) -> KvTransfer {
        kv_transfer::kv_transfer(
            &self.s.model,
            self.tp_p(),
            self.s.layout.tp,
            self.s.kv_bytes,
            len,
            link,
        )
    }

    /// The mean prompt's KV transfer over each link some ratio up to `n`P:`n`D uses.
    pub fn transfers(&self, n: u32) -> Vec<KvTransfer> {
        let mut transfers = Vec::new();
        if let Some(l) = &self.intra {
            if (1..=n).any(|x| (1..=n).any(|y| self.fits_node(x, y))) {
                transfers.push(self.kv(self.input, l));
            }
        }
        if let Some(l) = &self.net {
            transfers.push(self.kv(self.input, l));
        }
        transfers
    }

    /// The ratio `x`P:`y`D: its rate within the targets, or what stops it.
    pub fn row(&self, x: u32, y: u32) -> RatioRow {
        let gpus = self.gpus_of(x, y);
        let mut row = unplaced(x, y, gpus);
        let link = if self.fits_node(x, y) {
            self.intra.as_ref()
        } else {
            self.net.as_ref()
        };
        let Some(link) = link else {
            row.note = format!(
                "{gpus} GPUs do not fit one node of {}, and there is no [network] between nodes",
                self.s.system.gpus_per_node
            );
            return row;
        };
        row.link = link.class;
        let Some(dl) = self.decode_limit else {
            row.binds = "TPOT";
            row.note = format!(
                "one decode user already takes {:.1} ms per token, above --max-tpot-ms",
                self.decode_curve
                    .points
                    .first()
                    .map_or(f64::NAN, |q| q.tpot_ms)
            );
            return row;
        };
        let load = self.load(x, y, link, dl);
        row.kv_transfer_ms = load.mean_transfer_us / 1e3;
        row.binds = self.binds(&load);
        let r = match self.ttft_cap(&load) {
            TtftCap::Untouched => load.r_cap,
            TtftCap::Lowered(r) => {
                row.binds = "TTFT";
                r
            }
            TtftCap::Unmet(note) => {
                row.binds = "TTFT";
                row.note = note;
                return row;
            }
        };
        let at = self.at_rate(&load, r);
        row.meets = true;
        row.requests_per_s = r;
        row.tokens_per_s = r * self.output;
        row.tokens_per_s_per_gpu = r * self.output / gpus as f64;
        row.decode_concurrency = at.point.concurrency;
        row.tpot_ms = at.point.tpot_ms;
        row.ttft_min_ms = at.lower_us / 1e3;
        row.prefill_utilization = at.rho;
        row.ttft_ms = at.with_wait_us.map(|w| w / 1e3);
        row.usd_per_hour = self.usd_per_hour(x, y);
        row.usd_per_million_tokens = per_million(row.usd_per_hour, row.tokens_per_s);
        row
    }

    /// The rates of `x`P:`y`D over `link` with the decode pool at its operating limit `dl`.
    fn load(&self, x: u32, y: u32, link: &KvLink, dl: CurvePoint) -> RatioLoad {
        let (tp_p, tp, dp) = (self.tp_p(), self.s.layout.tp, self.s.layout.dp_size());
        let t_mean = self.kv(self.input, link);
        let t_long = self.kv(self.longest, link);
        // Each prefill instance sends one prompt's KV at a time, each decode instance
        // receives one at a time: the sending end bounds a prefill instance's rate, the
        // receiving end the decode pool's (x prefill instances may feed fewer decode ones).
        // Across nodes, at load, a pool's instances packed on a node share its NICs.
        let shared = if link.class == "net" {
            let g = self.s.system.gpus_per_node.max(1);
            let gp = self.ps.system.gpus_per_node.max(1);
            KvLink::net_shared(
                &self.ps.system,
                (tp_p, (x * tp_p).min(gp)),
                &self.s.system,
                (tp, (y * tp * dp).min(g)),
            )
            .map(|l| self.kv(self.input, &l))
        } else {
            None
        };
        let t_rate = shared.as_ref().unwrap_or(&t_mean);
        let net_rate = 1e6 / t_rate.send_us.max(1e-9);
        let recv_rate = dp as f64 * 1e6 / t_rate.recv_us.max(1e-9);
        let mu = self.compute_requests_per_s.min(net_rate);
        let r_p = x as f64 * mu;
        let r_recv = y as f64 * recv_rate;
        let r_tokens = y as f64 * dl.tokens_per_s / self.output;
        let r_d = r_tokens.min(r_recv);
        RatioLoad {
            x,
            y,
            decode_limit: dl,
            mean_transfer_us: t_mean.time_us,
            longest_transfer_us: t_long.time_us,
            recv_us: t_rate.recv_us,
            net_rate,
            mu,
            r_p,
            r_recv,
            r_tokens,
            r_d,
            r_cap: r_p.min(r_d),
        }
    }

    /// What limits the load a ratio carries, before any TTFT target.
    fn binds(&self, l: &RatioLoad) -> &'static str {
        if l.r_p < l.r_d {
            if l.net_rate < self.compute_requests_per_s {
                "KV transfer"
            } else {
                "prefill"
            }
        } else if l.r_recv < l.r_tokens {
            "KV transfer"
        } else {
            "decode"
        }
    }

    /// At `r` requests/s: the decode point that carries it, the queueing-free TTFT of the
    /// mean and of the longest prompt, and the TTFT with the M/D/1 wait (None: saturated).
    fn at_rate(&self, l: &RatioLoad, r: f64) -> AtRate {
        let need = r * self.output / l.y as f64;
        let at = self
            .usable
            .iter()
            .copied()
            .filter(|pt| pt.tokens_per_s >= need * (1.0 - 1e-9))
            .min_by_key(|pt| pt.concurrency)
            .unwrap_or(&l.decode_limit);
        let s_us = 1e6 / l.mu;
        let rho = r / (l.x as f64 * l.mu);
        // The decode side's receiving queue, in tandem with the prefill queue.
        let rho_recv = r / l.r_recv;
        let lower = self.prefill_alone_us + l.mean_transfer_us + at.step_time_us;
        let longest_lower = self.prefill_longest_us + l.longest_transfer_us + at.step_time_us;
        // (With DP each of the y × dp TP groups is a receiving queue.)
        let md1 = |rho: f64, s: f64| rho * s / (2.0 * (1.0 - rho));
        let with_wait = (rho < 1.0 - 1e-9 && rho_recv < 1.0 - 1e-9)
            .then(|| lower + md1(rho, s_us) + md1(rho_recv, l.recv_us));
        AtRate {
            point: *at,
            rho,
            lower_us: lower,
            longest_lower_us: longest_lower,
            with_wait_us: with_wait,
        }
    }

    /// The load `--max-ttft-ms` leaves a ratio.
    fn ttft_cap(&self, l: &RatioLoad) -> TtftCap {
        let Some(t) = self.max_ttft_ms else {
            return TtftCap::Untouched;
        };
        let limit = t * 1e3;
        let meets = |r: f64| {
            let at = self.at_rate(l, r);
            at.longest_lower_us <= limit && at.with_wait_us.is_some_and(|w| w <= limit)
        };
        if !meets(0.0) {
            let idle = self.at_rate(l, 0.0);
            return TtftCap::Unmet(format!(
                "the queueing-free TTFT is {:.1} ms ({:.1} ms for the longest prompt), above --max-ttft-ms {t}",
                idle.lower_us / 1e3,
                idle.longest_lower_us / 1e3
            ));
        }
        if meets(l.r_cap) {
            return TtftCap::Untouched;
        }
        // The highest load that meets the target (TTFT grows with the load).
        let (mut lo, mut hi) = (0.0, l.r_cap);
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if meets(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        TtftCap::Lowered(lo)
    }

    fn usd_per_hour(&self, x: u32, y: u32) -> Option<f64> {
        let (tp_p, tp, dp) = (self.tp_p(), self.s.layout.tp, self.s.layout.dp_size());
        match (self.price_p, self.price_d) {
            (Some(a), Some(b)) if tp_p == tp * dp => {
                Some((x as f64 * a + y as f64 * b) * tp_p as f64)
            }
            (Some(a), Some(b)) => {
                Some(x as f64 * a * tp_p as f64 + y as f64 * b * (tp * dp) as f64)
            }
            _ => None,
        }
    }
}

/// A ratio before it is placed: nothing carried, `placement` binding until a link is found.
fn unplaced(x: u32, y: u32, gpus: u32) -> RatioRow {
    RatioRow {
        prefill_instances: x,
        decode_instances: y,
        gpus,
        link: "-",
        meets: false,
        binds: "placement",
        note: String::new(),
        requests_per_s: 0.0,
        tokens_per_s: 0.0,
        tokens_per_s_per_gpu: 0.0,
        decode_concurrency: 0,
        tpot_ms: 0.0,
        kv_transfer_ms: 0.0,
        ttft_min_ms: 0.0,
        ttft_ms: None,
        prefill_utilization: 0.0,
        usd_per_hour: None,
        usd_per_million_tokens: None,
    }
}
