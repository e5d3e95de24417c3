//! Reporting what a pull is doing: the [`PullProgress`] trait, its terminal
//! and silent implementations, and the bridge that lets blocking work (hashing,
//! unzipping) report through a borrowed reporter.

use std::sync::{Mutex, PoisonError};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Receives a pull's progress. A pull runs in phases (each download, the
/// assembly, the final hash); each is one `begin` .. `advance`* .. `end`.
pub trait PullProgress: Send + Sync {
    /// A phase starts; `total_bytes` is `None` when the size is unknown.
    fn begin(&self, what: &str, total_bytes: Option<u64>);
    fn advance(&self, bytes: u64);
    /// Something the user should see (a retry, a fallback) outside the bar.
    fn message(&self, text: &str);
    fn end(&self);
}

/// Reports nothing; for callers with no one to tell.
pub struct NoProgress;

impl PullProgress for NoProgress {
    fn begin(&self, _what: &str, _total_bytes: Option<u64>) {}
    fn advance(&self, _bytes: u64) {}
    fn message(&self, _text: &str) {}
    fn end(&self) {}
}

/// Draws an indicatif bar on stderr; stdout may be an LSP channel or a path
/// printed for scripts. Without a terminal it prints one line per phase.
pub struct TerminalProgress;

/// There is one stderr, so one bar at a time; keeping it here lets
/// `TerminalProgress` stay a plain unit value.
static ACTIVE_BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

fn active_bar() -> std::sync::MutexGuard<'static, Option<ProgressBar>> {
    ACTIVE_BAR.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PullProgress for TerminalProgress {
    fn begin(&self, what: &str, total_bytes: Option<u64>) {
        let bar = ProgressBar::with_draw_target(total_bytes, ProgressDrawTarget::stderr());
        let template = if total_bytes.is_some() {
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
        } else {
            "{spinner} {msg} {bytes} {bytes_per_sec}"
        };
        let style = ProgressStyle::with_template(template)
            .map(|style| style.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_message(what.to_owned());
        if bar.is_hidden() {
            eprintln!("{what}");
        }
        if let Some(previous) = active_bar().replace(bar) {
            previous.finish();
        }
    }

    fn advance(&self, bytes: u64) {
        if let Some(bar) = active_bar().as_ref() {
            bar.inc(bytes);
        }
    }

    fn message(&self, text: &str) {
        match active_bar().as_ref() {
            Some(bar) if !bar.is_hidden() => bar.println(text),
            _ => eprintln!("{text}"),
        }
    }

    fn end(&self) {
        if let Some(bar) = active_bar().take() {
            bar.finish();
        }
    }
}

/// Runs `work` on the blocking pool, forwarding the byte counts it reports
/// to `progress` (which is borrowed, so cannot move into the blocking task).
pub(crate) async fn run_blocking<T: Send + 'static>(
    progress: &dyn PullProgress,
    work: impl FnOnce(&mut dyn FnMut(u64)) -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut task = tokio::task::spawn_blocking(move || {
        work(&mut |bytes| {
            let _ = sender.send(bytes);
        })
    });
    loop {
        tokio::select! {
            Some(bytes) = receiver.recv() => progress.advance(bytes),
            result = &mut task => {
                while let Ok(bytes) = receiver.try_recv() {
                    progress.advance(bytes);
                }
                return result;
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// Records phases and byte counts so tests can check what a pull reported.
    #[derive(Default)]
    pub(crate) struct RecordingProgress {
        pub phases: Mutex<Vec<String>>,
        pub messages: Mutex<Vec<String>>,
        pub bytes: AtomicU64,
    }

    impl PullProgress for RecordingProgress {
        fn begin(&self, what: &str, _total_bytes: Option<u64>) {
            self.phases.lock().unwrap().push(what.to_owned());
        }
        fn advance(&self, bytes: u64) {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        fn message(&self, text: &str) {
            self.messages.lock().unwrap().push(text.to_owned());
        }
        fn end(&self) {}
    }

    #[tokio::test]
    async fn run_blocking_forwards_every_reported_byte() {
        let progress = RecordingProgress::default();
        let result = run_blocking(&progress, |tick| {
            for _ in 0..1000 {
                tick(3);
            }
            "done"
        })
        .await
        .expect("task ran");
        assert_eq!(result, "done");
        assert_eq!(progress.bytes.load(Ordering::Relaxed), 3000);
    }
}
