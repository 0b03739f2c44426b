//! The closed loop of `vllm bench serve --max-concurrency C` against vLLM V1's scheduler,
//! played step by step (docs/sources.md §11.1, §11.2).
//!
//! - **Clients.** C requests are sent at time 0; each time one completes, the next prompt of
//!   the run is sent at that instant (the benchmark's semaphore), until all are sent.
//! - **A step.** The token budget is `max_num_batched_tokens`. Running requests are scheduled
//!   first, in the order they were admitted: a decoding request takes one token, one still in
//!   prefill takes what is left of its prompt, up to the budget left. Then waiting requests are
//!   admitted in arrival order while budget, `max_num_seqs` and KV blocks allow, each with a
//!   chunk of its prompt up to the budget left (so a long prompt spans several steps).
//! - **KV blocks.** Each scheduled request holds ⌈KV tokens / block size⌉ blocks of the cache
//!   `sim::memory` accounts. A running request that cannot get its next block preempts the
//!   most recently admitted running request (vLLM's recompute preemption: its blocks freed, it
//!   waits at the front of the queue and later recomputes its prompt and the tokens it had
//!   generated); a step that preempted admits no waiting request.
//! - **Tokens.** A request's first token comes at the end of the step that completes its
//!   prefill; each later step it is scheduled in gives it one more. It completes with its
//!   output length (the benchmark's random dataset ignores EOS).

use super::price::StepPrice;
use crate::error::{Error, Result};
use crate::workload::mixed::{GraphMode, MixedStep, PrefillChunk};
use std::collections::VecDeque;

/// The scheduler's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Limits {
    pub(super) max_num_batched_tokens: u64,
    pub(super) max_num_seqs: u32,
    pub(super) block_size: u64,
    pub(super) num_blocks: u64,
}

/// One request's life, µs from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Finished {
    pub(super) arrival_us: f64,
    pub(super) first_token_us: f64,
    pub(super) done_us: f64,
    pub(super) output: u64,
    /// Steps the run had played when the request was sent, when its first token came out and
    /// when it finished: the times above are the run's clock after these steps.
    pub(super) steps: RequestSteps,
}

/// A request's life in steps played (module doc of [`Played::step_shapes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestSteps {
    pub sent: u64,
    pub first_token: u64,
    pub done: u64,
    pub output: u64,
}

/// What the loop played.
#[derive(Debug, Clone, Default)]
pub(super) struct Played {
    pub(super) requests: Vec<Finished>,
    /// Every gap between two tokens of one request, µs.
    pub(super) itl_us: Vec<f64>,
    pub(super) steps: u64,
    /// Steps per graph mode: full, piecewise, none.
    pub(super) mode_steps: [u64; 3],
    pub(super) prefill_tokens: u64,
    pub(super) preemptions: u64,
    pub(super) duration_us: f64,
    /// Each step's shape (its index among the priced shapes). The schedule depends on tokens,
    /// never on time (every client sends its next request when the last one finishes), so the
    /// same steps with other prices give the run those prices would: what an interval redraws.
    pub(super) step_shapes: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
struct Request {
    prompt: u64,
    output: u64,
    arrival_us: f64,
    sent_step: u64,
    first_token_step: u64,
    /// Tokens whose KV is in the cache.
    computed: u64,
    /// Tokens to compute before the next token comes out of a prefill (the prompt; after a
    /// preemption, the prompt and the tokens generated so far).
    target: u64,
    generated: u64,
    first_token_us: f64,
    last_token_us: f64,
    blocks: u64,
}

/// The scheduler's state between steps.
struct Loop<'a> {
    lengths: &'a [(u64, u64)],
    limits: Limits,
    reqs: Vec<Request>,
    waiting: VecDeque<usize>,
    running: Vec<usize>,
    free_blocks: u64,
    out: Played,
}

