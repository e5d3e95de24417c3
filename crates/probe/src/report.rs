//! A probe run judged: every entry the router's probe plan clears, probed
//! at once, each result recorded in the probe history and judged with the
//! entry's recent results against the ceiling. The front end only prints it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use switchyard_config::Config;
use switchyard_router::Router;

use super::history::{self, P95_WINDOW, Percentiles, ProbeRecord};
use super::targets::{self, Skipped};
use super::{Ceiling, ProbeResult};

/// One probed entry with its recent history judged against the ceiling.
pub struct Judged {
    pub result: ProbeResult,
    pub p95: Percentiles,
    /// What is over the ceiling at p95, as sentences.
    pub over_ceiling: Vec<String>,
}

impl Judged {
    pub fn entry(&self) -> String {
        format!("{}/{}", self.result.provider, self.result.model)
    }

    pub fn healthy(&self) -> bool {
        self.result.verdict.is_ok() && self.over_ceiling.is_empty()
    }
}

/// What a run of the remote probes found.
pub struct RemoteReport {
    pub judged: Vec<Judged>,
    pub skipped: Vec<Skipped>,
    /// What went wrong with the history (results are judged regardless).
    pub history_problems: Vec<String>,
}

impl RemoteReport {
    pub fn healthy(&self) -> bool {
        self.judged.iter().all(Judged::healthy)
    }
}

/// Probes every remote entry of `config` (only `only`'s, when given),
/// concurrently: each is a different provider or model, and a slow one
/// should not delay the verdict on the others. `Err` says why nothing could
/// be probed.
pub async fn probe_remote(
    config: &Config,
    only: Option<&str>,
    ceiling: Ceiling,
) -> Result<RemoteReport, String> {
    let router = Router::standalone(config);
    let plan = targets::select(&router, only).map_err(|e| e.to_string())?;
    if plan.probe.is_empty() {
        let skipped: Vec<String> = plan
            .skipped
            .iter()
            .map(|s| format!("{}/{} ({})", s.provider, s.model, s.reason()))
            .collect();
        return Err(format!(
            "nothing to probe: every entry lacks its API key: {}",
            skipped.join(", ")
        ));
    }
    let probes = plan
        .probe
        .iter()
        .map(|t| super::probe(t.provider.as_ref(), &t.model, config, ceiling));
    let results = futures::future::join_all(probes).await;
    let (judged, history_problems) = judge(results, ceiling, &history::default_path());
    Ok(RemoteReport {
        judged,
        skipped: plan.skipped,
        history_problems,
    })
}

/// Records `results` in the history at `path` and judges each with the
/// entry's earlier results.
fn judge(
    results: Vec<ProbeResult>,
    ceiling: Ceiling,
    path: &std::path::Path,
) -> (Vec<Judged>, Vec<String>) {
    let mut problems = Vec::new();
    let now = SystemTime::now();
    let records: Vec<ProbeRecord> = results.iter().map(|r| ProbeRecord::new(r, now)).collect();
    let earlier = history::recent_by_entry(path, P95_WINDOW - 1).unwrap_or_else(|e| {
        problems.push(format!("cannot read {}: {e}", path.display()));
        BTreeMap::new()
    });
    if let Err(e) = history::append(path, &records) {
        problems.push(format!("cannot record in {}: {e}", path.display()));
    }
    let judged = results
        .into_iter()
        .zip(&records)
        .map(|(result, record)| {
            let mut window = earlier.get(&record.entry()).cloned().unwrap_or_default();
            window.push(record.clone());
            let p95 = Percentiles::of(&window);
            Judged {
                over_ceiling: over_ceiling(&p95, ceiling),
                p95,
                result,
            }
        })
        .collect();
    (judged, problems)
}

/// What is over the ceiling at p95, as sentences for the final line.
pub fn over_ceiling(p95: &Percentiles, ceiling: Ceiling) -> Vec<String> {
    let checks = [
        ("TTFT", p95.ttft_ms, ceiling.first_token),
        ("total", p95.total_ms, ceiling.total),
    ];
    checks
        .into_iter()
        .filter_map(|(what, p95_ms, limit)| {
            let limit_ms = limit.as_millis();
            p95_ms
                .filter(|ms| u128::from(*ms) > limit_ms)
                .map(|ms| format!("p95 {what} {ms} ms is over the {limit_ms} ms ceiling"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Verdict;

    const CEILING: Ceiling = Ceiling {
        first_token: Duration::from_millis(300),
        total: Duration::from_millis(1000),
    };

    #[test]
    fn over_ceiling_names_each_p95_past_its_ceiling() {
        let p95 = |ttft_ms, total_ms| Percentiles {
            ttft_ms: Some(ttft_ms),
            total_ms: Some(total_ms),
            samples: 1,
        };
        assert!(over_ceiling(&p95(300, 1000), CEILING).is_empty());
        assert_eq!(
            over_ceiling(&p95(301, 1200), CEILING),
            vec![
                "p95 TTFT 301 ms is over the 300 ms ceiling",
                "p95 total 1200 ms is over the 1000 ms ceiling"
            ]
        );
        assert!(over_ceiling(&Percentiles::default(), CEILING).is_empty());
    }

    #[test]
    fn a_fast_answer_is_unhealthy_while_the_entrys_recent_p95_is_over_the_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probes.jsonl");
        let result = |total_ms| ProbeResult {
            provider: "p".into(),
            model: "m".into(),
            verdict: Verdict::Ok,
            ttft: Some(Duration::from_millis(100)),
            total: Duration::from_millis(total_ms),
        };
        let (slow, problems) = judge(vec![result(5000)], CEILING, &path);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(!slow[0].healthy());
        let (fast, _) = judge(vec![result(200)], CEILING, &path);
        assert_eq!(fast[0].p95.samples, 2);
        assert!(!fast[0].healthy(), "the slow probe is still in the window");
        assert!(fast[0].result.verdict.is_ok());
    }
}
