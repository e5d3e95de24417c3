//! A minimal HTTP/1.1 file server on 127.0.0.1 for the pull tests: serves
//! fixed bodies, honours (or deliberately ignores) `Range: bytes=N-`, and
//! records every request so tests can see what was asked for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub path: String,
    pub range: Option<String>,
    pub accept: Option<String>,
}

#[derive(Clone)]
struct Route {
    body: Arc<Vec<u8>>,
    content_type: &'static str,
    honor_range: bool,
}

#[derive(Default)]
struct State {
    routes: HashMap<String, Route>,
    requests: Vec<Request>,
}

/// Stops when dropped with its runtime (the accept loop is a task on it).
#[derive(Clone)]
pub(crate) struct TestServer {
    base: String,
    state: Arc<Mutex<State>>,
}

impl TestServer {
    pub(crate) async fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let state = Arc::new(Mutex::new(State::default()));
        let accepting = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(respond(stream, Arc::clone(&accepting)));
            }
        });
        TestServer { base, state }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn serve(&self, path: &str, content_type: &'static str, body: Vec<u8>) {
        self.add(path, content_type, body, true);
    }

    /// Like a server (or proxy) that answers every request with the whole file.
    pub(crate) fn serve_ignoring_range(&self, path: &str, body: Vec<u8>) {
        self.add(path, "application/octet-stream", body, false);
    }

    fn add(&self, path: &str, content_type: &'static str, body: Vec<u8>, honor_range: bool) {
        let route = Route {
            body: Arc::new(body),
            content_type,
            honor_range,
        };
        self.state
            .lock()
            .unwrap()
            .routes
            .insert(path.to_owned(), route);
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    pub(crate) fn requests_for(&self, path: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|request| request.path == path)
            .collect()
    }
}

async fn respond(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let route = {
        let mut state = state.lock().unwrap();
        state.requests.push(request.clone());
        state.routes.get(&request.path).cloned()
    };
    let (status, content_type, extra, body): (&str, &str, String, &[u8]) = match &route {
        None => ("404 Not Found", "text/plain", String::new(), b"not found"),
        Some(route) => answer(route, &request),
    };
    let response_head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(response_head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.shutdown().await;
}

/// The request line and headers, read up to the blank line.
async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut head = Vec::new();
    let mut byte = [0; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.lines();
    let path = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("/")
        .to_owned();
    let mut headers = HashMap::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    Some(Request {
        path,
        range: headers.remove("range"),
        accept: headers.remove("accept"),
    })
}

/// Status, content type, extra headers and body for `request` of `route`,
/// honouring a `Range` from a byte where the route does.
fn answer<'r>(route: &'r Route, request: &Request) -> (&'static str, &'r str, String, &'r [u8]) {
    let length = route.body.len();
    let start = request
        .range
        .as_deref()
        .filter(|_| route.honor_range)
        .and_then(|range| range.strip_prefix("bytes="))
        .and_then(|range| range.strip_suffix('-'))
        .and_then(|start| start.parse::<usize>().ok());
    match start {
        None => ("200 OK", route.content_type, String::new(), &route.body[..]),
        Some(start) if start >= length => (
            "416 Range Not Satisfiable",
            "text/plain",
            format!("Content-Range: bytes */{length}\r\n"),
            b"",
        ),
        Some(start) => (
            "206 Partial Content",
            route.content_type,
            format!("Content-Range: bytes {start}-{}/{length}\r\n", length - 1),
            &route.body[start..],
        ),
    }
}
