//! The client never passes on a secret a server echoes: its `Authorization` value, its
//! secret-named headers' values and `ClientConfig::secrets` are `***` in every error it
//! returns, whether the echo is in a 401's body or in an error event of a 200 stream, and
//! wherever the 200-byte cut of the detail falls.

use std::time::Duration;

use bench_transport::{
    Auth, ChatMessage, ChatRequest, Client, ClientConfig, Endpoint, RequestOptions, Role, Secrets,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const KEY: &str = "sk-SECRET-key-0001";
const API_KEY: &str = "xk-SECRET-hdr-0002";
const CUSTOM: &str = "cu-SECRET-cfg-0003";

/// A server answering every request with `respond(request head)`.
async fn serve(respond: fn(&str) -> String) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                let _ = s.write_all(respond(&head).as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

fn client(url: &str) -> Client {
    let mut cfg = ClientConfig::new(url);
    cfg.auth = Auth::Bearer(KEY.into());
    cfg.headers = vec![
        ("X-Api-Key".into(), API_KEY.into()),
        ("X-Custom".into(), CUSTOM.into()),
    ];
    // X-Custom's name says nothing: the caller (--secret-header) makes it secret.
    cfg.secrets = Secrets::default().with(CUSTOM);
    cfg.timeout = Duration::from_secs(5);
    Client::new(cfg).unwrap()
}

fn request() -> ChatRequest {
    ChatRequest::new("m", vec![ChatMessage::new(Role::User, "hi")])
}

/// The request's headers, one per line, padded by `pad` bytes.
fn echo(head: &str, pad: usize) -> String {
    let headers: Vec<&str> = head.lines().skip(1).filter(|l| !l.is_empty()).collect();
    format!("{} {}", ".".repeat(pad), headers.join(" | "))
}

fn assert_scrubbed(text: &str) {
    for s in [KEY, API_KEY, CUSTOM] {
        assert!(!text.contains(s), "{s} in {text}");
    }
    assert!(!text.contains("SECRET"), "part of a secret in {text}");
    assert!(text.contains("***"), "{text}");
}

#[tokio::test]
async fn a_401_echoing_the_headers_is_reported_without_them_wherever_the_cut_falls() {
    for pad in [0usize, 20, 40, 60, 80, 100, 120, 140, 160, 180] {
        // The same client for every pad would pool; the pad goes in via the path instead.
        let url = serve(|head| {
            let pad: usize = head
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.trim_start_matches('/').split('/').next())
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            let body = echo(head, pad);
            format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
        })
        .await;
        let c = client(&format!("{url}/{pad}"));
        let e = c
            .chat(&request(), &RequestOptions::default())
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("HTTP 401"), "{text}");
        // Whole and scrubbed, or left out: never a piece of a secret.
        assert!(!text.contains("SECRET"), "pad {pad}: {text}");
        if pad == 0 {
            assert_scrubbed(&text);
        }
    }
}

#[tokio::test]
async fn an_error_event_echoing_the_key_in_a_200_stream_is_reported_without_it() {
    let url = serve(|head| {
        let msg = serde_json::json!({"error": {"message": format!("bad key: {}", echo(head, 0))}});
        let body = format!("data: {msg}\n\n");
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    })
    .await;
    let e = client(&url)
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_scrubbed(&e.to_string());
}

#[tokio::test]
async fn the_messages_key_from_the_request_options_is_scrubbed_too() {
    let url = serve(|head| {
        let body = echo(head, 0);
        format!(
            "HTTP/1.1 401 Unauthorized\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    })
    .await;
    let anthropic = "sk-ant-SECRET-0004";
    let mut cfg = ClientConfig::new(url.as_str());
    cfg.auth = Auth::None;
    cfg.secrets = Secrets::default().with(anthropic);
    let c = Client::new(cfg).unwrap();
    let opts = RequestOptions {
        endpoint: Endpoint::Messages,
        headers: bench_transport::bodies::endpoint_headers(
            Endpoint::Messages,
            Some(anthropic.into()),
        )
        .unwrap(),
        ..RequestOptions::default()
    };
    let e = c.chat(&request(), &opts).await.unwrap_err();
    let text = e.to_string();
    assert!(text.contains("x-api-key: ***"), "{text}");
    assert!(!text.contains("SECRET"), "{text}");
}

#[test]
fn debug_never_shows_a_header_value() {
    let mut cfg = ClientConfig::new("http://127.0.0.1:9");
    cfg.auth = Auth::Bearer(KEY.into());
    cfg.headers = vec![
        ("X-Custom".into(), CUSTOM.into()),
        ("X-Api-Key".into(), API_KEY.into()),
    ];
    cfg.secrets = Secrets::default().with(CUSTOM);
    // The client marks secret header values sensitive: its Debug shows `Sensitive`.
    let text = format!("{cfg:?} {:?}", Client::new(cfg.clone()).unwrap());
    assert!(text.contains("X-Custom"), "{text}");
    assert!(!text.contains("SECRET"), "{text}");
    // Nor as the numbers of its bytes (a byte buffer's `Debug`).
    for secret in [KEY, CUSTOM, API_KEY] {
        let bytes = format!("{:?}", &secret.as_bytes()[..6]);
        let numbers = bytes.trim_matches(['[', ']']);
        assert!(!text.contains(numbers), "{secret} as bytes in {text}");
    }
}
