//! The client against tiny scripted loopback servers: stale keep-alive connections, errors of
//! every kind, timeouts, auth.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bench_transport::{
    Auth, ChatMessage, ChatRequest, Client, ClientConfig, ErrorKind, RequestOptions, Role,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves each accepted connection with `handler(stream, connection_index)`.
async fn serve<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(TcpStream, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((s, _)) = listener.accept().await {
            let h = handler.clone();
            tokio::spawn(h(s, n));
            n += 1;
        }
    });
    addr
}

/// Reads one HTTP/1.1 request (head + Content-Length body); returns the head, or None at EOF.
async fn read_request(s: &mut TcpStream) -> Option<String> {
    read_request_and_body(s).await.map(|(head, _)| head)
}

/// Reads one HTTP/1.1 request; returns its head and its Content-Length body, or None at EOF.
async fn read_request_and_body(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut tmp).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            return Some((head, buf[end + 4..end + 4 + len].to_vec()));
        }
        let n = s.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

const STREAM: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"},\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n",
    "data: [DONE]\n\n"
);

fn sse_response(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: keep-alive\r\ncontent-length: {}\r\n\r\n{}",
        body.len(),
        body
    )
}

fn request() -> ChatRequest {
    let mut r = ChatRequest::new("m", vec![ChatMessage::new(Role::User, "hi")]);
    r.pin_output(2, false);
    r
}

fn client(addr: SocketAddr) -> Client {
    let mut cfg = ClientConfig::new(format!("http://{addr}"));
    cfg.auth = Auth::None;
    cfg.timeout = Duration::from_secs(5);
    Client::new(cfg).unwrap()
}

#[tokio::test]
async fn stale_keep_alive_connections_are_redialed_without_losing_turns() {
    // Like llama.cpp: says keep-alive, then closes the connection. The close is made to race
    // with the client's next request deterministically: the server waits for the next request
    // to arrive and drops the connection without reading or answering it.
    let addr = serve(|mut s, _| async move {
        if read_request(&mut s).await.is_some() {
            s.write_all(sse_response(STREAM).as_bytes()).await.unwrap();
            let mut one = [0u8; 1];
            let _ = s.peek(&mut one).await; // the next request's first byte has arrived
            // dropped here: closed with unread data (RST)
        }
    })
    .await;
    let c = client(addr);
    for i in 0..6 {
        let out = c
            .chat(&request(), &RequestOptions::default())
            .await
            .unwrap_or_else(|e| panic!("turn {i} lost: {e}"));
        assert_eq!(out.content, "Hello world");
        assert_eq!(out.redials, u32::from(i > 0), "turn {i}");
    }
    assert_eq!(c.redials(), 5);
    assert_eq!(c.connections_opened(), 6);
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_not_written_to() {
    // Like uvicorn's keep-alive timeout: the answer says keep-alive, and the server closes the
    // connection a moment later. The next turn must see the close before it writes (no redial,
    // nothing counted as resent) and dial a new connection.
    let requests = Arc::new(AtomicUsize::new(0));
    let r = requests.clone();
    let addr = serve(move |mut s, _| {
        let r = r.clone();
        async move {
            if read_request(&mut s).await.is_some() {
                r.fetch_add(1, Ordering::SeqCst);
                s.write_all(sse_response(STREAM).as_bytes()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            } // closed (FIN) while the client holds it idle
        }
    })
    .await;
    let c = client(addr);
    for i in 0..3 {
        let out = c
            .chat(&request(), &RequestOptions::default())
            .await
            .unwrap_or_else(|e| panic!("turn {i}: {e}"));
        assert_eq!(out.content, "Hello world");
        assert_eq!((out.redials, out.resent), (0, 0), "turn {i}");
        assert!(out.connect.is_some(), "turn {i} opened its own connection");
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert_eq!(c.redials(), 0);
    assert_eq!(c.connections_opened(), 3);
    assert_eq!(requests.load(Ordering::SeqCst), 3, "each turn sent once");
}

#[tokio::test]
async fn chunked_answers_with_trailers_and_a_connection_close() {
    // Chunked with an extension and a trailer, on a kept-alive connection; then an answer
    // with `connection: close`, after which the client must not reuse the connection.
    let addr = serve(|mut s, _| async move {
        let mut turn = 0;
        while read_request(&mut s).await.is_some() {
            turn += 1;
            let close = turn == 2;
            let mut wire = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{}transfer-encoding: chunked\r\n\r\n",
                if close { "connection: close\r\n" } else { "" }
            );
            for piece in STREAM.as_bytes().chunks(37) {
                wire.push_str(&format!("{:x};ext=1\r\n", piece.len()));
                wire.push_str(std::str::from_utf8(piece).unwrap());
                wire.push_str("\r\n");
            }
            wire.push_str("0\r\nx-trailer: t\r\n\r\n");
            s.write_all(wire.as_bytes()).await.unwrap();
            if close {
                // Holds the connection open: only the header says it is done.
                tokio::time::sleep(Duration::from_secs(2)).await;
                return;
            }
        }
    })
    .await;
    let c = client(addr);
    for i in 0..3 {
        let out = c
            .chat(&request(), &RequestOptions::default())
            .await
            .unwrap_or_else(|e| panic!("turn {i}: {e}"));
        assert_eq!(out.content, "Hello world", "turn {i}");
        assert_eq!(out.completion_tokens(), Some(2));
        assert_eq!(out.redials, 0, "turn {i}");
    }
    assert_eq!(
        c.connections_opened(),
        2,
        "kept alive once, closed after `connection: close`"
    );
}

#[tokio::test]
async fn keep_alive_connections_are_reused() {
    let addr = serve(|mut s, _| async move {
        while read_request(&mut s).await.is_some() {
            s.write_all(sse_response(STREAM).as_bytes()).await.unwrap();
        }
    })
    .await;
    let c = client(addr);
    for _ in 0..5 {
        let out = c
            .chat(&request(), &RequestOptions::default())
            .await
            .unwrap();
        assert_eq!(out.completion_tokens(), Some(2));
        assert!(out.tpot().is_some());
    }
    assert_eq!(c.connections_opened(), 1);
    assert_eq!(c.redials(), 0);
}

#[tokio::test]
async fn a_fresh_connection_closed_without_answer_is_a_real_error() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let a = attempts.clone();
    let addr = serve(move |mut s, _| {
        let a = a.clone();
        async move {
            if read_request(&mut s).await.is_some() {
                a.fetch_add(1, Ordering::SeqCst);
            } // close without a response
        }
    })
    .await;
    let c = client(addr);
    let e = c
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "must not be re-sent");
    assert_eq!(c.redials(), 0);
}

