//! How many threads decode, as the machine changes. A start takes the count
//! measured fastest on the quiet machine (or remembered from the last start,
//! see `thread_memo`); from then on the count follows the cores other
//! processes leave free (`machine_load`), read between decode chunks and
//! while the engine waits, so a build started or stopped beside the editor
//! changes it within a second or two. With every core taken by another
//! process, each decode step of a multi-threaded context waits for the
//! thread that does not get its core: fewer threads are then faster
//! (measured in BENCHMARKS.md, "Engine speed"). Where the platform has no
//! load counters, the counts are measured against each other again once
//! the speed has moved a lot and no job has come for a while.
//!
//! llama-cpp-2 does not expose llama.cpp's `llama_set_n_threads`, so a
//! switch makes a new context and copies the cache's state into it
//! (`KvCache::move_to`): a few tens of milliseconds, next to decoding at the
//! wrong count for as long as the build runs.

use std::time::{Duration, Instant};

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;

use super::load::{Probe, context_params, probe};
use super::machine_load::{Busy, MachineLoad};
use super::thread_memo::ThreadMemo;
use super::{Costs, Engine};
use crate::{EngineOptions, EngineStatus};

/// The thread count in use, the counts measured on a quiet machine (what a
/// switch expects of its new count until its own decodes say otherwise), and
/// how the count follows the load.
pub(super) struct Tuning {
    pub(super) threads: usize,
    /// The counts measured against each other on the quiet machine.
    candidates: Vec<usize>,
    /// What each measured count cost on the quiet machine, fastest first.
    quiet: Vec<Probe>,
    /// Measure the counts again once no job has come for a while.
    pub(super) retune: bool,
    memo: Option<ThreadMemo>,
    load: MachineLoad,
    follow: Follow,
    /// What the last reading of the machine said.
    last_busy: Option<Busy>,
}

impl Tuning {
    /// The most threads the engine may run with; 1 where they are fixed.
    fn most(&self) -> usize {
        self.candidates.iter().copied().max().unwrap_or(1)
    }

    /// Whether the count changes with the load as it is read.
    pub(super) fn follows_load(&self) -> bool {
        self.most() > 1 && self.load.available()
    }

    /// The prompt speed moved a lot: without load counters to follow, the
    /// counts are measured again once the engine is quiet.
    pub(super) fn speed_moved(&mut self) {
        self.retune |= self.most() > 1 && !self.load.available();
    }

    /// What `threads` threads are expected to cost: measured on the quiet
    /// machine, or, for a count not measured, the nearest measured count's
    /// costs scaled to it.
    fn expected(&self, threads: usize) -> Option<Costs> {
        let nearest = self
            .quiet
            .iter()
            .min_by_key(|probe| probe.threads.abs_diff(threads))?;
        let scale = nearest.threads as f64 / threads as f64;
        let speed = nearest.prompt_tokens_per_s / scale;
        Some(Costs::measured(&Probe {
            threads,
            prompt_tokens_per_s: speed,
            token_seconds: nearest.token_seconds * scale,
        }))
    }

    /// Whether the machine looked quiet at the last reading (or cannot be
    /// read): measuring counts against each other under load would remember
    /// the load.
    fn machine_quiet(&self) -> bool {
        self.last_busy.is_none_or(|busy| busy.others < QUIET_OTHERS)
    }
}

/// Other processes' load under which the machine counts as quiet.
const QUIET_OTHERS: f64 = 0.3;

/// Going down: a count fits while at most half a core of its threads would
/// wait for a core. Going up asks for a margin more, so a load hovering at
/// the border does not switch back and forth.
const FITS_SLACK: f64 = 0.5;
const GROWS_SLACK: f64 = 0.3;

/// The thread count for `free` cores (what other processes leave), from
/// `current`, at most `most`: fewer where the current count's threads would
/// wait for cores, more where a larger count clearly fits.
pub(super) fn for_free_cores(current: usize, most: usize, free: f64) -> usize {
    let fits = |n: usize| free >= n as f64 - FITS_SLACK;
    let grows = |n: usize| free >= n as f64 - GROWS_SLACK;
    let current = current.clamp(1, most.max(1));
    if !fits(current) {
        return (1..current).rev().find(|&n| fits(n)).unwrap_or(1);
    }
    (current + 1..=most)
        .take_while(|&n| grows(n))
        .last()
        .unwrap_or(current)
}

/// A change of count is made once two readings in a row ask for it: one
/// reading can be a moment's burst (the editor itself, a compiler starting).
#[derive(Default)]
pub(super) struct Follow {
    asked: Option<usize>,
}

impl Follow {
    /// The count to switch to now, if any.
    pub(super) fn next(&mut self, current: usize, most: usize, free: f64) -> Option<usize> {
        let wanted = for_free_cores(current, most, free);
        if wanted == current {
            self.asked = None;
            return None;
        }
        match self.asked.replace(wanted) {
            Some(asked) if asked == wanted => {
                self.asked = None;
                Some(wanted)
            }
            _ => None,
        }
    }
}

