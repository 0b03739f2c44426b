//! The per-thread memo of priced shapes: token-dependent ops per (pass, batch, queries),
//! attention per context, collectives per NCCL setting.

use super::basis::Scratch;
use super::ep::{Coupled, Tail};
use super::{BuildHasherDefault, Busy, Draw, HashMap, Hasher, RefCell, Scenario, State, NCAT};

/// Prices of one (pass, batch, queries): the token-dependent ops, then per context and per
/// collective setting.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) touched: f64,
    /// Per op of the regime: the token-dependent ops' µs, 0 elsewhere.
    pub(super) tokens_us: Box<[f64]>,
    pub(super) tokens_busy: Busy,
    /// Expert parallelism: per op of the regime, the expected slowest rank's µs beyond the
    /// mean rank's (loaded ops only; empty without expert parallelism).
    pub(super) excess: Box<[f64]>,
    /// Expert parallelism at a batch the DP ranks do not split evenly: the windows whose
    /// loaded ops' part follows the attention (`ep::Coupled`), added per context.
    pub(super) coupled: Vec<Coupled>,
    /// Expert parallelism at a batch the DP ranks do not split evenly: the step's tail's
    /// attention and sampling at the mean DP rank's share (`ep::Tail`).
    pub(super) tail: Tail,
    /// (context, µs of `context_ops`, busy): at most `CONTEXTS_PER_ENTRY`, replaced oldest
    /// first once full (`evict` is the next slot to replace).
    pub(super) context: Vec<(u64, Box<[f64]>, Busy)>,
    pub(super) evict: usize,
    /// The slot of `context` found or filled last (a sweep's next row most often reads it).
    pub(super) last: usize,
    /// (collectives id, graphs, µs of `collective_ops`, busy).
    pub(super) collectives: Vec<(u64, bool, Box<[f64]>, Busy)>,
}

/// FxHash's multiply-rotate: the memo's keys are small integers, hashed once per pass played.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Keyed by (batch, queries, padded rows): graphs on and off pad differently.
pub(super) type EntryMap = HashMap<(u32, u32, u32), Entry, BuildHasherDefault<KeyHasher>>;

/// One thread's priced shapes for one fast scenario.
pub(super) struct Memo {
    pub(super) owner: u64,
    /// The pricing scenario, its batch, context and NCCL settings set before each pricing.
    pub(super) scenario: Scenario,
    /// By pass slot (`FastScenario::slots`: the plain step and the speculative passes, or the
    /// pipeline's stages).
    pub(super) passes: Vec<EntryMap>,
    /// Prices stored, to bound the memory a long-lived thread keeps.
    pub(super) stored: usize,
    /// Scratch by (pass slot, high regime), `slot * 2 + high`: one pass's op durations, `W`
    /// lanes of them, and what they hold outside their context ops: the token-dependent and
    /// collective prices of (pass slot, high regime, batch, queries, padded rows, collectives
    /// id, graphs, lanes); `None` after a Monte Carlo draw changed them. A sweep's next lanes at
    /// the same batch and setting then write their context ops only, a pipeline's stages each
    /// in their own.
    pub(super) durations: Vec<(Option<DurationsFrom>, Vec<f64>)>,
    /// Scratch: the workload each layout is priced in (`price_layout_in`), by
    /// [`scratch_index`] (pass slot, regime, layout).
    pub(super) scratch: Vec<Scratch>,
    /// The Monte Carlo draw applied after the memoised prices (`whatif::uncertainty`), if any.
    pub(super) draw: Option<Draw>,
    /// Latency part of each collective of a (pass, batch, queries, padded, collectives id,
    /// graphs), as a fraction of its price: only drawn steps that scale latency and bandwidth
    /// apart read it.
    pub(super) latency: HashMap<LatencyKey, Box<[f64]>>,
    /// A pipeline's stage plays (see [`StagePlays`]).
    pub(super) stage_plays: StagePlays,
    /// Two-batch-overlap plays at knot contexts (`tbo_knots`).
    pub(super) knots: super::tbo_knots::KnotPlays,
}

/// A pipeline stage played at one micro-batch size for a sweep's lanes of contexts: (stage
/// slot, micro-batch size, collectives id, graphs, the overhead's bits, lanes, first context).
/// A pipeline of `pp` stages splits a batch in `pp` micro-batches, so every batch from
/// `pp × (b - 1) + 1` to `pp × (b + 1) - 1` plays micro-batches of `b` sequences: a sweep along
/// its batch axis plays the same (stage, size, contexts) for up to `2 pp - 1` batches.
pub(super) type StagePlayKey = (usize, u32, u64, bool, u64, usize, u64);

