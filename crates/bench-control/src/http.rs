//! The HTTP side: routes, the token check, body limits, JSON errors, the SSE body, the
//! dashboard's files.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::ApiError;
use crate::runs::{Control, Found};
use bench_rundir::{RunKind, Secrets, files};

/// Request bodies above this are refused (413).
pub const MAX_BODY: usize = 1 << 20;

/// A client has this long to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

type Body = UnsyncBoxBody<Bytes, Infallible>;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const STYLE_CSS: &str = include_str!("../assets/style.css");

/// What every connection shares.
pub(crate) struct App {
    pub control: Arc<Control>,
    pub token: Option<String>,
    pub keepalive: Duration,
}

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `v` as a JSON response, every secret the control plane knows replaced by `***`.
fn json(status: StatusCode, v: &impl serde::Serialize, secrets: &Secrets) -> Response<Body> {
    let body = match serde_json::to_value(v) {
        Ok(mut v) => {
            secrets.scrub_json(&mut v);
            serde_json::to_vec(&v).unwrap_or_else(|_| b"{}".to_vec())
        }
        Err(_) => b"{}".to_vec(),
    };
    let mut r = full(status, "application/json", body);
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn error(e: &ApiError, secrets: &Secrets) -> Response<Body> {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = serde_json::json!({ "error": e.message });
    if let Some(a) = &e.active {
        body["active"] = a.clone().into();
    }
    json(status, &body, secrets)
}

fn query<'a>(req: &'a Request<Incoming>, key: &str) -> Option<String> {
    let q: &'a str = req.uri().query()?;
    form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

fn authorized(app: &App, req: &Request<Incoming>) -> bool {
    let Some(token) = &app.token else {
        return true;
    };
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or_else(|| query(req, "access_token"));
    given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(token.as_bytes())))
}

async fn route(app: Arc<App>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/" | "/index.html") => {
            return full(StatusCode::OK, "text/html; charset=utf-8", INDEX_HTML);
        }
        (&Method::GET, "/assets/app.js") => {
            return full(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS);
        }
        (&Method::GET, "/assets/style.css") => {
            return full(StatusCode::OK, "text/css; charset=utf-8", STYLE_CSS);
        }
        (&Method::GET, "/healthz") => return full(StatusCode::OK, "text/plain", "ok\n"),
        _ => {}
    }
    let secrets = app.control.secrets();
    if !(path.starts_with("/api/") || path == "/metrics") {
        return error(&ApiError::new(404, format!("no route {path}")), &secrets);
    }
    if !authorized(&app, &req) {
        let mut r = error(
            &ApiError::new(
                401,
                "a token is required: Authorization: Bearer TOKEN (or ?access_token= for \
                 EventSource)"
                    .into(),
            ),
            &secrets,
        );
        r.headers_mut()
            .insert("www-authenticate", HeaderValue::from_static("Bearer"));
        return r;
    }
    match api(&app, req, &method, &path, &secrets).await {
        Ok(r) => r,
        // A run's start adds its secrets: an error about it is scrubbed with them too.
        Err(e) => error(&e, &app.control.secrets()),
    }
}

fn not_allowed(method: &Method, path: &str) -> ApiError {
    ApiError::new(405, format!("{method} is not allowed on {path}"))
}

