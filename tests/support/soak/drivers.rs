//! The soak's drivers: editor windows (explain, refactor, local-only,
//! edits, completions) and the gateway's client.

use super::*;

/// One editor window: explain, refactor, edits and local-only toggles, one
/// at a time, as a user works.
pub(super) async fn drive_window(index: usize, soak: Arc<Soak>) {
    let mut client = soak.window(index).await;
    let mut rng = fastrand::Rng::with_seed(index as u64);
    let mut edits = 0u64;
    let mut killed_in = None;
    let mut seen_phase = 0;
    let (mut served_by, mut status_names) = (None, None);
    loop {
        let (phase, fault) = soak.phase();
        let counts = &soak.counts[phase];
        check_status(&mut client, served_by.take(), &mut status_names, counts).await;
        if phase != seen_phase {
            note_settled(&mut client, seen_phase, &soak).await;
            seen_phase = phase;
        }
        if fault == Fault::WindowKilled && index == 2 + phase % 2 && killed_in != Some(phase) {
            killed_in = Some(phase);
            // Killed with a request under way, then started again.
            client
                .send_request("workspace/executeCommand", explain(index))
                .await;
            counts.add(|c| &c.sent);
            client.kill().await;
            client = soak.window(index).await;
            (served_by, status_names) = (None, None);
            continue;
        }
        let roll = rng.usize(..100);
        if index == COMPLETING && roll < 35 {
            complete(&mut client, &mut rng, &mut edits, counts).await;
        } else if index == PRIVATE && roll < 15 {
            private_requests(&mut client, index, &soak).await;
        } else if REFACTORING.contains(&index) && roll < 30 {
            refactor(&mut client, index, &soak, counts).await;
        } else if roll < 40 {
            edits += 1;
            let text = format!("fn scratch() {{ let edits = {edits}; }}\n");
            client
                .notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": scratch(index), "version": edits + 1},
                           "contentChanges": [{"text": text}]}),
                )
                .await;
        } else {
            served_by = ask_explain(&mut client, index, counts).await;
        }
        check_status(&mut client, None, &mut status_names, counts).await;
        resumes_in(&mut client, &soak);
        if !client.pid().is_some_and(alive) {
            if !soak.was_killed(index) {
                soak.counts[soak.phase().0].add(|c| &c.exited);
            }
            client = soak.window(index).await;
            (served_by, status_names) = (None, None);
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(300..700))).await;
    }
}

/// Notes the window's live tasks and open files at the end of `phase`,
/// between its own requests: the fewest of five looks over 1.5 seconds, so
/// work under way for a moment (a resume, a canary round, a lease given
/// back) does not count, and a leak, which is there at every look, still
/// does. Prints the looks when the fewest is over the window's first by
/// more than 2.
pub(super) async fn note_settled(client: &mut LspClient, phase: usize, soak: &Soak) {
    let Some(pid) = client.pid() else { return };
    let (mut tasks, mut fds) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let status = json!({"command": "switchyard.status"});
        let id = client
            .send_request("workspace/executeCommand", status)
            .await;
        let reply = client.response_within(id, CEILING).await;
        tasks.extend(reply.and_then(|r| r["result"]["runtimeTasks"].as_u64()));
        fds.extend(open_files(pid));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    soak.note_settled(phase, pid, &tasks, &fds);
}

