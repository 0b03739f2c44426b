//! The one table of speculative-decoding methods ([`METHODS`]): each method's names, the
//! section of `data/spec_decode/methods.toml` that holds its limits, what it drafts with and how
//! that draft is found, what its draft passes read from the target and the schedule of its step.
//!
//! Everything that names a method reads it: the enum's names and parsing, the `--method` flags'
//! help and checks, the sweep's grid keys, the throughput points' `spec_method`, the drafter's
//! loading (`whatif::draft`), the step's passes (`workload::spec_step`) and the reports. A new
//! method is one [`SpecMethod`] variant, its row here and its section of
//! `data/spec_decode/methods.toml`; new code only where it drafts with something no method has
//! drafted with before (a [`DraftSource`] or a [`DraftInput`]) or runs another [`Schedule`].

use crate::error::{Error, Result};
use std::str::FromStr;

/// The speculative-decoding methods vLLM runs that decodesim models; each has one row of
/// [`METHODS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethod {
    /// An EAGLE-3 head fed the target's aux hidden states (arXiv 2503.01840).
    Eagle3,
    /// DeepSeek's MTP module reused autoregressively (DeepSeek-V3 report §5.4.3).
    Mtp,
    /// A separate small model with the target's vocabulary.
    DraftModel,
}

/// How a method's draft is found; `whatif::draft` loads each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftSource {
    /// A draft head's config.json read against the target (`--draft-config` in `whatif
    /// spec-decode`, `--draft` in `sweep`); without one, the method's `default_draft` in
    /// `data/spec_decode/methods.toml`.
    HeadConfig,
    /// The target's own MTP layer (`num_nextn_predict_layers` of its config): no draft file.
    TargetMtp,
    /// A separate model, a bundled name or a config.json (`--draft-model` in `whatif
    /// spec-decode`, `--draft` in `sweep`); there is no default.
    Model,
}

impl DraftSource {
    /// The `whatif spec-decode` flag that names the draft (None: the method takes none).
    pub fn flag(self) -> Option<&'static str> {
        match self {
            DraftSource::HeadConfig => Some("--draft-config"),
            DraftSource::TargetMtp => None,
            DraftSource::Model => Some("--draft-model"),
        }
    }
}

/// What a draft pass reads from the target besides the token ids, hence the method's own kernels
/// around the drafter's layers (`Drafter::draft_pass`, the proposer's bookkeeping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftInput {
    /// The target's aux hidden states (`aux_hidden_states` of the method's limits), gathered by
    /// the proposer and fused into one hidden row (`fc`) in the first draft pass (EAGLE-3).
    AuxHidden,
    /// The embedding and the previous hidden state, normalised and projected (`eh_proj`) in
    /// every draft pass (DeepSeek's MTP module).
    EmbedHidden,
    /// Token ids only (a draft model).
    Tokens,
}

/// The passes of a method's step (`SpecStep::new`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// One verify pass over k+1 query tokens, then k autoregressive draft passes: the first over
    /// the k+1 positions the verify pass kept (as vLLM's proposer runs it), the rest over one.
    Chain,
}

/// One speculative-decoding method: a row of [`METHODS`].
#[derive(Debug)]
pub struct MethodSpec {
    pub method: SpecMethod,
    /// Its spellings, any case: the first is its name (flags, reports, errors), the others are
    /// accepted too (vLLM's own names among them).
    pub names: &'static [&'static str],
    /// Its section of `data/spec_decode/methods.toml` (the limits: deepest k, aux hidden
    /// states, default draft, their source).
    pub section: &'static str,
    /// What it is, for `--method`'s help (None: the name says it).
    pub about: Option<&'static str>,
    /// The method in prose ("the default EAGLE-3 draft shape").
    pub label: &'static str,
    /// What it drafts with, in the words of the flags' errors.
    pub drafter: &'static str,
    pub source: DraftSource,
    pub input: DraftInput,
    pub schedule: Schedule,
}

/// Every method, in the order flags, help and errors list them.
pub const METHODS: &[MethodSpec] = &[
    MethodSpec {
        method: SpecMethod::Eagle3,
        names: &["eagle3", "eagle-3"],
        section: "eagle3",
        about: Some("a one-layer draft head"),
        label: "EAGLE-3",
        drafter: "an EAGLE-3 draft",
        source: DraftSource::HeadConfig,
        input: DraftInput::AuxHidden,
        schedule: Schedule::Chain,
    },
    MethodSpec {
        method: SpecMethod::Mtp,
        names: &["mtp", "deepseek_mtp"],
        section: "mtp",
        about: Some("DeepSeek's MTP module"),
        label: "MTP",
        drafter: "the target's own MTP layer",
        source: DraftSource::TargetMtp,
        input: DraftInput::EmbedHidden,
        schedule: Schedule::Chain,
    },
    MethodSpec {
        method: SpecMethod::DraftModel,
        names: &["draft-model", "draft_model"],
        section: "draft_model",
        about: None,
        label: "draft model",
        drafter: "a draft model",
        source: DraftSource::Model,
        input: DraftInput::Tokens,
        schedule: Schedule::Chain,
    },
];

