//! Property test: whatever the health, verdicts, breakers, quota and path
//! rule, every reader of the plan (the runbook's "now", the status after the
//! request, the canaries) agrees with the entry a request tries first.

use super::*;
use crate::plan::{Ask, Candidate, Skip};
use proptest::prelude::{prop_assert, prop_assert_eq};
use switchyard_resilience::breaker::Phase;
use switchyard_resilience::verdict::{Verdict, VerdictKind};

/// What one entry is like when a request arrives.
#[derive(Clone, Copy, Debug)]
struct EntryState {
    key_missing: bool,
    /// 0: no samples, 1: healthy samples, 2: slow samples, 3: degraded samples.
    beacon: u8,
    /// 0: closed, 1: open, 2: cooled down (half-open).
    breaker: u8,
    /// Paused by a rate limit for longer than the wait budget.
    paused: bool,
    /// A user request judged it degraded (shared; only a canary clears it).
    judged: bool,
}

fn entry_state() -> impl proptest::strategy::Strategy<Value = EntryState> {
    use proptest::prelude::*;
    (any::<bool>(), 0u8..4, 0u8..3, any::<bool>(), any::<bool>()).prop_map(
        |(key_missing, beacon, breaker, paused, judged)| EntryState {
            key_missing: key_missing && beacon == 0,
            beacon,
            breaker,
            paused,
            judged,
        },
    )
}