/// A stage play's lanes: their contexts, then per lane its window (µs), then per lane its busy
/// time per category.
pub(super) struct StagePlay {
    pub(super) contexts: Box<[u64]>,
    pub(super) values: Box<[f64]>,
}

/// The stage plays kept, how many values they hold, and the least and greatest micro-batch
/// size among them.
#[derive(Default)]
pub(super) struct StagePlays {
    pub(super) map: HashMap<StagePlayKey, StagePlay, BuildHasherDefault<KeyHasher>>,
    pub(super) values: usize,
    pub(super) sizes: (u32, u32),
}

impl StagePlays {
    /// Hands a kept play of `key` at these `contexts` to `put` (each lane's window and busy
    /// time, in lane order); false where none is kept.
    pub(super) fn hand_out<const W: usize>(
        &self,
        key: &StagePlayKey,
        contexts: &[u64; W],
        put: &mut impl FnMut(f64, &Busy),
    ) -> bool {
        let Some(p) = self.map.get(key) else {
            return false;
        };
        if p.contexts[..] != contexts[..] {
            return false;
        }
        let (span, busy) = p.values.split_at(W);
        for (w, b) in span.iter().zip(busy.chunks_exact(NCAT)) {
            put(*w, b.try_into().expect("NCAT values per lane"));
        }
        true
    }

    /// Keeps the play of `key` (micro-batch size `key.1`) at `contexts`, its lanes' `states`,
    /// within [`STAGE_PLAYS_MAX_VALUES`]: past it, the plays of sizes further than one from
    /// this one are dropped first, and if that is not enough this one is not kept.
    pub(super) fn keep<const W: usize>(
        &mut self,
        key: StagePlayKey,
        contexts: [u64; W],
        states: &[State; W],
    ) {
        let b = key.1;
        let len = W * (1 + NCAT);
        if self.values + len > STAGE_PLAYS_MAX_VALUES {
            // A batch's micro-batches are of two sizes next to each other: the plays of sizes
            // further away are dropped, once per move of the batch.
            if self.sizes.0.abs_diff(b) > 1 || self.sizes.1.abs_diff(b) > 1 {
                self.map.retain(|k, _| k.1.abs_diff(b) <= 1);
                self.values = self.map.values().map(|p| p.values.len()).sum();
                self.sizes = self
                    .map
                    .keys()
                    .fold((b, b), |(lo, hi), k| (lo.min(k.1), hi.max(k.1)));
            }
            // Still full (more contexts per batch than it holds): the plays kept stay, the
            // others are played each time.
            if self.values + len > STAGE_PLAYS_MAX_VALUES {
                return;
            }
        }
        self.sizes = if self.map.is_empty() {
            (b, b)
        } else {
            (self.sizes.0.min(b), self.sizes.1.max(b))
        };
        let mut values = Vec::with_capacity(len);
        values.extend(states.iter().map(|s| s.window_us()));
        for s in states {
            values.extend_from_slice(&s.busy);
        }
        self.values += len;
        let old = self.map.insert(
            key,
            StagePlay {
                contexts: contexts.into(),
                values: values.into(),
            },
        );
        if let Some(o) = old {
            self.values -= o.values.len();
        }
    }
}

/// Beyond this many values (~8 MB: the plays of several thousand contexts per batch at PP18)
/// the stage plays of micro-batch sizes the batch at hand does not play are dropped (a sweep
/// moves along its batch axis, and the sizes it has left behind do not come back); if that is
/// not enough, no more are kept until it is, so that a grid of more contexts neither grows the
/// memory nor pays for plays it cannot keep long enough to use.
pub(super) const STAGE_PLAYS_MAX_VALUES: usize = 1 << 20;

/// The layouts priced per regime: the token-dependent ops, the context-dependent ones, the
/// collectives.
pub(super) const LAYOUTS: usize = 3;

/// Where `Memo::scratch` keeps the workload of (pass slot, high regime, layout).
pub(super) fn scratch_index(slot: usize, high: bool, layout: usize) -> usize {
    (slot * 2 + high as usize) * LAYOUTS + layout
}

/// See [`Memo::durations`].
pub(super) type DurationsFrom = (usize, bool, u32, u32, u32, u64, bool, usize);

/// (pass slot, batch, queries, padded rows, collectives id, graphs).
pub(super) type LatencyKey = (usize, u32, u32, u32, u64, bool);

/// Beyond this many stored prices (~64 MB) a thread's memo starts over.
pub(super) const MEMO_MAX_VALUES: usize = 8 << 20;
/// Contexts priced and kept per (pass, batch, queries) entry (sweep helper: bounds the memo of
/// a sweep over many contexts; see `context_slot`).
pub(super) const CONTEXTS_PER_ENTRY: usize = 16;

thread_local! {
    pub(super) static MEMO: RefCell<Option<Box<Memo>>> = const { RefCell::new(None) };
}
