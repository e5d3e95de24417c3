//! Files over loopback HTTP, and their digests: what a download (a model,
//! a release archive) is tested against.

use std::path::Path;

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::http::StatusCode;

/// Serves the files of `dir` at `/<name>`; the base URL.
pub async fn serve(dir: &Path) -> String {
    let dir = dir.to_owned();
    let app = Router::new().route(
        "/{name}",
        axum::routing::get(move |UrlPath(name): UrlPath<String>| {
            let path = dir.join(name);
            async move { std::fs::read(path).map_err(|_| StatusCode::NOT_FOUND) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// The SHA-256 of the file at `path`, in hex.
pub fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}
