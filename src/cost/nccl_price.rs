//! NCCL's price of a collective inside a node: from the measured AIConfigurator table (NCCL's
//! own choice per size, or a forced protocol's rows), else from the profile's laws with NCCL's
//! tuner choosing among them; then the NCCL knobs (channels, buffer) against what the profile
//! was measured with. Methods of [`Pricer`], split from `cost/mod.rs` by job.

use super::choice::{CollectiveAlgo, CollectiveChoice};
use super::{aic, allreduce, collective, link, profile, Pricer};
use crate::error::{Error, Result};
use crate::scenario::{Algo, CommPath, Proto};
use crate::workload::{CostFamily, Op};

impl Pricer<'_> {
    /// NCCL's price of `op`: the measured table where it prices it, else the laws; then the
    /// knobs.
    pub(super) fn nccl(&mut self, op: &Op) -> Result<CollectiveChoice> {
        let (c, ran, law) = match self.nccl_from_aic(op) {
            Some((c, ran)) => (self.table_scaled(c), ran, false),
            None => {
                let (c, ran) = self.nccl_by_law(op)?;
                (c, ran, true)
            }
        };
        Ok(self.nccl_knobs(op, c, ran, law))
    }

    /// Long because: the table lookup, the protocol regime (forced or NCCL's own) and the
    /// provenance text all read the same curve, protocol and threshold; split, they would pass
    /// between helpers as a long argument list.
    ///
    /// NCCL from the AIConfigurator table: its rows are NCCL's own choice per size (`auto`); a
    /// forced LL or Simple reads the rows of that regime (PCIe: LL below the switch, Simple
    /// above), extrapolating linearly past them.
    fn nccl_from_aic(&mut self, op: &Op) -> Option<(CollectiveChoice, Proto)> {
        let (t, sec) = (self.p.aic.as_ref()?, self.p.aiconfigurator.as_ref()?);
        if sec.nccl_path != self.path || self.s.nccl.algo == Algo::Tree {
            return None;
        }
        let forced = self.proto_for(op.message_bytes);
        if forced != Proto::Auto && self.path != CommPath::PcieP2p {
            return None;
        }
        let n = self.group_of(op);
        // The AIConfigurator table spells nccl-tests' all-to-all `alltoall`.
        let key = match op.family {
            CostFamily::AllToAll => "alltoall",
            f => f.key(),
        };
        let curve = t.nccl_curve(key, n)?;
        let bytes = op.message_bytes as f64;
        let threshold = self
            .s
            .comm
            .nccl_ll_threshold
            .filter(|_| self.proto == Proto::Auto);
        // Under other channels than measured, NCCL still runs the protocol its tuner chose at
        // the measured ones: NCCL_MIN/MAX_NCHANNELS copy channels after the topology search
        // (connect.cc), while the tuner prices protocols from the search's channels and
        // bandwidth (tuning.cc); the channels act on the bytes term only (`nccl_knobs`).
        let rows = curve.regime(forced)?;
        let tp = aic::comm_price(rows, bytes)?;
        if tp.extrapolated {
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "{} of {} is outside the {} rows of {} at {n} ranks ({}..{}): extrapolated",
                    op.family,
                    crate::units::bytes(op.message_bytes as f64),
                    forced,
                    crate::units::path(&t.dir.join("nccl_collectives.csv")),
                    crate::units::bytes(rows.first().map_or(0.0, |r| r.0)),
                    crate::units::bytes(rows.last().map_or(0.0, |r| r.0)),
                )
            );
        }
        let (proto, ran) = table_proto(forced, threshold, curve.switch_bytes(), bytes);
        let choice = CollectiveChoice {
            op: op.family.key(),
            bytes: op.message_bytes,
            count: 1,
            path: self.path.name(),
            across_nodes: false,
            algo: if self.s.nccl.algo == Algo::Ring {
                CollectiveAlgo::Ring.into()
            } else {
                CollectiveAlgo::Auto.into()
            },
            proto,
            time_us: tp.us,
            source: match threshold {
                Some(th) => format!(
                    "measured: AIConfigurator nccl_collectives.csv ({}), {n} ranks, the {forced} rows (--nccl-ll-threshold {th}: LL below it, Simple from it)",
                    crate::units::path(&t.dir),
                ),
                None => format!(
                    "measured: AIConfigurator nccl_collectives.csv ({}), {n} ranks, NCCL's tuner choice per size{}",
                    crate::units::path(&t.dir),
                    match curve.switch_bytes() {
                        Some((a, b)) => format!(" (LL up to {a:.0} B, Simple from {b:.0} B)"),
                        None => String::new(),
                    }
                ),
            },
            latency_us: aic::comm_latency(rows).min(tp.us),
        };
        Some((choice, ran))
    }

    /// The channels NCCL runs on when `--nccl-min-nchannels` / `--nccl-max-nchannels` move them
    /// off the count the profile was measured with (`cost::allreduce::Channels`); None otherwise
    /// or when the profile does not state that count.
    fn channels(&self) -> Option<allreduce::Channels> {
        let k = self.s.comm;
        let d = self.p.nccl.as_ref()?;
        allreduce::Channels::of(
            d,
            k.nccl_min_nchannels,
            k.nccl_max_nchannels,
            link::system_link(self.s).0,
        )
    }

    /// `NCCL_MIN_NCHANNELS`, `NCCL_MAX_NCHANNELS` and `NCCL_BUFFSIZE` against the defaults the
    /// profile was measured with (cost::allreduce): a note when they change nothing. `ran`: the
    /// protocol NCCL ran (the table's pick, Simple between its switch points). `law`: the
    /// price came from the profile's laws, whose bus bandwidth the channels already scaled.
    fn nccl_knobs(
        &mut self,
        op: &Op,
        mut c: CollectiveChoice,
        ran: Proto,
        law: bool,
    ) -> CollectiveChoice {
        let k = self.s.comm;
        let set_channels = k.nccl_max_nchannels.is_some() || k.nccl_min_nchannels.is_some();
        if !set_channels && k.nccl_buffsize.is_none() {
            return c;
        }
        let Some(d) = &self.p.nccl else {
            note!(self.quiet, self.warnings, format!(
                "NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS / NCCL_BUFFSIZE not priced: profile '{}' has no [nccl] section stating the channels and buffer it was measured with",
                self.p.profile.name
            ));
            return c;
        };
        let channels = self.channels();
        let simple = ran == Proto::Simple;
        let extra = if simple {
            allreduce::buffsize_extra_us(
                d,
                k.nccl_buffsize,
                channels,
                op.family,
                self.s.layout.tp,
                op.message_bytes,
            )
        } else {
            0.0
        };
        if set_channels && channels.is_none() {
            note!(self.quiet, self.warnings, format!(
                "the NCCL channel settings change nothing here: NCCL runs the {} channels the profile was measured with",
                d.default_nchannels
            ));
        }
        if k.nccl_buffsize.is_some() && extra == 0.0 {
            note!(self.quiet, self.warnings,
                "NCCL_BUFFSIZE changes nothing for some collectives here: it sizes the Simple protocol's buffer only (LL/LL128 use their own), and a message that fits in one ring loop needs no more".into(),
            );
        }
        let lat = c.latency_us.clamp(0.0, c.time_us);
        let mut bytes_us = c.time_us - lat;
        if let (Some(ch), false) = (channels, law) {
            let n = self.group_of(op);
            let bytes = op.message_bytes as f64;
            let wire = collective::steps(op.family, n) / n.max(1) as f64 * bytes;
            let ll = ran == Proto::Ll;
            let ch = ch.for_message(bytes, allreduce::bytes_per_channel(ll, true, n));
            bytes_us = ch.bytes_us(bytes_us, wire, ll);
        }
        if let Some(ch) = channels {
            c.source = format!(
                "{}; at {} NCCL channels against the {} measured (bytes term in proportion, no faster than the {:.1} GB/s link)",
                c.source, ch.run, ch.measured, ch.link_gbps
            );
        }
        c.time_us = lat + bytes_us + extra;
        c.latency_us = lat + extra;
        c
    }

    fn nccl_by_law(&mut self, op: &Op) -> Result<(CollectiveChoice, Proto)> {
        let (p, n, path) = (self.p, self.group_of(op), self.path);
        let proto = self.proto_for(op.message_bytes);
        let cands =
            collective::candidates(&p.collectives, op.family, path, self.s.nccl.algo, proto);
        // NCCL's tuner picks the protocol and algorithm from the topology search's channels,
        // which NCCL_MIN/MAX_NCHANNELS leave alone (they copy channels after the search); the
        // pick then runs on the channels set, its bus bandwidth moved with them.
        let Some((picked, t)) = collective::choose(&cands, op.family, n, op.message_bytes) else {
            return Err(self.no_entry(op, proto));
        };
        let run;
        let (c, t) = match self.channels() {
            Some(ch) => {
                let ll = picked.proto == Proto::Ll;
                let per = allreduce::bytes_per_channel(ll, picked.algo == Algo::Ring, n);
                let ch = ch.for_message(op.message_bytes as f64, per);
                run = profile::CollectiveParams {
                    bus_bw_gbps: ch.bus_gbps(picked.bus_bw_gbps, ll),
                    ..picked.clone()
                };
                let t = collective::time_us(&run, op.family, n, op.message_bytes);
                (&run, t)
            }
            None => (picked, t),
        };
        self.note_law_reach(op, c, n);
        let threshold = self
            .s
            .comm
            .nccl_ll_threshold
            .filter(|_| self.proto == Proto::Auto);
        let choice = CollectiveChoice {
            op: op.family.key(),
            bytes: op.message_bytes,
            count: 1,
            path: path.name(),
            across_nodes: false,
            algo: CollectiveAlgo::of_nccl(c.algo).into(),
            proto: match threshold {
                Some(_) => format!("threshold: {}", c.proto.name()),
                None => c.proto.name().to_string(),
            },
            time_us: t,
            source: c.source.clone(),
            latency_us: collective::time_us(c, op.family, n, 0),
        };
        Ok((choice, c.proto))
    }

    /// The profile has no collective entry this op may be priced by.
    fn no_entry(&self, op: &Op, proto: Proto) -> Error {
        let (p, path) = (self.p, self.path);
        Error::field(
            &p.path,
            "collectives",
            format!(
                "no entry for {} on path '{}' with algo '{}' and proto '{}' (entries present: {})",
                op.family,
                path,
                self.s.nccl.algo,
                proto,
                p.collectives
                    .iter()
                    .map(|c| format!("{}/{}/{}/{}", c.op, c.path, c.algo, c.proto))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    }

    /// What the law's entry `c` does not cover for this op (`n` ranks): another op's entry,
    /// ranks or sizes it was not measured at.
    fn note_law_reach(&mut self, op: &Op, c: &profile::CollectiveParams, n: u32) {
        let (p, path) = (self.p, self.path);
        // Profiles state all_reduce / all_gather / any entries only.
        if matches!(op.family, CostFamily::AllToAll | CostFamily::ReduceScatter) {
            note!(self.quiet, self.warnings, format!(
                "profile '{}' has no {} entry for path '{path}': priced by the {} entry's law with n−1 steps",
                p.profile.name,
                op.family,
                c.op
            ));
        }
        if !c.measured_nranks.is_empty() && !c.measured_nranks.contains(&n) {
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "collective {}/{}/{}: measured at {:?} ranks, extrapolated to {n}",
                    c.path, c.algo, c.proto, c.measured_nranks
                )
            );
        }
        if let Some([lo, hi]) = c.measured_bytes {
            let b = op.message_bytes as f64;
            if b < lo || b > hi {
                note!(
                    self.quiet,
                    self.warnings,
                    format!(
                        "{} of {} is outside the measured range {}..{} of {}/{}/{}",
                        op.family,
                        crate::units::bytes(op.message_bytes as f64),
                        crate::units::bytes(lo),
                        crate::units::bytes(hi),
                        c.path,
                        c.algo,
                        c.proto
                    )
                );
            }
        }
    }
}

/// The protocol column of a table-priced NCCL collective: the regime its rows were read in
/// (`forced`) and, under NCCL's own choice, which side of the measured `switch` the size lies;
/// with the protocol the NCCL knobs take it to have run.
fn table_proto(
    forced: Proto,
    threshold: Option<u64>,
    switch: Option<(f64, f64)>,
    bytes: f64,
) -> (String, Proto) {
    match (forced, switch) {
        (p, _) if threshold.is_some() => (format!("threshold: {}", p.name()), p),
        (Proto::Auto, Some((ll, _))) if bytes <= ll => ("auto: LL".to_string(), Proto::Ll),
        (Proto::Auto, Some((_, simple))) if bytes >= simple => {
            ("auto: Simple".to_string(), Proto::Simple)
        }
        // Between the switch points the rows do not say which protocol NCCL ran; the buffer and
        // channel knobs take the larger messages' protocol, Simple, whose buffer can bind there.
        (Proto::Auto, Some(_)) => ("auto: LL/Simple".to_string(), Proto::Simple),
        (p, _) => (p.name().to_string(), p),
    }
}