#[tokio::test]
async fn http_500_reports_status_and_body_start() {
    let addr = serve(|mut s, _| async move {
        read_request(&mut s).await;
        let body = format!("{{\"error\":\"boom\"}}{}", "x".repeat(500));
        let resp = format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(resp.as_bytes()).await.unwrap();
    })
    .await;
    let e = client(addr)
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Status);
    assert_eq!(e.status().map(|s| s.as_u16()), Some(500));
    let text = e.to_string();
    assert!(text.contains("HTTP 500") && text.contains("boom"), "{text}");
    assert!(text.len() < 260, "body is cut at 200 bytes: {}", text.len());
}

#[tokio::test]
async fn reset_mid_stream_is_an_io_error() {
    let addr = serve(|mut s, _| async move {
        read_request(&mut s).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let ev = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
        let chunk = format!("{:x}\r\n{ev}\r\n", ev.len());
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(chunk.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // RST on drop (SO_LINGER 0), as a crashing server would.
        socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO)).unwrap();
    })
    .await;
    let e = client(addr)
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.to_string().contains("output chunks"), "{e}");
}

#[tokio::test]
async fn garbage_instead_of_http_or_sse() {
    let addr = serve(|mut s, _| async move {
        read_request(&mut s).await;
        s.write_all(b"\x00\x01garbage garbage\r\n\r\n")
            .await
            .unwrap();
    })
    .await;
    let e = client(addr)
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.to_string().contains("invalid HTTP"), "{e}");

    let addr = serve(|mut s, _| async move {
        read_request(&mut s).await;
        s.write_all(sse_response("not an event stream at all").as_bytes())
            .await
            .unwrap();
    })
    .await;
    let e = client(addr)
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedSse, "{e}");
}

#[tokio::test]
async fn timeout_and_connect_errors() {
    let addr = serve(|mut s, _| async move {
        read_request(&mut s).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await;
    let opts = RequestOptions {
        timeout: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let t = std::time::Instant::now();
    let e = client(addr).chat(&request(), &opts).await.unwrap_err();
    assert!(e.is_timeout(), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));

    // A port nobody listens on.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = l.local_addr().unwrap();
    drop(l);
    let e = client(dead)
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert!(e.is_connect(), "{e}");
}

#[tokio::test]
async fn auth_and_extra_headers_are_sent() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let addr = serve(move |mut s, _| {
        let tx = tx.clone();
        async move {
            if let Some(head) = read_request(&mut s).await {
                tx.send(head).unwrap();
                s.write_all(sse_response(STREAM).as_bytes()).await.unwrap();
            }
        }
    })
    .await;
    let mut cfg = ClientConfig::new(format!("http://{addr}/v1"));
    cfg.auth = Auth::Bearer("sk-test".into());
    cfg.headers = vec![("X-Team".into(), "infra".into())];
    let c = Client::new(cfg).unwrap();
    let opts = RequestOptions {
        headers: vec![(
            http::HeaderName::from_static("x-session-id"),
            http::HeaderValue::from_static("s1"),
        )],
        ..Default::default()
    };
    c.chat(&request(), &opts).await.unwrap();
    let head = rx.recv().await.unwrap().to_ascii_lowercase();
    assert!(
        head.starts_with("post /v1/chat/completions http/1.1"),
        "{head}"
    );
    assert!(head.contains("authorization: bearer sk-test"), "{head}");
    assert!(head.contains("x-team: infra"), "{head}");
    assert!(head.contains("x-session-id: s1"), "{head}");
}

#[tokio::test]
async fn credentials_in_the_base_url_are_basic_auth_and_never_in_errors() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let addr = serve(move |mut s, _| {
        let tx = tx.clone();
        async move {
            if let Some(head) = read_request(&mut s).await {
                tx.send(head).unwrap();
                s.write_all(sse_response(STREAM).as_bytes()).await.unwrap();
            }
        }
    })
    .await;
    // A percent-encoded `@` in the password, and an API key from the environment that the
    // URL's credentials win over.
    let mut cfg = ClientConfig::new(format!("http://alice:pa%40ss-9@{addr}/v1"));
    cfg.auth = Auth::Bearer("sk-env".into());
    let c = Client::new(cfg).unwrap();
    assert_eq!(c.base_url(), format!("http://{addr}"));
    c.chat(&request(), &RequestOptions::default())
        .await
        .unwrap();
    let head = rx.recv().await.unwrap();
    // base64("alice:pa@ss-9")
    assert!(
        head.contains("authorization: Basic YWxpY2U6cGFAc3MtOQ=="),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("host: {addr}\r\n")),
        "{head}"
    );
    // The password shows as *** in the errors the client returns, as written and decoded.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let c = Client::new(ClientConfig::new(format!(
        "http://alice:pa%40ss-9@127.0.0.1:{port}"
    )))
    .unwrap();
    let e = c
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.contains("pa%40ss-9") && !e.contains("pa@ss-9"), "{e}");
    let e = Client::new(ClientConfig::new("ftp://alice:pa%40ss-9@127.0.0.1:1"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("alice:***@"), "{e}");
    assert!(!e.contains("pa%40ss-9"), "{e}");
}

