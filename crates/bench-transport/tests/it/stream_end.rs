//! How a stream's connection ends does not decide whether the turn is complete; its terminator
//! does. Loopback servers, plain and TLS, that end a stream the ways real servers do: closing a
//! TLS connection without a close_notify, closing before the last chunk of the chunked encoding,
//! resetting after the end; and the same servers cutting the stream before its terminator.

use std::net::SocketAddr;
use std::time::Duration;

use bench_sim::SelfSignedCa;
use bench_transport::{
    Auth, ChatMessage, ChatRequest, Client, ClientConfig, Endpoint, ErrorKind, RequestOptions,
    Role, TlsOptions,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CHAT: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"},\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n",
    "data: [DONE]\n\n"
);

const MESSAGES: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":9,\"output_tokens\":0}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" world\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":2}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
);

/// How the server frames the body and ends the connection.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// No length, no chunking: the body is everything until the connection closes; over TLS
    /// the close comes without a close_notify.
    CloseDelimited,
    /// Chunked, the connection closed before the last (empty) chunk.
    ChunkedWithoutLastChunk,
    /// Chunked, the connection reset (TCP RST) before the last chunk.
    Reset,
}

/// Reads a request's head and Content-Length body.
async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> bool {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match s.read(&mut tmp).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => buf.extend_from_slice(&tmp[..n]),
                }
            }
            return true;
        }
        match s.read(&mut tmp).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

/// Writes `body` as an event stream framed as `end` says (the connection is then closed by
/// the caller).
async fn write_stream<S: AsyncWrite + Unpin>(s: &mut S, body: &str, end: End) {
    let mut out = String::from("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n");
    match end {
        End::CloseDelimited => out.push_str("connection: close\r\n\r\n"),
        End::ChunkedWithoutLastChunk | End::Reset => {
            out.push_str("transfer-encoding: chunked\r\n\r\n");
        }
    }
    s.write_all(out.as_bytes()).await.unwrap();
    for event in body.split_inclusive("\n\n") {
        let piece = match end {
            End::CloseDelimited => event.to_owned(),
            _ => format!("{:x}\r\n{event}\r\n", event.len()),
        };
        s.write_all(piece.as_bytes()).await.unwrap();
        s.flush().await.unwrap();
    }
    s.flush().await.unwrap();
    if end == End::Reset {
        // Time for the client to read all of it: a reset drops what it has not read yet.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Ends the TCP connection: a reset for [`End::Reset`], a FIN otherwise.
fn close(tcp: TcpStream, end: End) {
    if end == End::Reset {
        socket2::SockRef::from(&tcp)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    }
    drop(tcp);
}

/// A server answering every request with `body` framed and ended as `end` says; over TLS when
/// `tls` is given, the TCP connection then closed under the TLS session (no close_notify).
async fn serve(body: &'static str, end: End, tls: Option<tokio_rustls::TlsAcceptor>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => {
                        if read_request(&mut tcp).await {
                            write_stream(&mut tcp, body, end).await;
                        }
                        close(tcp, end);
                    }
                    Some(acceptor) => {
                        let Ok(mut s) = acceptor.accept(tcp).await else {
                            return;
                        };
                        if read_request(&mut s).await {
                            write_stream(&mut s, body, end).await;
                        }
                        // The TCP connection alone: no close_notify is ever sent.
                        let (tcp, _) = s.into_inner();
                        close(tcp, end);
                    }
                }
            });
        }
    });
    addr
}

/// A CA made on the spot and a TLS acceptor for 127.0.0.1 signed by it; the CA file lives as
/// long as the returned directory.
fn tls_server() -> (tokio_rustls::TlsAcceptor, tempfile::TempDir) {
    let ca = SelfSignedCa::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.cert_pem()).unwrap();
    let config = ca.loopback_server().unwrap().server_config().unwrap();
    (tokio_rustls::TlsAcceptor::from(config), dir)
}

