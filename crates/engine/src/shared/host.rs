//! The window hosting the engine: it runs the engine in-process, as a
//! window alone would, and serves the other windows' jobs from the same
//! queue, so a request from any window goes before background fills from
//! every window (the queue's own rule).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::wire::{self, Peer, ToClient, ToHost};
use crate::{
    ChatJob, CompletionJob, EditorWindow, EngineError, EngineOptions, EngineStatus, FimText, Job,
    SpanText, StopRule,
};
use switchyard_base::cancel::CancelFlag;

/// How long the engine waits for a window's stop rule: a window that does
/// not answer (stopped, swapping) ends its own answer, not everyone's.
const STOP_RULE_ANSWERS_WITHIN: Duration = Duration::from_millis(200);

/// What makes this process the host: the lock, held while it lives, and
/// the socket the other windows connect to.
pub(super) struct Hosting {
    pub(super) lock: File,
    pub(super) listener: UnixListener,
    pub(super) socket: PathBuf,
}

/// The client windows connected now, to tell of every status change.
#[derive(Clone, Default)]
struct Clients(Arc<Mutex<Vec<Peer>>>);

impl Clients {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Peer>> {
        wire::locked(&self.0)
    }

    /// Adds `peer`, telling it the status now; under the same lock as a
    /// broadcast, so no older status can reach it after.
    fn join(&self, peer: &Peer, status: &watch::Receiver<EngineStatus>) {
        let mut clients = self.lock();
        let _ = peer.send(&ToClient::Status(status.borrow().clone()));
        clients.push(peer.clone());
    }

    fn leave(&self, peer: &Peer) {
        self.lock().retain(|p| !p.is(peer));
    }

    fn broadcast(&self, message: &ToClient) {
        for peer in self.lock().iter() {
            let _ = peer.send(message);
        }
    }
}

/// Runs the engine on this thread until it is shut down, serving the
/// windows that connect meanwhile; then tells them to choose a new host.
pub(super) fn serve(
    options: EngineOptions,
    hosting: Hosting,
    (sender, jobs): (Sender<Job>, Receiver<Job>),
    status: watch::Sender<EngineStatus>,
) {
    tracing::info!(socket = %hosting.socket.display(), "hosting the local engine for every window");
    let clients = Clients::default();
    let closing = Arc::new(AtomicBool::new(false));
    let accepting = (status.subscribe(), clients.clone(), closing.clone());
    accept_windows(hosting.listener, sender, accepting);
    tell_status_changes(status.subscribe(), clients.clone());
    crate::engine::run(options, jobs, status);
    // The accepting thread wakes to a last connection and ends; new windows
    // find no socket; those here choose among themselves once the lock is free.
    closing.store(true, Ordering::Release);
    let _ = UnixStream::connect(&hosting.socket);
    let _ = std::fs::remove_file(&hosting.socket);
    clients.broadcast(&ToClient::Closing);
    drop(hosting.lock);
}

fn accept_windows(
    listener: UnixListener,
    jobs: Sender<Job>,
    (status, clients, closing): (watch::Receiver<EngineStatus>, Clients, Arc<AtomicBool>),
) {
    let accept = move || {
        // The host's own jobs are `EditorWindow::OWN`, 0.
        for (number, stream) in (1..).zip(listener.incoming().flatten()) {
            if closing.load(Ordering::Acquire) {
                break;
            }
            let (jobs, status, clients) = (jobs.clone(), status.clone(), clients.clone());
            let window = EditorWindow(number);
            let _ = std::thread::Builder::new()
                .name("switchyard-engine-window".into())
                .spawn(move || serve_window(stream, window, jobs, (&status, &clients)));
        }
    };
    let _ = std::thread::Builder::new()
        .name("switchyard-engine-accept".into())
        .spawn(accept);
}

fn tell_status_changes(mut status: watch::Receiver<EngineStatus>, clients: Clients) {
    let tell = move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
            return;
        };
        runtime.block_on(async {
            while status.changed().await.is_ok() {
                let now = status.borrow_and_update().clone();
                clients.broadcast(&ToClient::Status(now));
            }
        });
    };
    let _ = std::thread::Builder::new()
        .name("switchyard-engine-status".into())
        .spawn(tell);
}

/// A client window's job running here.
struct Running {
    cancel: CancelFlag,
    /// Where the window's stop-rule answers go (completions only).
    stops: Option<Sender<bool>>,
}

/// A client window's jobs still running here, by the id the window gave them.
#[derive(Clone, Default)]
struct RunningJobs(Arc<Mutex<HashMap<u64, Running>>>);

impl RunningJobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Running>> {
        wire::locked(&self.0)
    }

    /// Keeps job `id` until it is answered; its cancel flag.
    fn start(&self, id: u64, stops: Option<Sender<bool>>) -> CancelFlag {
        let cancel = CancelFlag::default();
        self.lock().insert(
            id,
            Running {
                cancel: cancel.clone(),
                stops,
            },
        );
        cancel
    }

    fn answered(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn cancel(&self, id: u64) {
        if let Some(job) = self.lock().get(&id) {
            job.cancel.cancel();
        }
    }

    fn stop_rule_says(&self, id: u64, stops: bool) {
        if let Some(answers) = self.lock().get(&id).and_then(|job| job.stops.as_ref()) {
            let _ = answers.send(stops);
        }
    }

    /// The window left: what it had running stops costing.
    fn cancel_all(&self) {
        for (_, job) in self.lock().drain() {
            job.cancel.cancel();
        }
    }
}