#[tokio::test]
async fn error_responses_keep_the_connection() {
    let addr = serve(|mut s, _| async move {
        while read_request(&mut s).await.is_some() {
            let body = "{\"error\":{\"message\":\"overloaded\"}}";
            let resp = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(resp.as_bytes()).await.unwrap();
        }
    })
    .await;
    let c = client(addr);
    for _ in 0..3 {
        let e = c
            .chat(&request(), &RequestOptions::default())
            .await
            .unwrap_err();
        assert_eq!(e.status().map(|s| s.as_u16()), Some(503));
    }
    assert_eq!(c.connections_opened(), 1);
}

#[tokio::test]
async fn request_with_sends_per_request_headers_and_body() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Vec<u8>)>();
    let addr = serve(move |mut s, _| {
        let tx = tx.clone();
        async move {
            while let Some(req) = read_request_and_body(&mut s).await {
                tx.send(req).unwrap();
                let body = "{\"error\":\"nope\"}";
                let resp = format!(
                    "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(resp.as_bytes()).await.unwrap();
            }
        }
    })
    .await;
    let c = client(addr);
    let headers = [
        (
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("multipart/form-data; boundary=xyz"),
        ),
        (
            http::HeaderName::from_static("x-trace"),
            http::HeaderValue::from_static("t1"),
        ),
    ];
    let r = c
        .request_with(
            http::Method::PUT,
            "/v1/things/7",
            &headers,
            bytes::Bytes::from_static(b"--xyz--\r\n"),
            None,
        )
        .await
        .unwrap();
    // A non-2xx status is a response, not an error.
    assert_eq!(r.status.as_u16(), 404);
    assert_eq!(&r.body[..], b"{\"error\":\"nope\"}");
    let (head, body) = rx.recv().await.unwrap();
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("put /v1/things/7 http/1.1"), "{head}");
    assert!(head.contains("x-trace: t1"), "{head}");
    // The per-request content type replaces the client's default one.
    assert!(
        head.contains("content-type: multipart/form-data; boundary=xyz"),
        "{head}"
    );
    assert!(!head.contains("application/json"), "{head}");
    assert_eq!(body, b"--xyz--\r\n");

    // The plain `request` still sends the client's JSON content type.
    c.request(http::Method::GET, "/a", bytes::Bytes::new(), None)
        .await
        .unwrap();
    let (head, _) = rx.recv().await.unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
}

#[tokio::test]
async fn the_content_type_decides_stream_or_json_whatever_its_case() {
    // A JSON answer to a streamed request, and a stream to a non-streamed one: the response's
    // content type (any case, with parameters) says how to read it.
    let json = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#;
    for (content_type, body, streamed) in [
        ("Application/JSON; Charset=UTF-8", json, false),
        ("TEXT/Event-Stream; charset=utf-8", STREAM, true),
    ] {
        let addr = serve(move |mut s, _| async move {
            if read_request(&mut s).await.is_some() {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                s.write_all(head.as_bytes()).await.unwrap();
                s.write_all(body.as_bytes()).await.unwrap();
            }
        })
        .await;
        let mut req = request();
        req.stream = !streamed;
        let out = client(addr)
            .chat(&req, &RequestOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{content_type}: {e}"));
        assert_eq!(out.content, "Hello world", "{content_type}");
        assert_eq!(out.streamed, streamed, "{content_type}");
        assert_eq!(
            out.usage.and_then(|u| u.completion_tokens),
            Some(2),
            "{content_type}"
        );
    }
}