/// `probes`, the one that serves a completion's work soonest first.
fn fastest_first(mut probes: Vec<Probe>) -> Vec<Probe> {
    probes.sort_by(|a, b| a.request_seconds().total_cmp(&b.request_seconds()));
    probes
}

/// Probes each of `candidates`, fastest first; `None` when `interrupted`
/// stopped a probe.
fn measure(
    backend: &LlamaBackend,
    model: &LlamaModel,
    candidates: &[usize],
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Option<Vec<Probe>>, String> {
    let mut probes = Vec::new();
    for &threads in candidates {
        match probe(backend, model, threads, interrupted)? {
            Some(probe) => probes.push(probe),
            None => return Ok(None),
        }
    }
    let probes = fastest_first(probes);
    if let Some(best) = probes.first() {
        tracing::info!(
            ?probes,
            threads = best.threads,
            "threads chosen from measurement"
        );
    }
    Ok(Some(probes))
}

/// The thread count to start with: the one remembered from the last start
/// (to be measured again once the engine and the machine are quiet), or the
/// fastest measured now, then remembered.
pub(super) fn starting_choice(
    backend: &LlamaBackend,
    model: &LlamaModel,
    options: &EngineOptions,
) -> Result<(Probe, Tuning), String> {
    let candidates = options.thread_candidates();
    let memo = options
        .thread_memo
        .as_deref()
        .map(|file| ThreadMemo::new(file, &options.model_path, &candidates));
    let recalled = memo.as_ref().map(ThreadMemo::recall).filter(|probes| {
        probes
            .first()
            .is_some_and(|p| candidates.contains(&p.threads))
    });
    // Read across the probes: what they measured beside another process's
    // work is neither remembered nor kept once the machine is quiet.
    let mut load = MachineLoad::new();
    let (quiet, recalled) = match recalled {
        Some(probes) => {
            tracing::info!(
                threads = probes[0].threads,
                "threads as remembered; measured again when quiet"
            );
            (probes, true)
        }
        None => {
            let probes = measure(backend, model, &candidates, &mut || false)?
                .filter(|probes| !probes.is_empty())
                .ok_or_else(|| "no thread count to run with".to_owned())?;
            (probes, false)
        }
    };
    let busy = load.sample();
    // A fixed count has no choice to get wrong.
    let loaded = candidates.len() > 1 && busy.is_some_and(|busy| busy.others >= QUIET_OTHERS);
    if let Some(memo) = memo.as_ref().filter(|_| !recalled && !loaded) {
        memo.remember(&quiet);
    }
    let best = quiet[0];
    let tuning = Tuning {
        threads: best.threads,
        candidates,
        quiet,
        retune: recalled || loaded,
        memo,
        load,
        follow: Follow::default(),
        last_busy: busy,
    };
    Ok((best, tuning))
}

impl Engine<'_> {
    /// Reads the machine's load where a reading is due, and moves to the
    /// thread count the free cores call for. Not while a moved suffix is
    /// parked: the copy into a new context takes the main sequence and a
    /// lent tail only.
    pub(super) fn follow_load(&mut self) {
        if !self.tuning.follows_load() || !self.tuning.load.due() || self.cache.parked() {
            return;
        }
        let Some(busy) = self.tuning.load.sample() else {
            return;
        };
        self.tuning.last_busy = Some(busy);
        let (current, most) = (self.tuning.threads, self.tuning.most());
        if let Some(threads) = self.tuning.follow.next(current, most, busy.free_cores()) {
            tracing::info!(
                from = current,
                threads,
                others_busy = format!("{:.2}", busy.others),
                "the machine's load changed; threads follow"
            );
            self.switch_threads(threads);
        }
    }

    /// Measures the thread counts again after a quiet spell, where asked
    /// and the machine is quiet; a job arriving stops it (tried again after
    /// the next quiet spell). Moves the cache to the fastest.
    pub(super) fn retune_threads(&mut self) {
        if !self.tuning.machine_quiet() {
            return;
        }
        let (backend, model) = (self.backend, self.model);
        let candidates = self.tuning.candidates.clone();
        let jobs = &mut self.jobs;
        let probes = match measure(backend, model, &candidates, &mut || jobs.arrived()) {
            Ok(Some(probes)) if !probes.is_empty() => probes,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!("probing threads failed: {e}");
                self.tuning.retune = false;
                return;
            }
        };
        self.tuning.retune = false;
        if let Some(memo) = &self.tuning.memo {
            memo.remember(&probes);
        }
        let best = probes[0].threads;
        self.tuning.quiet = probes;
        match best == self.tuning.threads {
            true => self.expect_costs_of(best),
            false => self.switch_threads(best),
        }
    }

    /// A context with `threads` threads, holding what the cache held; the
    /// costs start from what that count cost on the quiet machine.
    fn switch_threads(&mut self, threads: usize) {
        let started = Instant::now();
        let params = context_params(self.context_tokens, threads);
        let ctx = match self.model.new_context(self.backend, params) {
            Ok(ctx) => ctx,
            Err(e) => {
                tracing::warn!(
                    "a context with {threads} threads failed: {e}; keeping {}",
                    self.tuning.threads
                );
                return;
            }
        };
        self.cache.move_to(ctx);
        self.tuning.threads = threads;
        self.info.threads = threads;
        self.expect_costs_of(threads);
        self.status
            .send_replace(EngineStatus::Ready(self.info.clone()));
        tracing::debug!(
            threads,
            tokens = self.cache.len(),
            switch_ms = started.elapsed().as_millis() as u64,
            "moved the cache to a new thread count"
        );
    }

    /// Takes what `threads` threads cost on the quiet machine as the costs
    /// now; the input budget follows.
    fn expect_costs_of(&mut self, threads: usize) {
        if let Some(costs) = self.tuning.expected(threads) {
            self.costs = costs;
            self.follow_speed();
        }
    }
}

