//! How many threads decode: the count measured fastest, chosen at load (or
//! remembered from the last start, see `thread_memo`, and measured again once
//! the engine is quiet) and
//! again after the prompt speed moved a lot (a build started beside the
//! editor, or ended), once no job has come for a while. With every core taken by another process,
//! each decode step of a multi-threaded context waits for the thread that
//! does not get its core: one thread is then faster (measured in
//! BENCHMARKS.md, "Engine speed").
//!
//! llama-cpp-2 cannot change a context's threads, so a switch makes a new
//! context and copies the cache's state into it: cheap next to decoding it
//! again, and done only at those moments.

use std::time::Duration;

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;

use super::load::{Probe, context_params, probe};
use super::thread_memo::ThreadMemo;
use super::{CHUNK, Engine, Tuning};
use crate::local::EngineOptions;

/// The fastest of `probes` for a completion's work.
pub(super) fn fastest(probes: &[Probe]) -> Option<Probe> {
    probes
        .iter()
        .copied()
        .min_by(|a, b| a.request_seconds().total_cmp(&b.request_seconds()))
}

/// Probes each of `candidates` and returns the fastest; `None` when
/// `interrupted` stopped a probe.
pub(super) fn choose(
    backend: &LlamaBackend,
    model: &LlamaModel,
    candidates: &[usize],
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Option<Probe>, String> {
    let mut probes = Vec::new();
    for &threads in candidates {
        match probe(backend, model, threads, interrupted)? {
            Some(probe) => probes.push(probe),
            None => return Ok(None),
        }
    }
    let best = fastest(&probes);
    if let Some(best) = best {
        tracing::info!(
            ?probes,
            threads = best.threads,
            "threads chosen from measurement"
        );
    }
    Ok(best)
}

/// The thread count to start with: the one remembered from the last start
/// (`true`: to be measured again once the engine is quiet), or the fastest
/// measured now, then remembered.
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
    let recalled = memo
        .as_ref()
        .and_then(ThreadMemo::recall)
        .filter(|probe| candidates.contains(&probe.threads));
    if let Some(best) = recalled {
        tracing::info!(
            threads = best.threads,
            "threads as remembered; measured again when quiet"
        );
        let tuning = Tuning {
            threads: best.threads,
            candidates,
            retune: true,
            memo,
        };
        return Ok((best, tuning));
    }
    let best = choose(backend, model, &candidates, &mut || false)?
        .ok_or_else(|| "no thread count to run with".to_owned())?;
    if let Some(memo) = &memo {
        memo.remember(&best);
    }
    let tuning = Tuning {
        threads: best.threads,
        candidates,
        retune: false,
        memo,
    };
    Ok((best, tuning))
}

impl Engine<'_> {
    /// Probes each candidate thread count, unless a job arrives meanwhile
    /// (then it is tried again after the next quiet spell), and moves the cache to
    /// the fastest.
    pub(super) fn retune_threads(&mut self) {
        let (backend, model) = (self.backend, self.model);
        let candidates = self.tuning.candidates.clone();
        let jobs = &mut self.jobs;
        let best = match choose(backend, model, &candidates, &mut || jobs.arrived()) {
            Ok(Some(best)) => best,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!("probing threads failed: {e}");
                self.tuning.retune = false;
                return;
            }
        };
        self.tuning.retune = false;
        if let Some(memo) = &self.tuning.memo {
            memo.remember(&best);
        }
        self.costs.chunk = Duration::from_secs_f64(CHUNK as f64 / best.prompt_tokens_per_s);
        self.costs.token = Duration::from_secs_f64(best.token_seconds);
        if best.threads != self.tuning.threads {
            self.switch_threads(best.threads);
        }
    }

    /// A context with `threads` threads, holding what the cache held.
    fn switch_threads(&mut self, threads: usize) {
        let params = context_params(self.context_tokens, threads);
        match self.model.new_context(self.backend, params) {
            Ok(ctx) => {
                self.cache.move_to(ctx);
                self.tuning.threads = threads;
            }
            Err(e) => tracing::warn!(
                "a context with {threads} threads failed: {e}; keeping {}",
                self.tuning.threads
            ),
        }
    }
}

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
        let idle = [probe(2, 190.0, 0.022), probe(1, 100.0, 0.035)];
        assert_eq!(fastest(&idle).unwrap().threads, 2);
        // Another process on both cores: two threads prompt a little slower
        // and generate far slower (measured: 55 and 65 tokens/s, 9.5 and 22 tokens/s).
        let busy = [probe(2, 55.0, 0.105), probe(1, 65.0, 0.045)];
        assert_eq!(fastest(&busy).unwrap().threads, 1);
        assert_eq!(fastest(&[]), None);
    }
}
