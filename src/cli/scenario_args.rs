//! The scenario flags shared by `simulate`, `compare`, `capacity`, `whatif` and `calibrate`:
//! one flag per knob of [`crate::scenario::knobs::KNOBS`], parsed by the knob's own parser,
//! with its default shown as a value.

use crate::scenario::knobs::{Knob, Value, KNOBS};
use crate::scenario::Proto;
use crate::sim::ScenarioRequest;

/// The scenario the flags ask for, and which knobs were given.
#[derive(Debug, Clone, Default)]
pub struct ScenarioArgs {
    request: ScenarioRequest,
    given: Vec<&'static str>,
}

/// The clap argument of a knob: `--NAME <VALUE_NAME>`, the knob's help with its default.
pub(super) fn knob_arg(k: &'static Knob) -> clap::Arg {
    clap::Arg::new(k.name())
        .long(k.name())
        .value_name(k.value_name)
        .help(k.help_text())
        .action(clap::ArgAction::Set)
        .value_parser(move |s: &str| k.parse_value(s))
}

impl clap::Args for ScenarioArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        KNOBS.iter().fold(cmd, |c, k| c.arg(knob_arg(k)))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for ScenarioArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut a = ScenarioArgs::default();
        a.update_from_arg_matches(m)?;
        Ok(a)
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        for k in KNOBS {
            if let Some(v) = m.get_one::<Value>(k.name()) {
                k.apply(&mut self.request, v.clone());
                if !self.given.contains(&k.name()) {
                    self.given.push(k.name());
                }
            }
        }
        Ok(())
    }
}

impl ScenarioArgs {
    /// Whether the flag of the knob `name` was given.
    fn given(&self, name: &str) -> bool {
        self.given.contains(&name)
    }
    /// Warns (standard error) about scenario flags that change nothing as given: `--ep-comm`
    /// without `--ep` (or with `--ep 1`).
    pub(crate) fn warn_noop_flags(&self) {
        // --ep 1 is no expert parallelism either: the experts stay split as with TP.
        if self.given("ep-comm") && self.request.ep.unwrap_or(1) <= 1 && self.request.dp_size() <= 1
        {
            super::output::warn(&format!(
                "--ep-comm {} does nothing without --ep N (expert parallelism, N > 1); ignored",
                self.request.comm.ep_comm.name()
            ));
        }
    }
    /// Warns about each of the knobs `names` that was given: `why` says what takes its place.
    pub(crate) fn warn_given(&self, names: &[&str], why: &str) {
        for n in names.iter().filter(|n| self.given(n)) {
            super::output::warn(&format!("--{n} does nothing here: {why}; ignored"));
        }
    }
    /// Takes what a trace shows for the flags not given: its ranks as `--tp` (when neither
    /// `--tp`, `--dp` nor `--pp` is given), its batch, context (the mean, rounded) and decoder
    /// layers. Returns one note saying what was taken, or none.
    pub(crate) fn defaults_from_trace(
        &mut self,
        inferred: &crate::accounting::infer::Inferred,
    ) -> Vec<String> {
        let mut taken = Vec::new();
        if let Some(r) = &inferred.ranks {
            if !self.given("tp") && !self.given("dp") && !self.given("pp") && r.value > 0 {
                self.request.tp = Some(r.value);
                taken.push(format!("--tp {} ({})", r.value, r.how()));
            }
        }
        if let Some(b) = &inferred.batch {
            if !self.given("batch") && b.value > 0 {
                self.request.batch = b.value;
                taken.push(format!("--batch {} ({})", b.value, b.how()));
            }
        }
        if let Some(c) = &inferred.context {
            if !self.given("context") && c.value.is_finite() && c.value >= 0.0 {
                let v = c.value.round() as u64;
                self.request.context = v;
                taken.push(format!("--context {v} ({})", c.how()));
            }
        }
        if let Some(l) = &inferred.layers {
            if !self.given("layers") && l.value > 0 {
                self.request.layers = Some(l.value);
                taken.push(format!("--layers {} ({})", l.value, l.how()));
            }
        }
        if taken.is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "scenario flags not given, taken from the trace: {}",
                taken.join("; ")
            )]
        }
    }
    pub fn request(&self) -> ScenarioRequest {
        self.request.clone()
    }
}

/// The warning for `--nccl-proto LL128` on a scenario whose collectives do not run over NVLink
/// (NCCL enables LL128 only there; the cost model prices NCCL's fallback), for the commands
/// whose report lists no per-scenario warnings (`sweep`, `whatif --vary`). None when the path
/// is NVLink or the scenario does not load (the command then reports why).
pub(super) fn ll128_warning(flag: &str, base: &ScenarioRequest) -> Option<String> {
    let mut r = base.clone();
    r.proto = Proto::Ll128;
    let (s, _) = r.load().ok()?;
    let path = s.comm_path();
    (path != crate::scenario::deployment::CommPath::Nvlink).then(|| {
        format!(
            "{flag} LL128 is not eligible on {} (the {} path): NCCL enables LL128 only over NVLink, so those collectives are priced as NCCL's fallback",
            s.system.name,
            path.name()
        )
    })
}
