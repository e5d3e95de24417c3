//! The local gateway: an OpenAI-compatible HTTP front end over the same routing
//! core as the language server, so agents and scripts on the machine share the
//! editors' health knowledge, breakers and quota (through the shared state).
//!
//! - `POST /v1/chat/completions` (streaming and not). `model` names a tier
//!   (`switchyard/large`), `switchyard` (the task's own tier) or a concrete
//!   `provider/model`. The answer names the model that actually answered and
//!   reports its usage only; failed attempts are not billed to the caller.
//! - A stream that fails before its first byte reaches the caller fails over
//!   unseen. After that the next entry continues the answer (as a prefill
//!   where the model takes one, otherwise as a continuation request, the seam
//!   de-duplicated), or the stream ends with an in-band error naming what
//!   stopped each entry; a truncated stream never ends looking successful (no
//!   `[DONE]` after an error).
//! - `GET /v1/models`, `GET /health`, `GET /status` (the runbook as JSON),
//!   `GET /history` (the last hour), `GET /dashboard` (both, as live charts).
//!   `/status` and `/history` answer with [`wire`]'s types (documented in
//!   docs/lsp-extensions.md), never the core's.
//! - Canaries check cooled-down breakers (and, if configured, the primaries)
//!   in the background, so recovery is noticed without a caller's request.
//! - A changed config file is applied without a restart: the session reads
//!   it again every second (`Session::follow_config_file`), and each request
//!   is routed by the router in force then.
//!
//! Loopback only unless `--allow-remote`, which also requires a bearer token.

mod dashboard;
pub mod openai;
mod stream;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use switchyard_base::entry::{ChainEntry, ModelRef};
use switchyard_base::task::{TaskKind, Tier};
use switchyard_config::Config;
use switchyard_context::chat::PromptParts;
use switchyard_core::Core;
use switchyard_core::session::Session;
use switchyard_providers::Secret;
use switchyard_router::history::History;
use switchyard_router::{Answer, Origin, Pin, RouteError, Router, TaskRequest};

/// The header a caller names its task kind with (`explain`, the default, or `refactor`).
pub const TASK_HEADER: &str = "x-switchyard-task";

pub struct GatewayOptions {
    pub listen: SocketAddr,
    /// Listening beyond loopback must be asked for explicitly.
    pub allow_remote: bool,
}

struct Gateway {
    /// Runs every request's task (the core owns it; the gateway translates).
    session: Arc<Session>,
    /// Listening beyond loopback: a request needs the token, and without
    /// one configured (an edit took it away) every request is refused.
    beyond_loopback: bool,
    history: Arc<History>,
}

impl Gateway {
    fn core(&self) -> &Arc<Core> {
        self.session.core()
    }

    /// The router in force now.
    fn router(&self) -> Arc<Router> {
        self.core().router()
    }
}

/// The bearer token `config` names, if its variable holds one.
fn token(config: &Config) -> Option<Secret> {
    config
        .gateway
        .token_env
        .as_ref()
        .and_then(|var| std::env::var(var).ok())
        .filter(|t| !t.is_empty())
        .map(Secret::new)
}

/// Runs the gateway over `session` until the process is interrupted.
pub async fn run(session: Arc<Session>, options: GatewayOptions) -> Result<(), String> {
    let core = session.core().clone();
    let beyond_loopback = !options.listen.ip().is_loopback();
    if beyond_loopback {
        if !options.allow_remote {
            return Err(format!(
                "{} is not a loopback address: pass --allow-remote to listen there",
                options.listen
            ));
        }
        if token(&core.config()).is_none() {
            return Err(
                "listening beyond loopback needs a bearer token: set gateway.token_env in the config and that variable"
                    .into(),
            );
        }
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!("gateway listening on http://{address}");
    // The first line on stdout says where it listens (`--listen 127.0.0.1:0` picks a port).
    println!("switchyard gateway listening on http://{address}");
    let history = Arc::new(History::default());
    let recorder = history.clone();
    session.keep_routes_known(move |router| recorder.record(router));
    tokio::spawn(session.clone().follow_config_file());
    let app = app(Arc::new(Gateway {
        session,
        beyond_loopback,
        history,
    }));
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| e.to_string())
}

fn app(gateway: Arc<Gateway>) -> axum::Router {
    axum::Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/status", get(status))
        .route("/history", get(history))
        .route("/dashboard", get(dashboard::page))
        .with_state(gateway)
}

fn error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    (status, Json(openai::error_body(kind, code, message))).into_response()
}

/// Whether the caller may use the gateway, by the token configured now.
fn authorised(gateway: &Gateway, headers: &HeaderMap) -> bool {
    let Some(token) = token(&gateway.core().config()) else {
        return !gateway.beyond_loopback;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| given == token.expose())
}