/// Serves one client window until it leaves or sends what is not a message;
/// then what it left running is cancelled (a crashed window stops costing).
fn serve_window(
    stream: UnixStream,
    window: EditorWindow,
    jobs: Sender<Job>,
    (status, clients): (&watch::Receiver<EngineStatus>, &Clients),
) {
    let Ok(writer) = stream.try_clone() else {
        return;
    };
    let peer = Peer::new(writer);
    clients.join(&peer, status);
    let running = RunningJobs::default();
    let mut reader = BufReader::new(stream);
    while let Ok(Some(message)) = wire::receive::<ToHost>(&mut reader) {
        if let Some(job) = take(message, window, &peer, &running)
            && jobs.send(job).is_err()
        {
            break;
        }
    }
    clients.leave(&peer);
    running.cancel_all();
}

/// The engine job a message asks for, if any; cancels and stop-rule answers
/// go to the job they name.
fn take(message: ToHost, window: EditorWindow, peer: &Peer, running: &RunningJobs) -> Option<Job> {
    match message {
        ToHost::Complete {
            id,
            text,
            span,
            max_tokens,
            within_us,
        } => {
            let wanted = (text, span, max_tokens, within_us);
            Some(completion(wanted, id, window, (peer, running)))
        }
        ToHost::Chat {
            id,
            messages,
            max_tokens,
            within_us,
            first_token_within_us,
            streams,
        } => {
            let (pieces, streamed) = tokio::sync::mpsc::unbounded_channel();
            let job = ChatJob {
                messages,
                max_tokens,
                deadline: wire::deadline_in(within_us),
                first_token_by: first_token_within_us.map(wire::deadline_in),
                cancel: running.start(id, None),
                pieces: streams.then_some(pieces),
            };
            Some(Job::Chat(
                job,
                answer_later(peer, id, running, Some(streamed)),
            ))
        }
        ToHost::Prewarm {
            id,
            prewarm,
            tells_done,
        } => {
            let done = tells_done.then(|| prewarmed_later(peer.clone(), id));
            Some(Job::Prewarm(prewarm, done, window))
        }
        ToHost::Cancel { id } => {
            running.cancel(id);
            None
        }
        ToHost::Stops { id, stops } => {
            running.stop_rule_says(id, stops);
            None
        }
    }
}

/// Completion `id` of `window`: its stop rule asks the window's, its
/// cancel flag is the window's to set, its answer goes back to it.
fn completion(
    (text, span, max_tokens, within_us): (FimText, Option<SpanText>, usize, u64),
    id: u64,
    window: EditorWindow,
    (peer, running): (&Peer, &RunningJobs),
) -> Job {
    let (stops, answers) = mpsc::channel();
    let job = CompletionJob {
        text,
        span,
        max_tokens,
        stop: asks_the_window(peer.clone(), id, answers),
        deadline: wire::deadline_in(within_us),
        cancel: running.start(id, Some(stops)),
    };
    Job::Complete(job, answer_later(peer, id, running, None), window)
}

/// A stop rule that asks the window's own rule, and stops where it cannot.
fn asks_the_window(peer: Peer, id: u64, answers: Receiver<bool>) -> StopRule {
    Box::new(move |text: &str| {
        let asked = ToClient::Stops {
            id,
            text: text.to_owned(),
        };
        if peer.send(&asked).is_err() {
            return true;
        }
        answers
            .recv_timeout(STOP_RULE_ANSWERS_WITHIN)
            .unwrap_or(true)
    })
}

/// Where the engine's answer goes: sent to the window once it comes, after
/// the pieces a chat streamed (the same thread sends both, in order).
fn answer_later(
    peer: &Peer,
    id: u64,
    running: &RunningJobs,
    mut streamed: Option<Pieces>,
) -> oneshot::Sender<Result<crate::Generation, EngineError>> {
    let (reply, answer) = oneshot::channel();
    let (peer, running) = (peer.clone(), running.clone());
    let send = move || {
        // The pieces end when the engine drops the job, with or before its answer.
        while let Some(text) = streamed.as_mut().and_then(|s| s.blocking_recv()) {
            let _ = peer.send(&ToClient::Piece { id, text });
        }
        let answer = answer.blocking_recv().unwrap_or(Err(EngineError::Stopped));
        running.answered(id);
        let _ = peer.send(&ToClient::Answer { id, answer });
    };
    let _ = std::thread::Builder::new()
        .name("switchyard-engine-answer".into())
        .spawn(send);
    reply
}

type Pieces = tokio::sync::mpsc::UnboundedReceiver<String>;

fn prewarmed_later(peer: Peer, id: u64) -> oneshot::Sender<()> {
    let (done, wait) = oneshot::channel();
    let send = move || {
        let done = wait.blocking_recv().is_ok();
        let _ = peer.send(&ToClient::Prewarmed { id, done });
    };
    let _ = std::thread::Builder::new()
        .name("switchyard-engine-answer".into())
        .spawn(send);
    done
}
