//! Resumable HTTP downloads. Bytes go to a `.partial` file that a later run
//! continues with a `Range` request; a finished file is trusted only once its
//! size and SHA-256 match what was expected.

use std::io;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{CONTENT_RANGE, RANGE};
use reqwest::{Client, Response, StatusCode};
use tokio::fs;
use tokio::io::{AsyncWriteExt, BufWriter};

use super::error::FetchError;
use super::progress::{PullProgress, run_blocking};
use super::verify::{HASH_BUFFER_BYTES, hash_file};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A stalled transfer should fail (and resume) rather than hang a pull forever.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts per download when the network, not the data, fails.
const ATTEMPTS: u32 = 4;
const FIRST_RETRY_DELAY: Duration = Duration::from_secs(1);

pub(crate) fn client() -> Result<Client, reqwest::Error> {
    Client::builder()
        .user_agent(concat!("switchyard/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .build()
}

/// What a downloaded file must turn out to be; `None` fields are not checked.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Expected<'a> {
    pub size: Option<u64>,
    pub sha256: Option<&'a str>,
}

impl Expected<'_> {
    pub(crate) fn check_size(&self, what: &str, actual: u64) -> Result<(), FetchError> {
        match self.size {
            Some(expected) if expected != actual => Err(FetchError::WrongSize {
                what: what.to_owned(),
                expected,
                actual,
            }),
            _ => Ok(()),
        }
    }

    pub(crate) fn check(&self, what: &str, length: u64, digest: &str) -> Result<(), FetchError> {
        self.check_size(what, length)?;
        match self.sha256 {
            Some(expected) if !expected.eq_ignore_ascii_case(digest) => {
                Err(FetchError::WrongDigest {
                    what: what.to_owned(),
                    expected: expected.to_owned(),
                    actual: digest.to_owned(),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Downloads `url` into `partial`, continuing whatever it already holds, and
/// checks the result against `expected`; returns its SHA-256. A resumed
/// download that fails the check starts over once, since the kept prefix may
/// be stale; a final failure deletes `partial` so the next run starts clean.
pub(crate) async fn fetch_verified(
    client: &Client,
    url: &str,
    partial: &Path,
    expected: Expected<'_>,
    label: &str,
    progress: &dyn PullProgress,
) -> Result<String, FetchError> {
    let mut started_over = false;
    loop {
        let resumed = download(client, url, partial, expected.size, label, progress).await?;
        // A wrong size needs no hashing to be rejected.
        let checked = match expected.check_size(url, file_length(partial).await?) {
            Err(error) => Err(error),
            Ok(()) => {
                let (length, digest) = hash_with_progress(partial, label, progress).await?;
                expected.check(url, length, &digest).map(|()| digest)
            }
        };
        match checked {
            Ok(digest) => return Ok(digest),
            Err(error) if resumed && !started_over => {
                progress.message(&format!(
                    "{label}: the resumed download is wrong ({error}); starting over"
                ));
                remove_if_exists(partial).await?;
                started_over = true;
            }
            Err(error) => {
                remove_if_exists(partial).await?;
                return Err(error);
            }
        }
    }
}

/// Hashes `path` on the blocking pool, reporting progress as its own phase.
async fn hash_with_progress(
    path: &Path,
    label: &str,
    progress: &dyn PullProgress,
) -> Result<(u64, String), FetchError> {
    progress.begin(
        &format!("verifying {label}"),
        Some(file_length(path).await?),
    );
    let owned = path.to_owned();
    let hashed = run_blocking(progress, move |tick| hash_file(&owned, tick)).await;
    progress.end();
    hashed
        .map_err(io::Error::other)
        .and_then(|result| result)
        .map_err(FetchError::io("hash", path))
}

/// Downloads with retries; returns whether the final file continued bytes
/// kept from before (an earlier run or an earlier attempt).
async fn download(
    client: &Client,
    url: &str,
    partial: &Path,
    expected_size: Option<u64>,
    label: &str,
    progress: &dyn PullProgress,
) -> Result<bool, FetchError> {
    let mut delay = FIRST_RETRY_DELAY;
    let mut attempt = 1;
    loop {
        match download_once(client, url, partial, expected_size, label, progress).await {
            Err(error) if error.is_transient() && attempt < ATTEMPTS => {
                progress.message(&format!(
                    "{label}: {error}; retrying in {}s (attempt {} of {ATTEMPTS})",
                    delay.as_secs(),
                    attempt + 1
                ));
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

async fn download_once(
    client: &Client,
    url: &str,
    partial: &Path,
    expected_size: Option<u64>,
    label: &str,
    progress: &dyn PullProgress,
) -> Result<bool, FetchError> {
    let mut have = file_length(partial).await?;
    match expected_size {
        // Finished by an earlier run; the caller's check decides if it is right.
        Some(size) if have == size => return Ok(have > 0),
        Some(size) if have > size => have = 0,
        _ => {}
    }
    let mut request = client.get(url);
    if have > 0 {
        request = request.header(RANGE, format!("bytes={have}-"));
    }
    let response = request
        .send()
        .await
        .map_err(|error| FetchError::http(url, error))?;
    let start = match resumed_at(&response, have, url, partial).await? {
        Resumed::At(start) => start,
        Resumed::Whole => return Ok(true),
    };
    let total =
        content_range_total(&response).or(response.content_length().map(|length| start + length));
    if let (Some(expected), Some(total)) = (expected_size, total)
        && expected != total
    {
        // Fail before fetching gigabytes of the wrong file (or an error page).
        remove_if_exists(partial).await?;
        return Err(FetchError::WrongSize {
            what: url.to_owned(),
            expected,
            actual: total,
        });
    }
    progress.begin(&format!("downloading {label}"), total.or(expected_size));
    progress.advance(start);
    let written = write_body(response, url, partial, start, progress).await;
    progress.end();
    written.map(|()| start > 0)
}

/// Where an answer to a request for the bytes after `have` starts.
enum Resumed {
    At(u64),
    /// The server says the file has no bytes after `have`: it is whole.
    Whole,
}

/// Reads the status of an answer to a (ranged) request. A refused resume
/// removes the partial file, so the next attempt starts from the top.
async fn resumed_at(
    response: &Response,
    have: u64,
    url: &str,
    partial: &Path,
) -> Result<Resumed, FetchError> {
    match response.status() {
        StatusCode::OK => Ok(Resumed::At(0)),
        StatusCode::PARTIAL_CONTENT if have > 0 && content_range_start(response) == Some(have) => {
            Ok(Resumed::At(have))
        }
        StatusCode::RANGE_NOT_SATISFIABLE
            if have > 0 && content_range_total(response) == Some(have) =>
        {
            Ok(Resumed::Whole)
        }
        StatusCode::PARTIAL_CONTENT | StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => {
            remove_if_exists(partial).await?;
            Err(FetchError::ResumeRefused {
                url: url.to_owned(),
            })
        }
        status => Err(FetchError::Status {
            url: url.to_owned(),
            status,
        }),
    }
}

/// Writes the body of `response` to `partial` from `start` on.
async fn write_body(
    response: Response,
    url: &str,
    partial: &Path,
    start: u64,
    progress: &dyn PullProgress,
) -> Result<(), FetchError> {
    let mut options = fs::OpenOptions::new();
    if start > 0 {
        options.append(true);
    } else {
        options.write(true).create(true).truncate(true);
    }
    let file = options
        .open(partial)
        .await
        .map_err(FetchError::io("open", partial))?;
    let mut writer = BufWriter::with_capacity(HASH_BUFFER_BYTES, file);
    let mut body = response.bytes_stream();
    let streamed = async {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|error| FetchError::http(url, error))?;
            writer
                .write_all(&chunk)
                .await
                .map_err(FetchError::io("write", partial))?;
            progress.advance(chunk.len() as u64);
        }
        Ok(())
    }
    .await;
    // Keep whatever arrived, even after a broken stream: the retry resumes after it.
    let flushed = async {
        writer.flush().await?;
        writer.get_ref().sync_all().await
    }
    .await
    .map_err(FetchError::io("write", partial));
    streamed.and(flushed)
}

/// `Content-Range: bytes START-END/TOTAL` or `bytes */TOTAL`.
fn content_range(response: &Response) -> Option<&str> {
    response
        .headers()
        .get(CONTENT_RANGE)?
        .to_str()
        .ok()?
        .strip_prefix("bytes ")
}

fn content_range_start(response: &Response) -> Option<u64> {
    content_range(response)?
        .split('-')
        .next()?
        .trim()
        .parse()
        .ok()
}

fn content_range_total(response: &Response) -> Option<u64> {
    content_range(response)?
        .rsplit('/')
        .next()?
        .trim()
        .parse()
        .ok()
}

async fn file_length(path: &Path) -> Result<u64, FetchError> {
    match fs::metadata(path).await {
        Ok(metadata) => Ok(metadata.len()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(FetchError::io("read", path)(error)),
    }
}

pub(crate) async fn remove_if_exists(path: &Path) -> Result<(), FetchError> {
    match fs::remove_file(path).await {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(FetchError::io("remove", path)(error))
        }
        _ => Ok(()),
    }
}