impl Loop<'_> {
    fn issue(&mut self, at_us: f64) {
        let (prompt, output) = self.lengths[self.reqs.len()];
        self.waiting.push_back(self.reqs.len());
        self.reqs.push(Request {
            prompt,
            output,
            arrival_us: at_us,
            sent_step: self.out.steps,
            first_token_step: 0,
            computed: 0,
            target: prompt,
            generated: 0,
            first_token_us: f64::NAN,
            last_token_us: f64::NAN,
            blocks: 0,
        });
    }

    fn blocks_for(&self, r: usize, tokens: u64) -> u64 {
        let q = &self.reqs[r];
        (q.computed + tokens)
            .div_ceil(self.limits.block_size)
            .saturating_sub(q.blocks)
    }

    /// Preempts the last running request: its blocks freed, its work to be recomputed.
    fn preempt_last(&mut self) -> Option<usize> {
        let v = self.running.pop()?;
        let q = &mut self.reqs[v];
        self.free_blocks += q.blocks;
        q.blocks = 0;
        q.computed = 0;
        q.target = q.prompt + q.generated.saturating_sub(1);
        self.waiting.push_front(v);
        self.out.preemptions += 1;
        Some(v)
    }

    /// The tokens each request runs this step (module doc).
    fn schedule(&mut self) -> Vec<(usize, u64)> {
        let mut budget = self.limits.max_num_batched_tokens;
        let mut sched = Vec::new();
        let mut preempted = false;
        let mut i = 0;
        'running: while i < self.running.len() && budget > 0 {
            let r = self.running[i];
            let q = &self.reqs[r];
            let tokens = if q.computed < q.target {
                (q.target - q.computed).min(budget)
            } else {
                1
            };
            let need = self.blocks_for(r, tokens);
            while need > self.free_blocks {
                preempted = true;
                if self.preempt_last() == Some(r) {
                    break 'running;
                }
            }
            self.free_blocks -= need;
            self.reqs[r].blocks += need;
            sched.push((r, tokens));
            budget -= tokens;
            i += 1;
        }
        while !preempted && budget > 0 && self.running.len() < self.limits.max_num_seqs as usize {
            let Some(&r) = self.waiting.front() else {
                break;
            };
            let q = &self.reqs[r];
            let tokens = (q.target - q.computed).min(budget);
            let need = self.blocks_for(r, tokens);
            if need > self.free_blocks {
                break;
            }
            self.waiting.pop_front();
            self.free_blocks -= need;
            self.reqs[r].blocks += need;
            self.running.push(r);
            sched.push((r, tokens));
            budget -= tokens;
        }
        sched
    }

    /// The step's shape: decode sequences at their mean KV length, prefill chunks.
    fn shape(&self, sched: &[(usize, u64)]) -> MixedStep {
        let (mut decode, mut kv, mut chunks) = (0u32, 0u64, Vec::new());
        for &(r, tokens) in sched {
            let q = &self.reqs[r];
            if q.computed < q.target {
                chunks.push(PrefillChunk {
                    tokens,
                    prefix: q.computed,
                });
            } else {
                decode += 1;
                kv += q.computed + 1;
            }
        }
        let context = if decode > 0 {
            (kv as f64 / decode as f64).round() as u64
        } else {
            0
        };
        MixedStep {
            decode,
            context,
            chunks,
        }
    }

    /// Applies a step that ended at `t`: tokens out, requests done, the next ones sent.
    fn finish_step(&mut self, sched: &[(usize, u64)], t: f64) {
        for &(r, tokens) in sched {
            let q = &mut self.reqs[r];
            let emits = if q.computed < q.target {
                q.computed += tokens;
                self.out.prefill_tokens += tokens;
                q.computed >= q.target
            } else {
                q.computed += 1;
                true
            };
            if !emits {
                continue;
            }
            q.generated += 1;
            if q.first_token_us.is_nan() {
                q.first_token_us = t;
                q.first_token_step = self.out.steps;
            } else {
                self.out.itl_us.push(t - q.last_token_us);
            }
            q.last_token_us = t;
            if q.generated >= q.output {
                let q = *q;
                self.free_blocks += q.blocks;
                self.reqs[r].blocks = 0;
                self.running.retain(|&x| x != r);
                self.out.requests.push(Finished {
                    arrival_us: q.arrival_us,
                    first_token_us: q.first_token_us,
                    done_us: t,
                    output: q.output,
                    steps: RequestSteps {
                        sent: q.sent_step,
                        first_token: q.first_token_step,
                        done: self.out.steps,
                        output: q.output,
                    },
                });
                if self.reqs.len() < self.lengths.len() {
                    self.issue(t);
                }
            }
        }
    }
}