async fn models(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if !authorised(&gateway, &headers) {
        return unauthorised();
    }
    let router = gateway.router();
    let config = router.config();
    let mut ids: Vec<String> = [
        "switchyard",
        "switchyard/large",
        "switchyard/medium",
        "switchyard/small",
    ]
    .map(String::from)
    .into();
    // Only what a request can pin: the local engine is no `provider/model`.
    ids.extend(
        switchyard_router::plan::chain_entries(config)
            .iter()
            .filter_map(ChainEntry::remote)
            .map(ToString::to_string),
    );
    let data: Vec<Value> = ids
        .into_iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

async fn status(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if !authorised(&gateway, &headers) {
        return unauthorised();
    }
    Json(wire::StatusResponse::from(
        &switchyard_core::runbook::runbook(&gateway.router()).await,
    ))
    .into_response()
}

/// The last hour of health, one point per upkeep tick (the dashboard's data).
async fn history(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if !authorised(&gateway, &headers) {
        return unauthorised();
    }
    let every = gateway.core().config().resilience.canary_interval_ms;
    let tick_ms = History::tick(std::time::Duration::from_millis(every)).as_millis() as u64;
    Json(wire::HistoryResponse::new(
        tick_ms,
        &gateway.history.points(),
    ))
    .into_response()
}

fn unauthorised() -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "invalid_request_error",
        Some("invalid_api_key"),
        "missing or wrong bearer token for the switchyard gateway",
    )
}

/// What the caller asked for, as a routed task, or the response refusing it.
#[allow(clippy::result_large_err)] // the refusal is the handler's own response
fn task(router: &Router, headers: &HeaderMap, body: Value) -> Result<TaskRequest, Response> {
    let invalid = |message: String| {
        error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            &message,
        )
    };
    let request: openai::CompletionRequest =
        serde_json::from_value(body).map_err(|e| invalid(format!("malformed request: {e}")))?;
    let (system, messages) = openai::conversation(&request.messages).map_err(invalid)?;
    let kind = match headers.get(TASK_HEADER).map(|v| v.to_str().unwrap_or("")) {
        None | Some("explain") => TaskKind::Explain,
        Some("refactor") => TaskKind::Refactor,
        Some(other) => {
            return Err(invalid(format!(
                "{TASK_HEADER}: `{other}` is not a task kind (explain or refactor)"
            )));
        }
    };
    let pin = pin(router, &request.model)?;
    // The audit names the caller by what it says it is.
    let caller = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unnamed caller");
    let task = TaskRequest {
        messages: Some(messages),
        pin,
        max_tokens: request.max_completion_tokens.or(request.max_tokens),
        origin: Origin {
            front_end: "gateway",
            subject: caller.chars().take(120).collect(),
            document: None,
        },
        redact: router.config().privacy.redact_gateway,
        streamed: request.stream,
        ..TaskRequest::new(kind, system, PromptParts::default())
    };
    Ok(task)
}

/// The tier or entry the caller's `model` names, or the 404 refusing it.
#[allow(clippy::result_large_err)] // the refusal is the handler's own response
fn pin(router: &Router, model: &str) -> Result<Option<Pin>, Response> {
    match model {
        "switchyard" | "switchyard/auto" => Ok(None),
        "switchyard/large" => Ok(Some(Pin::Tier(Tier::Large))),
        "switchyard/medium" => Ok(Some(Pin::Tier(Tier::Medium))),
        "switchyard/small" => Ok(Some(Pin::Tier(Tier::Small))),
        model => match ModelRef::parse(model) {
            Some(entry) if router.provider_config(&entry.provider).is_some() => {
                Ok(Some(Pin::Entry(entry)))
            }
            _ => Err(error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                Some("model_not_found"),
                &format!(
                    "model `{model}` is neither a switchyard tier (switchyard/large, /medium, /small) nor provider/model of a configured provider"
                ),
            )),
        },
    }
}

fn route_error(e: &RouteError) -> Response {
    let message = e.to_string();
    match e {
        RouteError::NothingHealthy { retry_later, .. } => {
            let mut response = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                Some("no_model_available"),
                &message,
            );
            if *retry_later {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
            }
            response
        }
        RouteError::OverBudget(_) => error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("context_length_exceeded"),
            &message,
        ),
        RouteError::Refused { .. } => error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("content_refused"),
            &message,
        ),
        RouteError::LocalOnly(_)
        | RouteError::KeptLocal { .. }
        | RouteError::StoppedByRule { .. } => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            Some("local_only"),
            &message,
        ),
        RouteError::Cancelled => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            None,
            &message,
        ),
    }
}

fn model_of(answer: &Answer) -> String {
    format!("{}/{}", answer.route.provider, answer.route.model)
}

fn now_secs() -> u64 {
    switchyard_base::clock::now_ms() / 1000
}

async fn chat_completions(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorised(&gateway, &headers) {
        return unauthorised();
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                None,
                &format!("the body is not JSON: {e}"),
            );
        }
    };
    // The task is read against the router in force now; it runs on the one
    // in force as it begins (the same, but for a reload in between).
    let task = match self::task(&gateway.router(), &headers, body) {
        Ok(task) => task,
        Err(response) => return response,
    };
    let id = format!("chatcmpl-sy{:016x}", fastrand::u64(..));
    if !task.streamed {
        // Dropping this future (the caller hung up) drops the attempt with it.
        let served = gateway
            .session
            .serve(task, CancellationToken::new(), &|_| {});
        return match served.await {
            Ok(answer) => Json(openai::completion(
                &id,
                now_secs(),
                &model_of(&answer),
                &answer.text,
                answer.usage,
            ))
            .into_response(),
            Err(e) => route_error(&e),
        };
    }
    stream::stream_completion(gateway.session.clone(), task, id).await
}
