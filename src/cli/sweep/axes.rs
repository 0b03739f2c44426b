//! `sweep`'s flags for the layout settings (`Sweep::Layout` knobs, as `--tbo` and
//! `--nccl-min-nchannels`): one flag per knob, read from [`KNOBS`] as `scenario_args` reads the
//! scenario flags, each value later parsed by the knob's own parser.

use crate::scenario::knobs::{Knob, Sweep, KNOBS};

/// Each layout setting's list as given (knob, the flag's text), in the table's order.
#[derive(Debug, Clone, Default)]
pub struct LayoutAxisArgs {
    lists: Vec<(&'static Knob, String)>,
}

impl LayoutAxisArgs {
    /// The knobs a sweep lists each value of as its own fitted scenario.
    pub(crate) fn knobs() -> impl Iterator<Item = &'static Knob> {
        KNOBS.iter().filter(|k| k.sweep.is_layout())
    }
    /// The list given for `k` (None: not given).
    pub(super) fn get(&self, k: &Knob) -> Option<&str> {
        self.lists
            .iter()
            .find(|(x, _)| *x == k)
            .map(|(_, t)| t.as_str())
    }
    /// Sets the list of `k` (a `--grid` key), keeping the table's order.
    pub(super) fn set(&mut self, k: &'static Knob, text: String) {
        match self.lists.iter_mut().find(|(x, _)| *x == k) {
            Some(l) => l.1 = text,
            None => {
                self.lists.push((k, text));
                let at = |k: &Knob| KNOBS.iter().position(|x| x == k);
                self.lists.sort_by_key(|(k, _)| at(k));
            }
        }
    }
}

impl clap::Args for LayoutAxisArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        Self::knobs().fold(cmd, |c, k| {
            let Sweep::Layout { how, .. } = k.sweep else {
                unreachable!("knobs() keeps the layout settings")
            };
            c.arg(
                clap::Arg::new(k.name())
                    .long(k.name())
                    .value_name(k.value_name)
                    .help(format!("{} {how} [default: {}]", k.help, k.default_text()))
                    .action(clap::ArgAction::Set)
                    .value_parser(clap::value_parser!(String))
                    // A grid file holds the same key.
                    .conflicts_with("grid"),
            )
        })
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for LayoutAxisArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut a = LayoutAxisArgs::default();
        a.update_from_arg_matches(m)?;
        Ok(a)
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        for k in Self::knobs() {
            if let Some(text) = m.get_one::<String>(k.name()) {
                self.set(k, text.clone());
            }
        }
        Ok(())
    }
}