/// Plays the run of `lengths` (prompt, output) with `concurrency` clients; `price` gives each
/// step's time.
pub(super) fn play(
    lengths: &[(u64, u64)],
    concurrency: u32,
    limits: Limits,
    price: &mut dyn FnMut(&MixedStep) -> Result<StepPrice>,
) -> Result<Played> {
    let mut l = Loop {
        lengths,
        limits,
        reqs: Vec::with_capacity(lengths.len()),
        waiting: VecDeque::new(),
        running: Vec::new(),
        free_blocks: limits.num_blocks,
        out: Played::default(),
    };
    for _ in 0..(concurrency as usize).min(lengths.len()) {
        l.issue(0.0);
    }
    // Every step computes at least one token; a preempted request recomputes at most its
    // prompt and output: a bound no schedule that makes progress exceeds.
    let work: u64 = lengths.iter().map(|(i, o)| (i + o) * 2).sum();
    let mut t = 0.0;
    while l.out.requests.len() < lengths.len() {
        let sched = l.schedule();
        if sched.is_empty() || l.out.steps > work {
            return Err(Error::Invariant(
                "serving run: a step scheduled no token (a request that cannot fit the KV cache alone is refused before the run)",
            ));
        }
        let step = l.shape(&sched);
        let p = price(&step)?;
        t += p.us;
        l.out.steps += 1;
        l.out.step_shapes.push(p.shape);
        l.out.mode_steps[match p.mode {
            GraphMode::Full => 0,
            GraphMode::Piecewise => 1,
            GraphMode::None => 2,
        }] += 1;
        l.finish_step(&sched, t);
    }
    l.out.duration_us = t;
    Ok(l.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(budget: u64, blocks: u64) -> Limits {
        Limits {
            max_num_batched_tokens: budget,
            max_num_seqs: 1024,
            block_size: 16,
            num_blocks: blocks,
        }
    }

    /// Every step costs 1 ms plus 1 µs per prefill token: the timings follow by hand.
    fn unit_price(step: &MixedStep) -> Result<StepPrice> {
        Ok(StepPrice {
            us: 1000.0 + step.prefill_tokens() as f64,
            mode: GraphMode::Full,
            shape: 0,
        })
    }

    #[test]
    fn one_client_by_hand() {
        // Prompt 100, output 3, budget 64: prefill steps of 64 and 36 tokens (the first token
        // at the end of the second), then two decode steps.
        let played = play(&[(100, 3)], 1, limits(64, 1000), &mut unit_price).unwrap();
        assert_eq!(played.steps, 4);
        let r = played.requests[0];
        assert_eq!(r.first_token_us, 1064.0 + 1036.0);
        assert_eq!(r.done_us, 2100.0 + 2000.0);
        assert_eq!(played.itl_us, vec![1000.0, 1000.0]);
        assert_eq!(played.prefill_tokens, 100);
    }

    #[test]
    fn decode_first_then_chunks_in_the_leftover_budget() {
        // Two clients, prompts 10 and outputs 2, four prompts in all; budget 8.
        let mut shapes = Vec::new();
        let mut record = |s: &MixedStep| {
            shapes.push(s.clone());
            unit_price(s)
        };
        let lengths = [(10, 2); 4];
        let played = play(&lengths, 2, limits(8, 1000), &mut record).unwrap();
        // Step 1: request 0 takes 8 of its 10. Step 2: request 0 its last 2 (first token),
        // request 1 the 6 left. Step 3: request 0 decodes (done), request 1 its last 4.
        assert_eq!(
            shapes[0].chunks,
            vec![PrefillChunk {
                tokens: 8,
                prefix: 0
            }]
        );
        assert_eq!(
            shapes[1].chunks,
            vec![
                PrefillChunk {
                    tokens: 2,
                    prefix: 8
                },
                PrefillChunk {
                    tokens: 6,
                    prefix: 0
                }
            ]
        );
        assert_eq!((shapes[2].decode, shapes[2].context), (1, 11));
        assert_eq!(
            shapes[2].chunks,
            vec![PrefillChunk {
                tokens: 4,
                prefix: 6
            }]
        );
        assert_eq!(played.requests.len(), 4);
        // Request 2 is sent when request 0 completes, at the end of step 3.
        assert_eq!(played.requests[0].done_us, 1008.0 + 1008.0 + 1004.0);
    }

    #[test]
    fn preemption_recomputes() {
        // Two requests of 16 prompt tokens and 20 outputs, 4 blocks of 16: both fit until each
        // needs a third block; the later one is preempted and recomputes.
        let played = play(&[(16, 20), (16, 20)], 2, limits(64, 4), &mut unit_price).unwrap();
        assert!(played.preemptions >= 1, "{:?}", played.preemptions);
        assert_eq!(played.requests.len(), 2);
        assert!(played.requests.iter().all(|r| r.output == 20));
    }
}