// Each method has one row at most (a missing row is refused by `SpecMethod::spec`).
const _: () = {
    let mut i = 0;
    while i < METHODS.len() {
        let mut j = i + 1;
        while j < METHODS.len() {
            assert!(
                METHODS[i].method as usize != METHODS[j].method as usize,
                "a method with two rows in METHODS"
            );
            j += 1;
        }
        i += 1;
    }
};

impl SpecMethod {
    /// Every method, in [`METHODS`] order.
    pub const ALL: [SpecMethod; METHODS.len()] = {
        let mut all = [SpecMethod::Eagle3; METHODS.len()];
        let mut i = 0;
        while i < METHODS.len() {
            all[i] = METHODS[i].method;
            i += 1;
        }
        all
    };

    /// The method `--method` takes when not given.
    pub const DEFAULT: SpecMethod = SpecMethod::Eagle3;

    /// The method's row of [`METHODS`].
    pub fn spec(self) -> &'static MethodSpec {
        METHODS
            .iter()
            .find(|m| m.method == self)
            .expect("every speculative method has a row in METHODS")
    }

    pub fn name(self) -> &'static str {
        self.spec().names[0]
    }

    /// The method's section of `data/spec_decode/methods.toml`.
    pub(crate) fn key(self) -> &'static str {
        self.spec().section
    }

    /// Every method's name, in order.
    fn names() -> impl Iterator<Item = &'static str> {
        METHODS.iter().map(|m| m.names[0])
    }

    /// The methods `keep` keeps as a list in words, each written by `show` ("eagle3, mtp or
    /// draft-model").
    pub fn choices(
        keep: impl Fn(&MethodSpec) -> bool,
        show: impl Fn(&MethodSpec) -> String,
    ) -> String {
        or_list(METHODS.iter().filter(|m| keep(m)).map(show).collect())
    }

    /// The names of the methods `keep` keeps, as a list in words ("eagle3 or mtp").
    pub fn names_where(keep: impl Fn(&MethodSpec) -> bool) -> String {
        Self::choices(keep, |m| m.names[0].to_string())
    }

    /// `--method`'s help: each method's name and what it is.
    pub fn help() -> String {
        Self::choices(
            |_| true,
            |m| match m.about {
                Some(about) => format!("{} ({about})", m.names[0]),
                None => m.names[0].to_string(),
            },
        )
    }
}

/// "a", "a or b", "a, b or c".
fn or_list(mut items: Vec<String>) -> String {
    match items.pop() {
        None => String::new(),
        Some(last) if items.is_empty() => last,
        Some(last) => format!("{} or {last}", items.join(", ")),
    }
}

impl FromStr for SpecMethod {
    type Err = Error;
    /// Any spelling of [`METHODS`], any case.
    fn from_str(s: &str) -> Result<Self> {
        let l = s.to_ascii_lowercase();
        METHODS
            .iter()
            .find(|m| m.names.contains(&l.as_str()))
            .map(|m| m.method)
            .ok_or_else(|| Error::Unknown {
                kind: "--method",
                name: s.to_string(),
                choices: Self::names().map(str::to_string).collect(),
            })
    }
}

impl std::fmt::Display for SpecMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_to_its_method_and_names_round_trip() {
        for m in METHODS {
            for n in m.names {
                assert_eq!(n.parse::<SpecMethod>().unwrap(), m.method);
                assert_eq!(n.to_uppercase().parse::<SpecMethod>().unwrap(), m.method);
            }
            assert_eq!(m.method.name().parse::<SpecMethod>().unwrap(), m.method);
            assert_eq!(m.method.spec().section, m.section);
        }
        let e = "medusa".parse::<SpecMethod>().unwrap_err().to_string();
        assert!(e.contains("eagle3, mtp, draft-model"), "{e}");
    }

    // Names the rows it checks, so that a new method's row leaves it true.
    #[test]
    fn lists_in_words() {
        let help = SpecMethod::help();
        for part in [
            "eagle3 (a one-layer draft head), ",
            "mtp (DeepSeek's MTP module)",
            "draft-model",
        ] {
            assert!(help.contains(part), "{help}");
        }
        assert!(!help.contains("draft-model ("), "{help}");
        assert_eq!(
            SpecMethod::names_where(|m| matches!(m.method, SpecMethod::Eagle3 | SpecMethod::Mtp)),
            "eagle3 or mtp"
        );
        assert_eq!(or_list(vec![]), "");
        assert_eq!(or_list(vec!["a".into()]), "a");
        assert_eq!(
            or_list(vec!["a".into(), "b".into(), "c".into()]),
            "a, b or c"
        );
    }

    /// `data/spec_decode/methods.toml` has a section for every method and none for another.
    #[test]
    fn methods_toml_has_one_section_per_method() {
        let path = crate::scenario::catalog::data_root().join("data/spec_decode/methods.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        let mut sections: Vec<&str> = table.keys().map(String::as_str).collect();
        let mut keys: Vec<&str> = METHODS.iter().map(|m| m.section).collect();
        sections.sort_unstable();
        keys.sort_unstable();
        assert_eq!(sections, keys);
    }
}
