//! Shared server state and the continuous-batching step loop of [`LatencyMode::Model`].
//!
//! [`LatencyMode::Model`]: crate::LatencyMode::Model

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::cache::{Alloc, BlockManager};
use crate::config::SimConfig;
use crate::faults::FaultState;
use crate::hold::Hold;
use crate::metrics::{Counters, Gauges};
use crate::reqlog::RequestLog;
use crate::store::{RESPONSE_STORE_CAP, ResponseStore};
use crate::tokens::TokenCounter;

/// When the loop falls behind its schedule by more than this (a stalled process), it restarts
/// the schedule from now instead of catching up with back-to-back steps.
const MAX_LAG: Duration = Duration::from_millis(50);

/// State shared by the accept loop, the connection tasks and the engine.
pub(crate) struct Shared {
    pub(crate) config: SimConfig,
    /// Server start (for `recv_ms`).
    pub(crate) start: Instant,
    pub(crate) counter: TokenCounter,
    pub(crate) log: Option<RequestLog>,
    pub(crate) worker_id: Option<HeaderValue>,
    /// The constant `/v1/models` body.
    pub(crate) models_json: Bytes,
    pub(crate) state: Mutex<State>,
    /// Wakes the engine when work arrives.
    pub(crate) work: Notify,
    /// Signalled when the number of in-flight requests drops to 0.
    pub(crate) idle: Notify,
    /// Request counter (RNG stream and completion ids).
    pub(crate) next_request: AtomicU64,
    /// Becomes `true` (or its sender is dropped) when the server shuts down.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// The hold switch (`/sim/hold`, `/sim/release`, `/sim/held`).
    pub(crate) hold: Arc<Hold>,
    /// Fault injection, when some fault has a rate.
    pub(crate) faults: Option<FaultState>,
}

impl Shared {
    /// Locks the state (a poisoned lock is still usable: the state stays consistent per step).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a token source hands to the request's response writer.
pub(crate) enum EngineEvent {
    /// The request was admitted and prefilled: first token, with its prefix-cache hit.
    First {
        /// Prompt tokens served from the prefix cache.
        cached_tokens: u32,
    },
    /// One more token.
    Token,
    /// Hold mode was on when the request's turn for admission came: the engine hands the job
    /// back, untouched, for the request to hold and queue again once released.
    Held(Box<Job>),
}

/// A request waiting for admission.
pub(crate) struct Job {
    pub(crate) keys: Vec<u64>,
    pub(crate) prompt_tokens: u32,
    pub(crate) need_blocks: u64,
    pub(crate) out_len: u32,
    pub(crate) events: mpsc::UnboundedSender<EngineEvent>,
}

struct RunningJob {
    alloc: Alloc,
    cached_tokens: u32,
    /// Uncached prompt tokens not yet prefilled (chunked prefill spreads them over steps).
    prefill_left: u64,
    /// Emits a token at the end of the current step.
    emits: bool,
    emitted: u32,
    out_len: u32,
    events: mpsc::UnboundedSender<EngineEvent>,
}

/// Mutable state behind [`Shared::state`].
pub(crate) struct State {
    pub(crate) blocks: BlockManager,
    pub(crate) waiting: VecDeque<Job>,
    running: Vec<RunningJob>,
    /// Running requests of the `Fixed` and `Instant` modes.
    pub(crate) direct_running: u64,
    /// Generation requests being handled (until their log line is written).
    pub(crate) inflight: u64,
    pub(crate) counters: Counters,
    /// Responses API answers remembered for `previous_response_id`.
    pub(crate) responses: ResponseStore,
    block_size: u32,
    /// The GPU's power and energy (`SimConfig::gpu_metrics`).
    pub(crate) gpu: Option<crate::gpu::GpuMeter>,
    max_num_seqs: usize,
}

impl State {
    pub(crate) fn new(config: &SimConfig) -> Self {
        Self {
            blocks: BlockManager::new(config.kv_total_blocks()),
            waiting: VecDeque::new(),
            running: Vec::new(),
            direct_running: 0,
            inflight: 0,
            counters: Counters::new(config.flavor),
            responses: ResponseStore::new(RESPONSE_STORE_CAP),
            block_size: config.block_size,
            gpu: config
                .gpu_metrics
                .then(|| crate::gpu::GpuMeter::new(std::time::Instant::now())),
            max_num_seqs: config.max_num_seqs,
        }
    }

    /// Running sequences in either mode.
    pub(crate) fn running(&self) -> u64 {
        self.running.len() as u64 + self.direct_running
    }

    /// Brings the GPU meter up to now (at the power the load draws now).
    pub(crate) fn advance_gpu(&mut self, now: std::time::Instant) {
        let power = crate::gpu::GpuMeter::power(self.running(), self.max_num_seqs);
        if let Some(g) = self.gpu.as_mut() {
            g.advance(now, power);
        }
    }

    /// Gauges for `/metrics` and [`SimStats`](crate::SimStats).
    pub(crate) fn gauges(&self) -> Gauges {
        Gauges {
            running: self.running(),
            waiting: self.waiting.len() as u64,
            used_blocks: self.blocks.used(),
            free_blocks: self.blocks.free(),
            evictable_blocks: self.blocks.evictable(),
            total_blocks: self.blocks.total(),
            evicted_blocks_total: self.blocks.evicted_total(),
            block_size: self.block_size,
        }
    }