/// Notes the gateway's open files at the end of `phase`, between its
/// client's requests, as `note_settled` does a window's.
pub(super) async fn note_gateway_settled(pid: u32, phase: usize, soak: &Soak) {
    let mut fds = Vec::new();
    for _ in 0..5 {
        fds.extend(open_files(pid));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    soak.note_settled(phase, pid, &[], &fds);
}

pub(super) fn large_document() -> String {
    "file:///work/large.rs".into()
}

/// About 10 MB of Rust.
pub(super) fn large_text() -> String {
    (0..LARGE_LINES)
        .map(|i| format!("fn item_{i}(x: u64) -> u64 {{ x.wrapping_mul({i}) + 7 }} // {i:>8}\n"))
        .collect()
}

/// An inline completion in the large document: now and then after a burst
/// of 1 000 edits in about a second, some cancelled as soon as they are
/// sent. Every one ends in items, an empty answer or the cancellation.
pub(super) async fn complete(
    client: &mut LspClient,
    rng: &mut fastrand::Rng,
    edits: &mut u64,
    counts: &Counts,
) {
    let line = rng.u32(1000..LARGE_LINES as u32 - 1000);
    if rng.usize(..4) == 0 {
        burst_of_changes(client, line, edits).await;
    }
    let position = json!({"line": line, "character": 0});
    let params = json!({"textDocument": {"uri": large_document()}, "position": position,
                        "context": {"triggerKind": 2}});
    let id = client
        .send_request("textDocument/inlineCompletion", params)
        .await;
    counts.add(|c| &c.sent);
    if rng.bool() {
        client.notify("$/cancelRequest", json!({"id": id})).await;
    }
    let started = Instant::now();
    let response = client.response_within(id, CEILING + MARGIN).await;
    counts.took(started);
    let Some(response) = response else {
        return unanswered(client, counts);
    };
    let result = &response["result"];
    if response.get("error").is_some() {
        counts.add(|c| &c.errors)
    } else if result.is_null() || result["items"].is_array() || result.is_array() {
        counts.add(|c| &c.answered)
    } else {
        counts.add(|c| &c.garbled)
    }
}

/// 1 000 edits at `line` of the large document, a character typed and taken
/// back, sent a millisecond apart.
pub(super) async fn burst_of_changes(client: &mut LspClient, line: u32, edits: &mut u64) {
    for n in 0..1000u32 {
        *edits += 1;
        let (range, text) = match n % 2 {
            0 => (
                json!({"start": {"line": line, "character": 0}, "end": {"line": line, "character": 0}}),
                "x",
            ),
            _ => (
                json!({"start": {"line": line, "character": 0}, "end": {"line": line, "character": 1}}),
                "",
            ),
        };
        client
            .notify(
                "textDocument/didChange",
                json!({"textDocument": {"uri": large_document(), "version": *edits + 1},
                       "contentChanges": [{"range": range, "text": text}]}),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

pub(super) fn explain(index: usize) -> Value {
    let range = whole_function();
    json!({"command": "switchyard.explain", "arguments": [document(index), range]})
}

/// Sends one command and waits for its reply within the ceiling and margin.
pub(super) async fn command(
    client: &mut LspClient,
    params: Value,
    counts: &Counts,
) -> Option<Value> {
    let id = client
        .send_request("workspace/executeCommand", params)
        .await;
    counts.add(|c| &c.sent);
    let started = Instant::now();
    let response = client.response_within(id, CEILING + MARGIN).await;
    counts.took(started);
    if response.is_none() {
        unanswered(client, counts);
    }
    response
}

/// A request with no reply: lost, unless its window died (killed by the
/// soak, or an exit counted on its own).
pub(super) fn unanswered(client: &LspClient, counts: &Counts) {
    // Its stdout closes as it exits, a moment before /proc says it has.
    if !client.gone() && client.pid().is_some_and(alive) {
        counts.add(|c| &c.lost);
    }
}

/// Asks one explain; returns the route that answered it whole
/// (`provider/model`).
pub(super) async fn ask_explain(
    client: &mut LspClient,
    index: usize,
    counts: &Counts,
) -> Option<String> {
    let response = command(client, explain(index), counts).await?;
    if response.get("result").is_none() && response.get("error").is_none() {
        counts.add(|c| &c.garbled);
        return None;
    }
    match explain_result(response) {
        Ok(served) if served.text == ANSWER => {
            counts.add(|c| &c.answered);
            return Some(served.model);
        }
        Ok(_) => counts.add(|c| &c.garbled),
        Err(_) => counts.add(|c| &c.errors),
    }
    None
}

/// The status bar's truth: by the time the user acts again, the latest
/// `switchyard/status` names the route that served the window's last
/// explain. Counts it when it names another route, or none.
pub(super) async fn check_status(
    client: &mut LspClient,
    served_by: Option<String>,
    named: &mut Option<String>,
    counts: &Counts,
) {
    client.read_arrived().await;
    for status in client
        .seen
        .iter()
        .filter(|m| m["method"] == "switchyard/status")
    {
        let tasks = status["params"]["tasks"].as_array();
        let explain = tasks.and_then(|t| t.iter().find(|t| t["kind"] == "explain"));
        *named = explain.and_then(|t| {
            Some(format!(
                "{}/{}",
                t["provider"].as_str()?,
                t["model"].as_str()?
            ))
        });
    }
    if let Some(route) = served_by
        && named.as_ref() != Some(&route)
    {
        println!("      status names {named:?}, {route} served");
        counts.add(|c| &c.untrue_status);
    }
}

pub(super) async fn refactor(client: &mut LspClient, index: usize, soak: &Soak, counts: &Counts) {
    let params = json!({"command": "switchyard.refactor",
        "arguments": [document(index), whole_function(), REFACTOR_INSTRUCTION]});
    let before = client.seen.len();
    let Some(response) = command(client, params, counts).await else {
        return;
    };
    let result = &response["result"];
    if let Some(id) = result["parked"].as_str() {
        counts.add(|c| &c.parked);
        soak.parked.lock().unwrap().insert(id.to_owned());
        return;
    }
    if response.get("error").is_some() {
        counts.add(|c| &c.errors);
        return;
    }
    let applied = client.seen[before..]
        .iter()
        .rev()
        .find(|m| m["method"] == "workspace/applyEdit")
        .and_then(|edit| {
            edit["params"]["edit"]["documentChanges"][0]["edits"]
                .as_array()
                .cloned()
        });
    match applied {
        Some(edits)
            if result["provider"].is_string() && apply_edits(DOC, &edits) == rewritten() =>
        {
            counts.add(|c| &c.answered)
        }
        _ => counts.add(|c| &c.garbled),
    }
}

/// Local-only on, a few explains (which must not leave the machine), off.
pub(super) async fn private_requests(client: &mut LspClient, index: usize, soak: &Soak) {
    let set = |on: bool| json!({"command": "switchyard.setLocalOnly", "arguments": [on]});
    let counts = &soak.counts[soak.phase().0];
    if command(client, set(true), counts).await.is_none() {
        return;
    }
    let on_since = Instant::now();
    for _ in 0..3 {
        let counts = &soak.counts[soak.phase().0];
        let Some(response) = command(client, explain(index), counts).await else {
            break;
        };
        match response.get("error").is_some() {
            // No local model here: a clean error is the answer.
            true => counts.add(|c| &c.errors),
            false => counts.add(|c| &c.answered),
        }
    }
    soak.private_spans
        .lock()
        .unwrap()
        .push((on_since, Instant::now()));
    command(client, set(false), counts).await;
}

/// Notes the parked refactors this window resumed and finished (their
/// `$/progress` ends so) and those whose resume failed for good since it
/// last looked, then forgets what it has read.
pub(super) fn resumes_in(client: &mut LspClient, soak: &Soak) {
    for message in &client.seen {
        let params = &message["params"];
        match message["method"].as_str() {
            Some("$/progress") if params["value"]["kind"] == "end" => {
                let token = params["token"].as_str().unwrap_or_default();
                let finished = params["value"]["message"] == "resumed and finished";
                if let (Some(id), true) = (token.strip_prefix("switchyard/resume/"), finished) {
                    *soak
                        .finished
                        .lock()
                        .unwrap()
                        .entry(id.to_owned())
                        .or_default() += 1;
                }
            }
            Some("window/showMessage")
                if params["message"]
                    .as_str()
                    .is_some_and(|t| t.contains("parked refactor failed")) =>
            {
                println!("      {}", params["message"]);
                soak.resumes_failed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
    client.seen.clear();
    client.drop_backlog();
}

/// Parked refactors whose checkpoint is in the state directory now.
pub(super) fn note_checkpoints(soak: &Soak) {
    let Ok(entries) = std::fs::read_dir(soak.state_dir.join("parked")) else {
        return;
    };
    let ids = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()));
    soak.parked.lock().unwrap().extend(ids);
}

/// A gateway client that does not retry by itself.
pub(super) async fn drive_gateway(gateway: Arc<GatewayProcess>, soak: Arc<Soak>) {
    let mut seen_phase = 0;
    loop {
        let phase = soak.phase().0;
        if phase != seen_phase {
            if let Some(pid) = gateway.pid() {
                note_gateway_settled(pid, seen_phase, &soak).await;
            }
            seen_phase = phase;
        }
        let counts = &soak.counts[phase];
        counts.add(|c| &c.sent);
        let started = Instant::now();
        let ended =
            tokio::time::timeout(CEILING + MARGIN, gateway.chat("What does entry do?")).await;
        counts.took(started);
        match ended {
            Err(_) => counts.add(|c| &c.lost),
            Ok((200, body)) if body["choices"][0]["message"]["content"] == ANSWER => {
                counts.add(|c| &c.answered)
            }
            Ok((200, _)) => counts.add(|c| &c.garbled),
            Ok(_) => counts.add(|c| &c.errors),
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}