/// How long without a job before the counts are measured again (where the
/// load cannot be read, or a remembered choice is checked).
pub(super) const RETUNE_AFTER_QUIET: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(threads: usize, prompt_tokens_per_s: f64, token_seconds: f64) -> Probe {
        Probe {
            threads,
            prompt_tokens_per_s,
            token_seconds,
        }
    }

    #[test]
    fn the_count_that_serves_a_completion_soonest_wins() {
        // Idle: two threads are faster at both.
        let idle = vec![probe(1, 100.0, 0.035), probe(2, 190.0, 0.022)];
        assert_eq!(fastest_first(idle)[0].threads, 2);
        // Another process on both cores: two threads prompt a little slower
        // and generate far slower (measured: 55 and 65 tokens/s, 9.5 and 22 tokens/s).
        let busy = vec![probe(2, 55.0, 0.105), probe(1, 65.0, 0.045)];
        assert_eq!(fastest_first(busy)[0].threads, 1);
    }

    #[test]
    fn the_count_follows_the_free_cores() {
        // (current, most, free cores) -> count
        let table = [
            // Two cores, a build starts on one: our two threads share the
            // cores with it, which then gets two thirds of one.
            ((2, 2, 2.0 - 0.67), 1),
            ((2, 2, 2.0 - 1.0), 1),
            // The build stops.
            ((1, 2, 2.0), 2),
            ((1, 2, 2.0 - 0.1), 2),
            // A light load: the count stays where it is, either way.
            ((2, 2, 2.0 - 0.4), 2),
            ((1, 2, 2.0 - 0.4), 1),
            // Every core taken.
            ((2, 2, 0.0), 1),
            ((1, 2, 0.0), 1),
            // Eight cores, a build on three: five threads.
            ((8, 8, 5.0), 5),
            ((5, 8, 8.0), 8),
            ((5, 8, 6.6), 6),
            ((5, 8, 5.6), 5),
            // Fixed at one.
            ((1, 1, 4.0), 1),
        ];
        for ((current, most, free), expected) in table {
            assert_eq!(
                for_free_cores(current, most, free),
                expected,
                "from {current} of {most} with {free} cores free"
            );
        }
    }

    #[test]
    fn a_change_waits_for_a_second_reading() {
        let mut follow = Follow::default();
        assert_eq!(follow.next(2, 2, 1.0), None, "one busy reading");
        assert_eq!(follow.next(2, 2, 2.0), None, "then quiet: nothing asked");
        assert_eq!(follow.next(2, 2, 1.0), None);
        assert_eq!(follow.next(2, 2, 1.0), Some(1), "two in a row");
        assert_eq!(follow.next(1, 2, 1.0), None, "already there");
    }

    fn tuning(quiet: Vec<Probe>) -> Tuning {
        Tuning {
            threads: 2,
            candidates: vec![2, 1],
            quiet,
            retune: false,
            memo: None,
            load: MachineLoad::new(),
            follow: Follow::default(),
            last_busy: None,
        }
    }

    #[test]
    fn a_switch_expects_what_the_count_cost_when_quiet() {
        let tuning = tuning(vec![probe(2, 256.0, 0.02), probe(1, 128.0, 0.03)]);
        let one = tuning.expected(1).unwrap();
        assert_eq!(one.chunk, Duration::from_millis(250));
        assert_eq!(one.token, Duration::from_millis(30));
        // A count never measured: the nearest one's, scaled.
        let four = tuning.expected(4).unwrap();
        assert_eq!(
            four.chunk,
            Duration::from_millis(62) + Duration::from_micros(500)
        );
        assert_eq!(four.token, Duration::from_millis(10));
    }
}