async fn api(
    app: &App,
    req: Request<Incoming>,
    method: &Method,
    path: &str,
    secrets: &Secrets,
) -> Result<Response<Body>, ApiError> {
    let c = &app.control;
    if path == "/metrics" {
        if method != Method::GET {
            return Err(not_allowed(method, path));
        }
        let text = match c.current() {
            Some(run) => run.live.prometheus(),
            None => "# EOF\n".into(),
        };
        return Ok(full(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            text,
        ));
    }
    let rest = path.trim_start_matches("/api/");
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["runs"] | ["runs", ""] => match *method {
            Method::GET => Ok(json(
                StatusCode::OK,
                &serde_json::json!({
                    "active": c.active().map(|a| a.id.clone()),
                    "runs": c.list(),
                }),
                secrets,
            )),
            Method::POST => {
                let body = read_body(req).await?;
                let entry = c.start(&body)?;
                let mut r = json(StatusCode::CREATED, &entry.view(), &c.secrets());
                if let Ok(v) = HeaderValue::from_str(&format!("/api/runs/{}", entry.id)) {
                    r.headers_mut().insert(LOCATION, v);
                }
                Ok(r)
            }
            _ => Err(not_allowed(method, path)),
        },
        ["runs", id] => {
            if method != Method::GET {
                return Err(not_allowed(method, path));
            }
            Ok(json(StatusCode::OK, &c.find(id)?.view(), secrets))
        }
        ["runs", id, "events"] => {
            if method != Method::GET {
                return Err(not_allowed(method, path));
            }
            let found = c.find(id)?;
            let last = last_event_id(&req)?;
            let log = found.log();
            if last > 0 && log.is_closed() && last >= log.last_id() {
                // After the end: 204 tells EventSource not to reconnect.
                let mut r = Response::new(Full::new(Bytes::new()).boxed_unsync());
                *r.status_mut() = StatusCode::NO_CONTENT;
                return Ok(r);
            }
            let body = StreamBody::new(
                log.stream(last, app.keepalive)
                    .map(|b| Ok::<_, Infallible>(Frame::data(b))),
            );
            let mut r = Response::new(BodyExt::boxed_unsync(body));
            let h = r.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            h.insert("x-accel-buffering", HeaderValue::from_static("no"));
            Ok(r)
        }
        ["runs", id, "result"] => {
            if method != Method::GET {
                return Err(not_allowed(method, path));
            }
            let found = c.find(id)?;
            let name = match found.kind() {
                RunKind::Replay => files::RESULT,
                RunKind::Journeys => files::JOURNEYS_REPORT,
                RunKind::Sweep => bench_run::sweep::SWEEP_JSON,
            };
            let file = found.dir().join(name);
            match std::fs::read(&file) {
                // Written scrubbed; a directory another process wrote may not be.
                Ok(bytes) if secrets.leaks(&String::from_utf8_lossy(&bytes)) => {
                    match serde_json::from_slice::<serde_json::Value>(&bytes) {
                        Ok(v) => Ok(json(StatusCode::OK, &v, secrets)),
                        Err(_) => Ok(full(
                            StatusCode::OK,
                            "application/json",
                            secrets.scrub(&String::from_utf8_lossy(&bytes)).into_owned(),
                        )),
                    }
                }
                Ok(bytes) => Ok(full(StatusCode::OK, "application/json", bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ApiError::new(
                    404,
                    format!(
                        "run {id} has no {name} yet (status {})",
                        serde_json::to_value(found.view().status)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    ),
                )),
                Err(e) => Err(ApiError::new(
                    500,
                    format!("cannot read {}: {e}", file.display()),
                )),
            }
        }
        ["runs", id, "cancel"] => {
            if method != Method::POST {
                return Err(not_allowed(method, path));
            }
            match c.find(id)? {
                Found::Live(e) => {
                    if e.cancel() {
                        Ok(json(StatusCode::ACCEPTED, &e.view(), secrets))
                    } else {
                        Err(ApiError::new(409, format!("run {id} has already ended")))
                    }
                }
                Found::Disk(_) => Err(ApiError::new(
                    409,
                    format!("run {id} is not running in this bench serve"),
                )),
            }
        }
        _ => Err(ApiError::new(404, format!("no route {path}"))),
    }
}

fn last_event_id(req: &Request<Incoming>) -> Result<u64, ApiError> {
    let raw = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| query(req, "last_event_id"));
    match raw.as_deref().map(str::trim) {
        None | Some("") => Ok(0),
        Some(v) => v.parse().map_err(|_| {
            ApiError::new(
                400,
                format!("Last-Event-ID {v:?} is not an event id (a whole number)"),
            )
        }),
    }
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            413,
            format!("the request body is larger than {MAX_BODY} bytes"),
        )
    };
    // A declared length over the limit is refused before a byte of the body is read (the
    // client gets its answer at once, not after sending a megabyte into a closing connection).
    if hyper::body::Body::size_hint(req.body()).lower() > MAX_BODY as u64 {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(ApiError::new(
            400,
            format!("cannot read the request body: {e}"),
        )),
    }
}

/// Accepts connections until `shutdown` resolves.
pub(crate) async fn accept(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (stream, _peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(route(app, req).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}
