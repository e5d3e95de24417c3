//! A window whose engine is hosted by another: its jobs go over the socket,
//! the host's answers, pieces and status come back, and its stop rules and
//! cancel flags stay here, asked and watched from here.

use std::collections::HashMap;
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::wire::{self, Peer, ToClient, ToHost};
use crate::{EngineError, EngineStatus, Generation, Job, StopRule};
use switchyard_base::cancel::CancelFlag;

/// How often the cancel flags of jobs running at the host are looked at: a
/// cancel reaches the host within this, as it reaches the engine between chunks.
const CANCELS_LOOKED_AT_EVERY: Duration = Duration::from_millis(5);

/// Why the relay ended.
pub(super) enum Ended {
    /// This window shut its engine down.
    Shutdown,
    /// The host left (exited, crashed or closed): choose a new one.
    HostLeft,
}

/// A job of this window that the host runs.
enum Sent {
    Answer {
        reply: oneshot::Sender<Result<Generation, EngineError>>,
        stop: Option<StopRule>,
        cancel: CancelFlag,
        cancel_sent: bool,
        pieces: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    },
    Prewarm(oneshot::Sender<()>),
}

#[derive(Clone, Default)]
struct SentJobs(Arc<Mutex<HashMap<u64, Sent>>>);

impl SentJobs {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Sent>> {
        wire::locked(&self.0)
    }
}

/// Sends this window's jobs to the host until this window shuts down or the
/// host leaves; jobs the host had not answered then are answered `Stopped`.
pub(super) fn relay(
    stream: UnixStream,
    jobs: &Receiver<Job>,
    status: &watch::Sender<EngineStatus>,
) -> Ended {
    let Ok(writer) = stream.try_clone() else {
        return Ended::HostLeft;
    };
    let peer = Peer::new(writer);
    let sent = SentJobs::default();
    let host_left = Arc::new(AtomicBool::new(false));
    let reader = {
        let (reader, peer, sent, status) = (
            stream.try_clone(),
            peer.clone(),
            sent.clone(),
            status.clone(),
        );
        let host_left = host_left.clone();
        std::thread::Builder::new()
            .name("switchyard-engine-host".into())
            .spawn(move || {
                if let Ok(reader) = reader {
                    read_from_host(reader, &peer, &sent, &status);
                }
                host_left.store(true, Ordering::Release);
            })
    };
    let ended = send_jobs(&peer, jobs, &sent, &host_left);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    if let Ok(reader) = reader {
        let _ = reader.join();
    }
    for (_, job) in sent.lock().drain() {
        if let Sent::Answer { reply, .. } = job {
            let _ = reply.send(Err(EngineError::Stopped));
        }
    }
    ended
}

fn send_jobs(peer: &Peer, jobs: &Receiver<Job>, sent: &SentJobs, host_left: &AtomicBool) -> Ended {
    let mut next_id = 0;
    loop {
        if host_left.load(Ordering::Acquire) {
            return Ended::HostLeft;
        }
        let job = match jobs.recv_timeout(CANCELS_LOOKED_AT_EVERY) {
            Ok(Job::Shutdown) | Err(RecvTimeoutError::Disconnected) => return Ended::Shutdown,
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                send_cancels(peer, sent);
                continue;
            }
        };
        next_id += 1;
        let message = register(next_id, job, sent);
        if peer.send(&message).is_err() {
            return Ended::HostLeft;
        }
    }
}

/// Keeps what stays here of `job` under `id`, and says what to send of it.
fn register(id: u64, job: Job, sent: &SentJobs) -> ToHost {
    let (message, kept) = match job {
        // The host knows which window a connection is.
        Job::Complete(job, reply, _) => {
            let message = ToHost::Complete {
                id,
                text: job.text,
                span: job.span,
                max_tokens: job.max_tokens,
                within_us: wire::left_until(job.deadline),
            };
            let kept = Sent::Answer {
                reply,
                stop: Some(job.stop),
                cancel: job.cancel,
                cancel_sent: false,
                pieces: None,
            };
            (message, kept)
        }
        Job::Chat(job, reply) => {
            let message = ToHost::Chat {
                id,
                messages: job.messages,
                max_tokens: job.max_tokens,
                within_us: wire::left_until(job.deadline),
                first_token_within_us: job.first_token_by.map(wire::left_until),
                streams: job.pieces.is_some(),
            };
            let kept = Sent::Answer {
                reply,
                stop: None,
                cancel: job.cancel,
                cancel_sent: false,
                pieces: job.pieces,
            };
            (message, kept)
        }
        Job::Prewarm(prewarm, done, _) => {
            let message = ToHost::Prewarm {
                id,
                prewarm,
                tells_done: done.is_some(),
            };
            match done {
                Some(done) => (message, Sent::Prewarm(done)),
                // Nobody waits for it: the host says nothing back.
                None => return message,
            }
        }
        Job::Shutdown => unreachable!("shutdown ends the relay before it is registered"),
    };
    sent.lock().insert(id, kept);
    message
}

fn send_cancels(peer: &Peer, sent: &SentJobs) {
    for (&id, job) in sent.lock().iter_mut() {
        if let Sent::Answer {
            cancel,
            cancel_sent,
            ..
        } = job
            && cancel.is_cancelled()
            && !*cancel_sent
        {
            *cancel_sent = true;
            let _ = peer.send(&ToHost::Cancel { id });
        }
    }
}

/// Hands the host's messages to the jobs they name until the host leaves.
fn read_from_host(
    stream: UnixStream,
    peer: &Peer,
    sent: &SentJobs,
    status: &watch::Sender<EngineStatus>,
) {
    let mut reader = BufReader::new(stream);
    while let Ok(Some(message)) = wire::receive::<ToClient>(&mut reader) {
        match message {
            ToClient::Status(now) => {
                if let EngineStatus::Ready(info) = &now
                    && !matches!(*status.borrow(), EngineStatus::Ready(_))
                {
                    tracing::info!(?info, "local model ready, hosted by another window");
                }
                status.send_replace(now);
            }
            ToClient::Stops { id, text } => {
                // A job no longer here (answered, cancelled) stops.
                let stops = match sent.lock().get_mut(&id) {
                    Some(Sent::Answer {
                        stop: Some(stop), ..
                    }) => stop(&text),
                    _ => true,
                };
                let _ = peer.send(&ToHost::Stops { id, stops });
            }
            ToClient::Piece { id, text } => {
                if let Some(Sent::Answer {
                    pieces: Some(pieces),
                    ..
                }) = sent.lock().get(&id)
                {
                    let _ = pieces.send(text);
                }
            }
            ToClient::Answer { id, answer } => {
                if let Some(Sent::Answer { reply, .. }) = sent.lock().remove(&id) {
                    let _ = reply.send(answer);
                }
            }
            ToClient::Prewarmed { id, done } => {
                if let Some(Sent::Prewarm(tell)) = sent.lock().remove(&id)
                    && done
                {
                    let _ = tell.send(());
                }
            }
            ToClient::Closing => break,
        }
    }
}
