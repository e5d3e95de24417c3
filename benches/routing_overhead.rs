//! Routing overhead: time the router adds to a remote request, versus calling
//! the same loopback fake provider directly. Both paths stream the same answer
//! over real HTTP; the difference is prompt building, beacon checks and
//! recording, and status bookkeeping.
//!
//! Run: `cargo bench --bench routing_overhead` (`ROUTING_REQUESTS=N`, default 10000 per path).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use support::fake_provider::FakeProvider;
use switchyard_base::task::TaskKind;
use switchyard_config::{Config, TierChains};
use switchyard_context::chat::{self, PromptParts};
use switchyard_providers::ProviderKind;
use switchyard_providers::local::chat::EngineSlot;
use switchyard_providers::{ChatMessage, ChatRequest, Provider, Role, StreamEvent, Timeouts};
use switchyard_resilience::Resilience;
use switchyard_router::{Router, TaskRequest};
use tokio_util::sync::CancellationToken;

const SYSTEM: &str = "You are a senior engineer explaining code to a colleague.";

fn parts() -> PromptParts {
    PromptParts {
        language: "rust".into(),
        file_name: "store.rs".into(),
        before: support::SAMPLE_RUST[..1500].into(),
        selection: support::SAMPLE_RUST[1500..1900].into(),
        after: support::SAMPLE_RUST[1900..].into(),
        instruction: "Explain what the selected code does.".into(),
    }
}

async fn direct(provider: &dyn Provider, request: &ChatRequest, timeouts: Timeouts) -> Duration {
    let started = Instant::now();
    let mut events = provider
        .stream(request.clone(), timeouts)
        .await
        .expect("fake answers")
        .events;
    while let Some(event) = events.next().await {
        if let StreamEvent::End(_) = event.expect("clean stream") {
            break;
        }
    }
    started.elapsed()
}

async fn routed(router: &Router) -> Duration {
    let request = TaskRequest::new(TaskKind::Explain, SYSTEM, parts());
    let started = Instant::now();
    router
        .run(request, CancellationToken::new(), &|_| {})
        .await
        .expect("routed answer");
    started.elapsed()
}

/// Answers at once, in memory: timing the router over it leaves only the
/// router's own work (prompt building, beacons, status), without the network.
struct InMemory;

impl Provider for InMemory {
    fn name(&self) -> &str {
        "memory"
    }
    fn supports_prefill(&self) -> bool {
        false
    }
    fn stream(
        &self,
        _: ChatRequest,
        _: Timeouts,
    ) -> futures::future::BoxFuture<
        'static,
        Result<switchyard_providers::ResponseStream, switchyard_providers::ProviderError>,
    > {
        let finish = switchyard_providers::Finish {
            reason: switchyard_providers::FinishReason::EndTurn,
            usage: Default::default(),
        };
        let events = futures::stream::iter([
            Ok(StreamEvent::Delta("Hello from memory".into())),
            Ok(StreamEvent::End(finish)),
        ]);
        Box::pin(async move {
            Ok(switchyard_providers::ResponseStream {
                events: Box::pin(events),
                rate_limits: Default::default(),
            })
        })
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("ROUTING_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let fake = FakeProvider::start().await;
    let provider = switchyard_providers::build(
        "fake",
        ProviderKind::Anthropic,
        &fake.anthropic_url(),
        Some("sk-bench".to_owned().into()),
        vec![],
    );
    let config = Config {
        tiers: TierChains {
            large: vec![],
            medium: vec![
                switchyard_base::entry::ChainEntry::try_from("fake/bench-model".to_owned())
                    .unwrap(),
            ],
            small: vec![],
        },
        ..Config::default()
    };
    let providers = HashMap::from([("fake".to_owned(), provider.clone() as Arc<dyn Provider>)]);
    let router = Router::with_providers(
        &config,
        providers,
        HashMap::new(),
        EngineSlot::default(),
        switchyard_router::Lasting::new(Arc::new(Resilience::in_memory())),
    );

    // The direct call sends exactly what the router would.
    let profile = config.tasks.explain.clone();
    let user = chat::render(
        &parts(),
        profile.input_tokens - chat::estimate_tokens(SYSTEM),
    )
    .unwrap();
    let request = ChatRequest {
        model: "bench-model".into(),
        system: Some(SYSTEM.into()),
        messages: vec![ChatMessage {
            role: Role::User,
            content: user,
        }],
        max_tokens: profile.output_tokens as u32,
        temperature: Some(0.2),
    };
    let timeouts = Timeouts {
        connect: Duration::from_secs(10),
        first_byte: Duration::from_secs(10),
        first_token: Duration::from_secs(10),
        idle: Duration::from_secs(30),
    };

    for _ in 0..200 {
        direct(provider.as_ref(), &request, timeouts).await;
        routed(&router).await;
    }
    // Alternate in blocks so drift on the machine affects both paths alike.
    let (mut plain, mut through_router) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let block = 500.min(n);
    while plain.len() < n {
        for _ in 0..block {
            plain.push(direct(provider.as_ref(), &request, timeouts).await);
        }
        for _ in 0..block {
            through_router.push(routed(&router).await);
        }
    }
    plain.sort();
    through_router.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "requests per path: {n} (after 200 warm-up each), fake provider on 127.0.0.1, Anthropic SSE, 3 deltas"
    );
    println!("| path | p50 ms | p99 ms | min ms | max ms |");
    println!("|---|---|---|---|---|");
    for (name, samples) in [
        ("direct provider call", &plain),
        ("through the router", &through_router),
    ] {
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} |",
            ms(percentile(samples, 50.0)),
            ms(percentile(samples, 99.0)),
            ms(samples[0]),
            ms(samples[samples.len() - 1])
        );
    }
    let memory_config = Config {
        tiers: TierChains {
            large: vec![],
            medium: vec![
                switchyard_base::entry::ChainEntry::try_from("memory/bench-model".to_owned())
                    .unwrap(),
            ],
            small: vec![],
        },
        ..Config::default()
    };
    let memory = HashMap::from([("memory".to_owned(), Arc::new(InMemory) as Arc<dyn Provider>)]);
    let memory_router = Router::with_providers(
        &memory_config,
        memory,
        HashMap::new(),
        EngineSlot::default(),
        switchyard_router::Lasting::new(Arc::new(Resilience::in_memory())),
    );
    let mut own = Vec::with_capacity(n);
    for _ in 0..n {
        own.push(routed(&memory_router).await);
    }
    if std::env::var_os("ROUTING_TREND").is_some() {
        for (i, block) in own.chunks(1000).enumerate() {
            let mut block = block.to_vec();
            block.sort();
            eprintln!(
                "in-memory block {i}: p50 {:.3} ms",
                ms(percentile(&block, 50.0))
            );
        }
    }
    own.sort();
    println!(
        "| router over an in-memory provider (its own work) | {:.3} | {:.3} | {:.3} | {:.3} |",
        ms(percentile(&own, 50.0)),
        ms(percentile(&own, 99.0)),
        ms(own[0]),
        ms(own[own.len() - 1])
    );
    println!();
    println!(
        "added by the router: p50 {:.3} ms, p99 {:.3} ms",
        ms(percentile(&through_router, 50.0)) - ms(percentile(&plain, 50.0)),
        ms(percentile(&through_router, 99.0)) - ms(percentile(&plain, 99.0))
    );
}
