//! `workload::spec_step`: the speculative step every engine plays. The pass list of each method
//! at k = 1 and 3 (counts and token shapes written down by hand per draft source and draft input,
//! so that a new method reusing them is checked as it is), and the timeline engine against the
//! fast path for each method, both iterating the same list.

use decodesim::cost::CalibrationProfile;
use decodesim::scenario::Scenario;
use decodesim::sim::fast::{Collectives, FastScenario, Launch};
use decodesim::sim::{Engine, ScenarioRequest, Timeline};
use decodesim::whatif::acceptance::Acceptance;
use decodesim::whatif::draft::Draft;
use decodesim::whatif::spec_decode;
use decodesim::workload::spec_method::{DraftInput, DraftSource};
use decodesim::workload::spec_step::{PassKind, PassRun, Side, SpecMethod, SpecStep};
use decodesim::workload::{CostFamily, Workload};

const BATCH: u64 = 8;
/// Seeds the timeline is averaged over in the agreement test.
const SEEDS: u64 = 12;

/// A dense draft model with Kimi-K2.5's vocabulary (the only bundled pair of equal
/// vocabularies is Kimi with itself): 2 layers, hidden 2048.
const SMALL_DRAFT: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "num_hidden_layers": 2,
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "vocab_size": 163840,
  "max_position_embeddings": 131072,
  "torch_dtype": "bfloat16"
}"#;

