//! `GET /dashboard`: one self-contained page (inline CSS and JS, charts drawn as
//! inline SVG) that polls `/status` and `/history`. Carried in the binary, so a
//! gateway needs no files beside it.
//!
//! The page itself is served without the bearer token: a browser cannot send a
//! header on navigation, and the page holds no data. It reads the token from a
//! `#token=` fragment and sends it on its own fetches.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("dashboard.html");

/// Lets the page talk to this gateway only: no script, style, font or image
/// from anywhere else, and no fetch beyond its own origin.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
     img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE,
    )
}