    /// Takes blocks for a request and counts its prompt; returns the allocation and its cached
    /// tokens, or `None` when it does not fit (never when `force`).
    pub(crate) fn admit(
        &mut self,
        keys: &[u64],
        prompt_tokens: u32,
        need_blocks: u64,
        force: bool,
    ) -> Option<(Alloc, u32)> {
        let alloc = self.blocks.admit(keys, need_blocks, force)?;
        let cached = alloc
            .hit_blocks
            .saturating_mul(self.block_size)
            .min(prompt_tokens);
        let c = &mut self.counters;
        c.prompt_tokens_total += u64::from(prompt_tokens);
        c.prefix_queries_tokens += u64::from(prompt_tokens);
        c.cached_tokens_total += u64::from(cached);
        Some((alloc, cached))
    }

    /// Start of a step: drops requests whose client is gone, then (with `hold` on) hands every
    /// waiting request back to be held or (otherwise) admits waiting requests in FIFO order
    /// while a batch slot and KV blocks are available, then hands out the step's prefill budget
    /// (`max_num_batched_tokens`, chunked prefill) in admission order. Returns the number of
    /// sequences that decode in this step and the prompt tokens prefilled in it.
    fn start_step(&mut self, max_num_seqs: usize, budget: u64, hold: bool) -> (usize, u64) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].events.is_closed() {
                let r = self.running.swap_remove(i);
                self.blocks.release(r.alloc);
            } else {
                i += 1;
            }
        }
        if hold {
            for job in self.waiting.drain(..) {
                let events = job.events.clone();
                // A job whose client is gone is simply dropped.
                let _ = events.send(EngineEvent::Held(Box::new(job)));
            }
        }
        while self.running.len() < max_num_seqs.max(1) {
            let Some(job) = self.waiting.pop_front() else {
                break;
            };
            if job.events.is_closed() {
                continue;
            }
            // Admit an oversized request when nothing else runs rather than block forever.
            let force = self.running.is_empty();
            let Some((alloc, cached)) =
                self.admit(&job.keys, job.prompt_tokens, job.need_blocks, force)
            else {
                // FIFO: the head waits for room, nothing behind it may skip ahead.
                self.waiting.push_front(job);
                break;
            };
            self.running.push(RunningJob {
                alloc,
                cached_tokens: cached,
                prefill_left: u64::from(job.prompt_tokens - cached),
                emits: false,
                emitted: 0,
                out_len: job.out_len,
                events: job.events,
            });
        }
        let mut decoding = 0;
        let mut left = budget.max(1);
        let mut prefilled = 0u64;
        for r in &mut self.running {
            if r.emitted > 0 {
                decoding += 1;
                r.emits = true;
            } else {
                let take = r.prefill_left.min(left);
                r.prefill_left -= take;
                left -= take;
                prefilled += take;
                // Prefill finishes in this step: it produces the first token.
                r.emits = r.prefill_left == 0;
            }
        }
        (decoding, prefilled)
    }

    /// End of a step: every running request emits one token (the first for those admitted in
    /// this step); finished or abandoned requests release their blocks.
    fn end_step(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            let r = &mut self.running[i];
            if !r.emits {
                i += 1;
                continue;
            }
            let ev = if r.emitted == 0 {
                EngineEvent::First {
                    cached_tokens: r.cached_tokens,
                }
            } else {
                EngineEvent::Token
            };
            let sent = r.events.send(ev).is_ok();
            r.emitted += 1;
            if !sent || r.emitted >= r.out_len {
                let r = self.running.swap_remove(i);
                self.blocks.release(r.alloc);
            } else {
                i += 1;
            }
        }
    }

    /// Drops every queued and running request (shutdown).
    fn clear(&mut self) {
        self.waiting.clear();
        for r in std::mem::take(&mut self.running) {
            self.blocks.release(r.alloc);
        }
    }
}

/// Resolves when the server shuts down (or the server handle is gone).
pub(crate) async fn wait_shutdown(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// The step loop of [`LatencyMode::Model`](crate::LatencyMode::Model).
pub(crate) async fn run_engine(shared: Arc<Shared>) {
    let cfg = &shared.config;
    let mut shutdown = shared.shutdown.clone();
    let mut next_start: Option<Instant> = None;
    'steps: loop {
        // Wait for work without spinning.
        loop {
            if *shutdown.borrow() {
                break 'steps;
            }
            let has_work = {
                let st = shared.lock();
                !st.waiting.is_empty() || !st.running.is_empty()
            };
            if has_work {
                break;
            }
            next_start = None;
            tokio::select! {
                () = shared.work.notified() => {}
                () = wait_shutdown(&mut shutdown) => break 'steps,
            }
        }
        let now = Instant::now();
        let start = match next_start {
            Some(t) if now.saturating_duration_since(t) <= MAX_LAG => t,
            _ => now,
        };
        let hold = shared.hold.is_on();
        let (decoding, uncached) = shared.lock().start_step(
            cfg.max_num_seqs,
            u64::from(cfg.max_num_batched_tokens),
            hold,
        );
        #[allow(clippy::cast_precision_loss)]
        let step_ms = cfg.decode_step_base_ms
            + cfg.decode_step_ms_per_seq * decoding as f64
            + cfg.prefill_ms_per_token * uncached as f64;
        let step = cfg.scaled(step_ms);
        let deadline = start + step;
        if step.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = wait_shutdown(&mut shutdown) => break 'steps,
            }
        }
        shared.lock().end_step();
        next_start = Some(deadline);
    }
    shared.lock().clear();
}