/// Sets `entry`'s health, breaker and quota as `state` says, through the
/// same beacons and shared state a router reads.
async fn arrange(router: &Router, entry: &ModelRef, state: EntryState) {
    let profile = router.profile(TaskKind::Explain);
    for _ in 0..3 {
        let (first_token, outcome) = match state.beacon {
            1 => (Duration::from_millis(100), beacon::Outcome::Ok),
            2 => (profile.first_token_ceiling() * 2, beacon::Outcome::Ok),
            3 => (
                Duration::from_millis(100),
                beacon::Outcome::Degraded(beacon::Degradation::Truncated),
            ),
            _ => break,
        };
        let sample = beacon::Sample {
            longest_gap: None,
            at: Instant::now(),
            first_token: Some(first_token),
            total: first_token,
            outcome,
        };
        router.beacons().record(entry, sample);
    }
    let key = router.key(entry);
    let breakers = &router.resilience().breakers;
    if state.breaker > 0 {
        for _ in 0..breakers.config().failures {
            let admission = breakers
                .admit(&key.breaker_key(), Duration::from_secs(1))
                .await;
            breakers
                .record(&key.breaker_key(), admission, false, "HTTP 503")
                .await;
        }
    }
    if state.judged {
        let verdict = Verdict::new(VerdictKind::Degraded, "degraded: cut answers".into());
        router
            .resilience()
            .verdicts
            .judge(&key.path(), verdict)
            .await;
    }
    if state.paused {
        let pause = profile.wait_budget() + Duration::from_secs(60);
        router
            .resilience()
            .governor
            .pause(&key.quota_key(), pause)
            .await;
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Status and routing ask one plan: whatever the health, breakers and
    /// quota, the entry status calls "now" is the entry a request tries first.
    #[test]
    fn every_reader_names_the_entry_run_tries_first(
        states in proptest::collection::vec(entry_state(), 4),
        rule in proptest::option::of(proptest::sample::select(vec!["secrets/**", ".env"])),
    ) {
        paused_clock().block_on(async {
            let names = ["a/x", "b/y", "c/z", "d/w"];
            let entries: Vec<ModelRef> = names.iter().map(|n| ModelRef::parse(n).unwrap()).collect();
            let mut config = chains(&names[..2], &names[2..]);
            config.tasks.explain.tier = Tier::Large;
            config.tasks.explain.hedge = false;
            let calls = Arc::new(Mutex::new(Vec::new()));
            let providers: Vec<Arc<Scripted>> = entries
                .iter()
                .map(|e| {
                    let mut scripted = Scripted::new(&e.provider, vec![], ok());
                    Arc::get_mut(&mut scripted).unwrap().order = Some(calls.clone());
                    scripted
                })
                .collect();
            let mut map: HashMap<String, Arc<dyn Provider>> = HashMap::new();
            let mut missing = HashMap::new();
            for ((entry, state), provider) in entries.iter().zip(&states).zip(&providers) {
                if state.key_missing {
                    missing.insert(entry.provider.clone(), "KEY".to_owned());
                } else {
                    map.insert(entry.provider.clone(), provider.clone() as Arc<dyn Provider>);
                }
            }
            let lasting = Lasting::new(Arc::new(Resilience::in_memory()));
            let router = Router::with_providers(&config, map, missing, EngineSlot::default(), lasting);
            for (entry, state) in entries.iter().zip(&states) {
                arrange(&router, entry, *state).await;
            }
            let cooldown = Duration::from_millis(router.resilience().breakers.config().cooldown_ms);
            // Cooled-down breakers first wait out their cooldown; open ones trip again after it.
            tokio::time::advance(cooldown + Duration::from_secs(1)).await;
            for (entry, state) in entries.iter().zip(&states) {
                if state.breaker == 1 {
                    arrange(&router, entry, EntryState { beacon: 0, paused: false, judged: false, ..*state }).await;
                }
            }
            // What the runbook shows: the plan after re-reading the shared state.
            let name = |c: crate::plan::Cleared| format!("{} ({})", c.entry, c.tier);
            let planned = router.plan(Ask::task(TaskKind::Explain).kept_local(rule)).now().map(name);
            router.refresh_shared().await;
            let now = match rule {
                None => router.plan(Ask::task(TaskKind::Explain)).now().map(name),
                Some(_) => planned.clone(),
            };
            assert_eq!(now, planned, "the plan after a shared-state refresh differs: {states:?}");
            calls.lock().unwrap().clear();
            // The default path rules keep both documents local.
            let document = match rule {
                Some("secrets/**") => "/w/secrets/key.rs",
                Some(_) => "/w/.env",
                None => "/w/src/main.rs",
            };
            let origin = crate::Origin { document: Some(document.into()), ..Default::default() };
            let request = TaskRequest { origin, ..explain() };
            let served = run(&router, request).await;
            let first = calls.lock().unwrap().first().cloned();
            let tried = first.map(|provider: String| {
                let i = entries.iter().position(|e| e.provider == provider).unwrap();
                let tier = if i < 2 { Tier::Large } else { Tier::Medium };
                format!("{} ({tier})", entries[i])
            });
            if let Ok(answer) = &served {
                // The status names the entry that served, which is the one tried first.
                let status = router.status();
                let route = status.tasks.iter().find(|t| t.kind == TaskKind::Explain)
                    .and_then(|t| t.route.clone()).unwrap();
                prop_assert_eq!(Some(format!("{}/{} ({})", route.provider, route.model, route.tier)), tried.clone());
                prop_assert_eq!(&answer.route, &route);
            }
            if rule.is_some() {
                prop_assert!(matches!(served, Err(RouteError::KeptLocal { .. })), "{:?}", served);
            }
            prop_assert_eq!(now, tried, "{:?}", states);
            // Canaries go to the plan's entries out of user traffic (a breaker
            // not closed, a verdict) and to no entry serving normally.
            let plan = router.plan(Ask::task(TaskKind::Explain));
            let views = router.resilience().breakers.views().await;
            let judged = router.resilience().verdicts.judged();
            let phase = |c: &Candidate| views.iter().find(|b| b.key == c.key.path()).map(|b| b.phase);
            let out_of_traffic: Vec<ModelRef> = plan.candidates().iter()
                .filter(|c| !matches!(c.skip, Some(Skip::NoKey(_))))
                .filter(|c| phase(c).is_some_and(|p| p != Phase::Closed) || judged.contains(&c.key.path()))
                .map(|c| c.entry.clone())
                .collect();
            let mut canaried: Vec<ModelRef> = Vec::new();
            for canary in router.canary_round(false).await {
                let entry = ModelRef::new(canary.provider, canary.model);
                let candidate = plan.candidates().iter().find(|c| c.entry == entry);
                prop_assert!(candidate.is_some(), "{entry} is not in the plan");
                prop_assert!(
                    out_of_traffic.contains(&entry),
                    "a canary went to {entry}, which serves normally: {:?}", states
                );
                canaried.push(entry);
            }
            canaried.sort();
            let mut expected = out_of_traffic;
            expected.sort();
            prop_assert_eq!(canaried, expected, "{:?}", states);
            Ok(())
        })?;
    }
}
