//! What the soak watches from outside the processes: the primary's
//! breaker in Redis, who sent what, memory and open files, and the window
//! holding the probe lease (to kill it).

use super::*;

/// The breaker records in the shared state, polled: when each of the
/// primary's half-open windows began and how long it was seen lasting.
pub(super) struct BreakerWatch {
    /// (open until, on the backend's clock) → (half-open from, last seen open), here.
    pub(super) windows: Mutex<HashMap<u64, (Instant, Instant)>>,
}

pub(super) async fn watch_breaker(
    state: Arc<dyn switchyard_state::SharedState>,
    watch: Arc<BreakerWatch>,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (Ok(records), Ok(now)) = (state.scan("breaker/").await, state.now_ms().await) else {
            continue;
        };
        let seen = Instant::now();
        for (key, record) in records {
            if !key.contains("/primary/") || record["open"] != true {
                continue;
            }
            let until = record["open_until"].as_u64().unwrap_or_default();
            let from = seen + Duration::from_millis(until.saturating_sub(now));
            let mut windows = watch.windows.lock().unwrap();
            let entry = windows.entry(until).or_insert((from, seen));
            entry.1 = seen;
        }
    }
}

impl BreakerWatch {
    /// The most user requests the primary got within one half-open window
    /// (from its start to the last poll that saw it still open, so a
    /// request after the verdict is never counted in it), leaving out the
    /// probe of a holder the soak killed (it died with its window; its lease
    /// lapses and another probes); a window with more than one is printed,
    /// request by request.
    pub(super) fn most_per_window(
        &self,
        requests: &[RecordedRequest],
        killed: &[(usize, Instant)],
        (from, to): (Instant, Instant),
    ) -> usize {
        // The killed probe was under way (1.5 s) when its window was killed.
        let died_with_its_window = |r: &RecordedRequest| {
            killed.iter().any(|(index, at)| {
                sender(r) == format!("window {index}")
                    && r.at <= *at
                    && at.duration_since(r.at) < Duration::from_secs(2)
            })
        };
        let windows = self.windows.lock().unwrap();
        let mut most = 0;
        for (start, last_open) in windows
            .values()
            .filter(|(start, _)| *start >= from && *start < to)
        {
            let inside: Vec<&RecordedRequest> = requests
                .iter()
                .filter(|r| !r.is_canary() && !died_with_its_window(r))
                .filter(|r| r.at >= *start && r.at <= *last_open)
                .collect();
            if inside.len() > 1 {
                let open_for = last_open.duration_since(*start).as_millis();
                for r in &inside {
                    let at = r.at.duration_since(*start).as_millis();
                    println!(
                        "      probe: {at} ms into a half-open window seen for {open_for} ms, from {}",
                        sender(r)
                    );
                }
            }
            most = most.max(inside.len());
        }
        most
    }
}

/// Who sent a request the fakes got: a window (its document is in the
/// prompt), the gateway's client, or a canary.
pub(super) fn sender(request: &RecordedRequest) -> String {
    let body = request.body.to_string();
    if request.is_canary() {
        return "a canary".into();
    }
    (0..WINDOWS)
        .find(|i| body.contains(&file_name(*i)))
        .map_or("the gateway".into(), |i| format!("window {i}"))
}

/// Resident memory (kB) and open files of the switchyard processes this
/// process started.
pub(super) fn footprint() -> (u64, usize) {
    let me = std::process::id().to_string();
    let mut rss = 0;
    let mut fds = 0;
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let path = entry.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // The parent's pid is the second field after the command's closing parenthesis.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if comm.trim() != "switchyard" || parent != Some(me.as_str()) {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        rss += status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        fds += open_files_at(&path).unwrap_or(0);
    }
    (rss, fds)
}

/// How many files process `pid` has open; `None` once it has gone.
pub(super) fn open_files(pid: u32) -> Option<usize> {
    open_files_at(&std::path::Path::new("/proc").join(pid.to_string()))
}

fn open_files_at(process: &std::path::Path) -> Option<usize> {
    std::fs::read_dir(process.join("fd"))
        .ok()
        .map(|d| d.count())
}

/// Whether process `pid` runs (it is there and not a zombie).
pub(super) fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    state.is_some_and(|s| s != "Z")
}

pub(super) fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

/// Kills the window that holds the primary's probe lease while it probes
/// (the probe takes 1.5 s), once in the phase; the lease's holder names its
/// process.
pub(super) async fn kill_probe_holder(
    state: &dyn switchyard_state::SharedState,
    soak: &Soak,
    until: Instant,
) {
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Ok(leases) = state.scan("lease/").await else {
            continue;
        };
        let holder = leases
            .iter()
            .filter(|(key, _)| key.contains("/primary/"))
            .find_map(|(_, holder)| holder.as_str()?.split('-').next()?.parse::<u32>().ok());
        let Some(pid) = holder else { continue };
        let window = soak
            .pids
            .lock()
            .unwrap()
            .iter()
            .find(|(_, p)| **p == pid)
            .map(|(index, _)| *index);
        if let Some(index) = window {
            soak.killed.lock().unwrap().push(index);
            soak.killed_probers
                .lock()
                .unwrap()
                .push((index, Instant::now()));
            signal(pid, "-KILL");
            println!("      killed window {index} (pid {pid}) holding the primary's probe lease");
            return;
        }
    }
}