/// A client of `addr`, over TLS trusting `ca`'s CA when given.
fn client(addr: SocketAddr, ca: Option<&tempfile::TempDir>) -> Client {
    let scheme = if ca.is_some() { "https" } else { "http" };
    let mut cfg = ClientConfig::new(format!("{scheme}://{addr}"));
    cfg.auth = Auth::None;
    cfg.timeout = Duration::from_secs(5);
    cfg.tls = TlsOptions {
        ca_cert: ca.map(|d| d.path().join("ca.pem")),
        ..TlsOptions::default()
    };
    Client::new(cfg).unwrap()
}

/// One streamed turn of `endpoint`.
async fn turn(
    client: &Client,
    endpoint: Endpoint,
) -> Result<bench_transport::TurnOutcome, bench_transport::Error> {
    let mut req = ChatRequest::new("m", vec![ChatMessage::new(Role::User, "hi")]);
    req.pin_output(2, false);
    let opts = RequestOptions {
        endpoint,
        ..RequestOptions::default()
    };
    let body = req.to_endpoint_body(endpoint).unwrap();
    client.chat_body(body, true, &opts).await
}

/// `body` cut before its terminator (its last event left out).
fn cut(body: &'static str) -> &'static str {
    let last = body.trim_end().rfind("\n\n").unwrap();
    &body[..last + 2]
}

#[tokio::test]
async fn a_stream_that_reached_its_terminator_is_ok_however_the_connection_then_goes() {
    let (acceptor, ca) = tls_server();
    for (body, endpoint) in [(CHAT, Endpoint::Chat), (MESSAGES, Endpoint::Messages)] {
        for end in [
            End::CloseDelimited,
            End::ChunkedWithoutLastChunk,
            End::Reset,
        ] {
            for tls in [false, true] {
                let addr = serve(body, end, tls.then(|| acceptor.clone())).await;
                let o = turn(&client(addr, tls.then_some(&ca)), endpoint)
                    .await
                    .unwrap_or_else(|e| panic!("{endpoint:?} {end:?} tls={tls}: {e}"));
                assert_eq!(o.content, "Hello world", "{endpoint:?} {end:?} tls={tls}");
                assert_eq!(o.chunk_offsets.len(), 2, "{endpoint:?} {end:?} tls={tls}");
                assert_eq!(
                    o.usage.as_ref().and_then(|u| u.completion_tokens),
                    Some(2),
                    "{endpoint:?} {end:?} tls={tls}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_stream_closed_before_its_terminator_is_incomplete_and_a_reset_an_io_error() {
    let (acceptor, ca) = tls_server();
    for (body, endpoint, missing) in [
        (CHAT, Endpoint::Chat, "[DONE]"),
        (MESSAGES, Endpoint::Messages, "message_stop"),
    ] {
        let body = cut(body);
        for tls in [false, true] {
            for end in [End::CloseDelimited, End::ChunkedWithoutLastChunk] {
                let addr = serve(body, end, tls.then(|| acceptor.clone())).await;
                let e = turn(&client(addr, tls.then_some(&ca)), endpoint)
                    .await
                    .unwrap_err();
                assert_eq!(
                    e.kind(),
                    ErrorKind::Incomplete,
                    "{endpoint:?} {end:?} tls={tls}: {e}"
                );
                assert!(
                    e.to_string()
                        .contains(&format!("stream ended before {missing}")),
                    "{e}"
                );
            }
        }
        // A reset mid-stream is the connection failing, not the stream ending.
        let addr = serve(body, End::Reset, None).await;
        let e = turn(&client(addr, None), endpoint).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "{endpoint:?}: {e}");
    }
}

#[tokio::test]
async fn a_connection_that_went_after_a_complete_stream_is_not_reused() {
    // Every answer ends with the connection closed under TLS: each turn opens its own (a
    // pooled dead connection would cost the next turn a redial).
    let (acceptor, ca) = tls_server();
    let addr = serve(CHAT, End::CloseDelimited, Some(acceptor)).await;
    let c = client(addr, Some(&ca));
    for _ in 0..3 {
        let o = turn(&c, Endpoint::Chat).await.unwrap();
        assert_eq!(
            o.redials, 0,
            "a dead connection was pooled and failed the next turn"
        );
        assert!(o.connect.is_some(), "each turn connects anew");
    }
    assert_eq!(c.connections_opened(), 3);
}