fn small_draft_path() -> String {
    let dir = std::env::temp_dir().join(format!("decodesim-spec-step-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("small-draft.json");
    std::fs::write(&path, SMALL_DRAFT).unwrap();
    path.display().to_string()
}

/// The target, its profile and the loaded drafter of `method` (4 target layers).
fn setup(method: SpecMethod) -> (Scenario, CalibrationProfile, Draft) {
    let model = match method.spec().source {
        DraftSource::TargetMtp => "deepseek-v3",
        DraftSource::HeadConfig | DraftSource::Model => "kimi-k2.5",
    };
    let (s, p) = ScenarioRequest {
        model: model.into(),
        layers: Some(4),
        batch: BATCH as u32,
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap();
    let draft = match method.spec().source {
        DraftSource::Model => Some(small_draft_path()),
        DraftSource::HeadConfig | DraftSource::TargetMtp => None,
    };
    let d = Draft::load(method, draft.as_deref(), &s.model).unwrap();
    (s, p, d)
}

fn run(kind: PassKind, queries: u32, repeat: u32, first_index: u32) -> PassRun {
    PassRun {
        kind,
        queries,
        repeat,
        first_index,
    }
}

fn allreduce_bytes(w: &Workload) -> Vec<u64> {
    w.ops
        .iter()
        .filter(|o| o.family == CostFamily::AllReduce)
        .map(|o| o.message_bytes)
        .collect()
}

fn ops_named<'a>(w: &'a Workload, suffix: &str) -> Vec<&'a decodesim::workload::Op> {
    w.ops.iter().filter(|o| o.name.ends_with(suffix)).collect()
}

#[test]
fn every_method_is_a_chain_of_k_draft_passes_after_one_verify() {
    for method in SpecMethod::ALL {
        for k in [1u32, 3] {
            let step = SpecStep::new(method, k);
            assert_eq!(step.k, k);
            assert_eq!(step.windows.len(), 2, "{method:?} k {k}");
            let (verify, draft) = (&step.windows[0], &step.windows[1]);
            assert_eq!(verify.side, Side::Verify);
            assert_eq!(verify.passes, vec![run(PassKind::Verify, k + 1, 1, 0)]);
            assert_eq!(verify.pass_gaps, 0);
            assert_eq!(draft.side, Side::Draft);
            let expect = if k == 1 {
                vec![run(PassKind::DraftFirst, 2, 1, 0)]
            } else {
                vec![
                    run(PassKind::DraftFirst, 4, 1, 0),
                    run(PassKind::DraftNext, 1, 2, 1),
                ]
            };
            assert_eq!(draft.passes, expect, "{method:?} k {k}");
            assert_eq!(draft.pass_gaps, k, "one pass gap per draft pass");
            assert_eq!(step.count(PassKind::Verify), 1);
            assert_eq!(step.count(PassKind::DraftFirst), 1);
            assert_eq!(step.count(PassKind::DraftNext), k - 1);
        }
    }
    // The fast path indexes its pass models by kind: ALL is in declaration order.
    for (i, kind) in PassKind::ALL.iter().enumerate() {
        assert_eq!(*kind as usize, i);
    }
}

/// Token shapes of each pass, by hand, graphs off (no padding): batch 8, hidden 7168 (Kimi,
/// DeepSeek-V3 and the EAGLE-3 head) or 2048 (the small draft model).
#[test]
fn pass_workloads_have_the_token_shapes_of_each_method() {
    for method in SpecMethod::ALL {
        let (mut s, _, d) = setup(method);
        s.cuda_graphs = false;
        let ds = d.scenario(&s).unwrap();
        // (draft hidden, draft layers) of each kind of drafter: a head's default draft is
        // Kimi's one-layer MLA head.
        let (dh, dl): (u64, u64) = match method.spec().source {
            DraftSource::HeadConfig => (7168, 1),
            DraftSource::TargetMtp => (7168, 1),
            DraftSource::Model => (2048, 2),
        };
        for k in [1u64, 3] {
            let step = SpecStep::new(method, k as u32);
            let v = step.window_workload(&step.windows[0], &d, &s, &ds);
            // The target's 4 layers at k+1 query tokens: embedding + 2 per layer allreduces.
            let ars = allreduce_bytes(&v);
            assert_eq!(ars.len(), 9, "{method:?} k {k}");
            assert!(
                ars.iter().all(|&b| b == BATCH * (k + 1) * 7168 * 2),
                "{ars:?}"
            );
            let rs = ops_named(&v, "rejection_greedy_sample");
            assert_eq!(rs.len(), 1);
            assert_eq!(rs[0].shape.m, BATCH * (k + 1));
            assert!(v.ops.iter().all(|o| !o.name.starts_with("draft")));

            let w = step.window_workload(&step.windows[1], &d, &s, &ds);
            // Ops of pass i are named draft<i>.; the bookkeeping comes first, unnamed.
            assert_eq!(w.ops[0].name, "prepare_next_token_inputs");
            assert_eq!(w.ops[0].shape.m, BATCH * (k + 1));
            for i in 0..k {
                assert!(w
                    .ops
                    .iter()
                    .any(|o| o.name.starts_with(&format!("draft{i}."))));
            }
            assert!(!w
                .ops
                .iter()
                .any(|o| o.name.starts_with(&format!("draft{k}."))));
            // Per pass: embedding + 2 per draft layer; the first over k+1 tokens per sequence.
            let ars = allreduce_bytes(&w);
            let per = (1 + 2 * dl) as usize;
            assert_eq!(ars.len(), per * k as usize, "{method:?} k {k}");
            assert!(ars[..per].iter().all(|&b| b == BATCH * (k + 1) * dh * 2));
            assert!(ars[per..].iter().all(|&b| b == BATCH * dh * 2), "{ars:?}");

            let gather = ops_named(&w, "gather_aux_hidden_states");
            let fc = ops_named(&w, "eagle3_fc");
            let eh = ops_named(&w, "mtp_eh_proj");
            // The method's own kernels follow from what its draft passes read.
            match method.spec().input {
                DraftInput::AuxHidden => {
                    // Three aux hidden states fused once, in the first pass only.
                    assert_eq!(gather.len(), 1);
                    assert_eq!(fc.len(), 1);
                    assert!(fc[0].name.starts_with("draft0."));
                    assert_eq!((fc[0].shape.m, fc[0].shape.k), (BATCH * (k + 1), 3 * 7168));
                    assert!(eh.is_empty());
                }
                DraftInput::EmbedHidden => {
                    // Every MTP pass projects [embedding; hidden] (2 × hidden) first.
                    assert_eq!(eh.len(), k as usize);
                    assert_eq!((eh[0].shape.m, eh[0].shape.k), (BATCH * (k + 1), 2 * 7168));
                    assert!(eh[1..].iter().all(|o| o.shape.m == BATCH));
                    assert!(gather.is_empty() && fc.is_empty());
                }
                DraftInput::Tokens => {
                    assert!(gather.is_empty() && fc.is_empty() && eh.is_empty());
                }
            }
        }
    }
}

/// A chain keeps the accepted prefix plus the bonus token: vLLM's mean acceptance length.
#[test]
fn expected_tokens_are_the_mean_acceptance_length() {
    let acc = Acceptance::per_position(vec![0.8, 0.6, 0.3]).unwrap();
    for k in 1..=3u32 {
        let step = SpecStep::new(SpecMethod::Eagle3, k);
        let want = [1.8, 2.4, 2.7][k as usize - 1];
        let got = step.expected_tokens(&acc.survival(k));
        assert!((got - want).abs() < 1e-12, "k {k}: {got}");
        assert_eq!(got, acc.mean_acceptance_length(k));
    }
}

/// The timeline engine (`spec_decode::step_cost`) and the fast path play the same pass list:
/// each side and the whole step agree within the fast path's 0.5% (jitter off).
#[test]
fn timeline_and_fast_path_agree_for_every_method() {
    for method in SpecMethod::ALL {
        let (base, mut p, d) = setup(method);
        p.variability.kernel_cv = 0.0;
        p.variability.rank_skew_cv = 0.0;
        p.variability.collective_cv = 0.0;
        p.variability.launch_skew_us = 0.0;
        let fast = FastScenario::new(&base, &p, Some(&d.drafter)).unwrap();
        let (mut engine, mut tl) = (Engine::new(), Timeline::default());
        for (batch, context, graphs) in
            [(1u32, 2048u64, true), (24, 16384, false), (96, 4096, true)]
        {
            let mut s = base.clone();
            s.batch = batch;
            s.context = context;
            s.cuda_graphs = graphs;
            let launch = Launch::new(&p, graphs);
            let coll = Collectives::new(&s, &p).unwrap();
            for k in [1u32, 3] {
                // The timeline draws the experts each MoE layer touches (seeded) where the
                // fast path takes their expectation: with few MoE layers (DeepSeek-V3's 4
                // layers hold one; the MTP pass is one) one draw moves a side by up to ~1%, so
                // the timeline is averaged over seeds (jitter is off: nothing else varies).
                let mut c = spec_decode::StepCost {
                    draft_us: 0.0,
                    verify_us: 0.0,
                    host_us: 0.0,
                };
                for seed in 0..SEEDS {
                    s.seed = seed * 7919 + 1;
                    let one = spec_decode::step_cost(&s, &d, &p, k, &mut engine, &mut tl).unwrap();
                    c.draft_us += one.draft_us / SEEDS as f64;
                    c.verify_us += one.verify_us / SEEDS as f64;
                    c.host_us = one.host_us;
                }
                let (fd, fv, fs) = fast
                    .spec_step_us(batch, context, k, &launch, &coll)
                    .unwrap();
                let whole = c.draft_us + c.verify_us + c.host_us;
                let sd = p.spec_decode.as_ref().unwrap();
                assert_eq!(c.host_us, sd.exposed_host_us);
                assert!((fs - (fd + fv + sd.exposed_host_us)).abs() < 1e-9 * fs);
                for (what, t, f) in [
                    ("draft", c.draft_us, fd),
                    ("verify", c.verify_us, fv),
                    ("step", whole, fs),
                ] {
                    let err = (f - t).abs() / t;
                    assert!(
                        err < 0.005,
                        "{method:?} batch {batch} context {context} graphs {graphs} k {k} {what}: fast {f:.1} vs timeline {t:.1} ({:.3}%)",
                        err * 100.0
                    );
                }
                // The draft side carries k pass gaps on both engines.
                assert!(c.draft_us > k as f64 * sd.pass_gap_us);
            }
        }
    }
}
