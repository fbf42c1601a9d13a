//! HTTPS against the simulator serving TLS with a CA made on the spot: trust through
//! `--ca-cert`, the platform roots alone (unknown CA), `--insecure`, name mismatch, an expired
//! certificate, mutual TLS, and connect/TLS times recorded on new connections only.

use std::path::PathBuf;
use std::sync::Arc;

use bench_sim::{LatencyMode, SelfSignedCa, SimConfig, SimServer, SimTls};
use bench_transport::{
    ChatMessage, ChatRequest, Client, ClientConfig, ErrorKind, RequestOptions, Role, TlsOptions,
};

/// A CA and the files made from it, in a temporary directory removed when the `Pki` drops.
struct Pki {
    dir: tempfile::TempDir,
    ca: SelfSignedCa,
}

impl Pki {
    fn new(tag: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix(&format!("bench-tls-{tag}-"))
            .tempdir()
            .unwrap();
        let ca = SelfSignedCa::new().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.cert_pem()).unwrap();
        Pki { dir, ca }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A client certificate and key written to files.
    fn client_files(&self) -> (PathBuf, PathBuf) {
        let (cert, key) = self.ca.client("bench-client").unwrap();
        let (c, k) = (
            self.dir.path().join("client.pem"),
            self.dir.path().join("client.key"),
        );
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        (c, k)
    }
}

async fn sim(tls: SimTls) -> SimServer {
    SimServer::start(SimConfig {
        mode: LatencyMode::Instant,
        tls: Some(Arc::new(tls)),
        ..SimConfig::default()
    })
    .await
    .unwrap()
}

fn client(base_url: String, tls: TlsOptions) -> Result<Client, bench_transport::Error> {
    let mut cfg = ClientConfig::new(base_url);
    cfg.auth = bench_transport::Auth::None;
    cfg.tls = tls;
    Client::new(cfg)
}

fn request() -> ChatRequest {
    let mut req = ChatRequest::new("bench-sim", vec![ChatMessage::new(Role::User, "Hello")]);
    req.pin_output(8, false);
    req
}

fn trusting(pki: &Pki) -> TlsOptions {
    TlsOptions {
        ca_cert: Some(pki.ca_file()),
        ..TlsOptions::default()
    }
}

#[tokio::test]
async fn a_turn_over_tls_with_the_ca_given_records_connect_and_handshake_once() {
    let pki = Pki::new("ok");
    let sim = sim(pki.ca.loopback_server().unwrap()).await;
    assert!(sim.base_url().starts_with("https://127.0.0.1:"));
    let c = client(sim.base_url(), trusting(&pki)).unwrap();
    let first = c
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap();
    assert_eq!(first.completion_tokens(), Some(8));
    let (connect, tls) = (first.connect.unwrap(), first.tls.unwrap());
    assert!(tls > std::time::Duration::ZERO);
    // Both happened after the request was "sent" from the caller's view: inside TTFT and e2e.
    assert!(connect + tls <= first.ttft.unwrap());
    let second = c
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap();
    assert_eq!(second.completion_tokens(), Some(8));
    assert_eq!(
        (second.connect, second.tls),
        (None, None),
        "reused connection"
    );
    assert_eq!(c.connections_opened(), 1);

    // `localhost` is in the certificate too, and is what SNI carries then.
    let by_name = sim.base_url().replace("127.0.0.1", "localhost");
    let c = client(by_name, trusting(&pki)).unwrap();
    c.chat(&request(), &RequestOptions::default())
        .await
        .unwrap();
    sim.shutdown().await;
}

#[tokio::test]
async fn plain_http_records_connect_but_no_handshake() {
    let sim = SimServer::start(SimConfig {
        mode: LatencyMode::Instant,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = client(sim.base_url(), TlsOptions::default()).unwrap();
    let t = c
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap();
    assert!(t.connect.is_some());
    assert_eq!(t.tls, None);
    sim.shutdown().await;
}

#[tokio::test]
async fn an_unknown_ca_is_one_tls_error_naming_the_host_and_the_reason() {
    let pki = Pki::new("unknown");
    let sim = sim(pki.ca.loopback_server().unwrap()).await;
    let c = client(sim.base_url(), TlsOptions::default()).unwrap();
    let e = c
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls);
    let text = e.to_string();
    assert!(!text.contains('\n'));
    assert!(
        text.contains(&sim.local_addr().to_string()) && text.contains("unknown CA"),
        "{text}"
    );

    // --insecure accepts it (and the stream is still measured as usual).
    let c = client(
        sim.base_url(),
        TlsOptions {
            insecure: true,
            ..TlsOptions::default()
        },
    )
    .unwrap();
    let t = c
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap();
    assert_eq!(t.completion_tokens(), Some(8));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_name_mismatch_and_an_expired_certificate_are_named() {
    let pki = Pki::new("names");
    let sim1 = sim(pki.ca.server(&["other.example"]).unwrap()).await;
    let e = client(sim1.base_url(), trusting(&pki))
        .unwrap()
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls);
    assert!(e.to_string().contains("name mismatch"), "{e}");
    sim1.shutdown().await;

    let sim2 = sim(pki.ca.expired_server(&["127.0.0.1"]).unwrap()).await;
    let e = client(sim2.base_url(), trusting(&pki))
        .unwrap()
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls);
    assert!(e.to_string().contains("expired"), "{e}");
    sim2.shutdown().await;
}

#[tokio::test]
async fn a_server_requiring_a_client_certificate() {
    let pki = Pki::new("mtls");
    let tls = pki
        .ca
        .loopback_server()
        .unwrap()
        .require_client_certs(&pki.ca_file())
        .unwrap();
    let sim = sim(tls).await;

    // Without one: a TLS error saying so (in TLS 1.3 it arrives after the handshake, with the
    // first response bytes).
    let e = client(sim.base_url(), trusting(&pki))
        .unwrap()
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    assert!(e.to_string().contains("client certificate"), "{e}");

    // With one signed by the CA the server trusts: a normal turn.
    let (cert, key) = pki.client_files();
    let c = client(
        sim.base_url(),
        TlsOptions {
            client_cert: Some(cert),
            client_key: Some(key),
            ..trusting(&pki)
        },
    )
    .unwrap();
    let t = c
        .chat(&request(), &RequestOptions::default())
        .await
        .unwrap();
    assert_eq!(t.completion_tokens(), Some(8));
    sim.shutdown().await;
}

#[tokio::test]
async fn plain_http_to_a_tls_server_and_tls_to_a_plain_server_fail_clearly() {
    let plain = SimServer::start(SimConfig {
        mode: LatencyMode::Instant,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let https_to_plain = plain.base_url().replace("http://", "https://");
    let e = client(
        https_to_plain,
        TlsOptions {
            insecure: true,
            ..TlsOptions::default()
        },
    )
    .unwrap()
    .chat(&request(), &RequestOptions::default())
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    plain.shutdown().await;
}

#[test]
fn bad_tls_files_fail_when_the_client_is_built() {
    let e = client(
        "https://127.0.0.1:1".into(),
        TlsOptions {
            ca_cert: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRequest);
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    let e = client(
        "https://127.0.0.1:1".into(),
        TlsOptions {
            client_cert: Some("c.pem".into()),
            ..TlsOptions::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("--client-key"), "{e}");
}

#[tokio::test]
async fn every_endpoint_streams_over_tls() {
    let pki = Pki::new("endpoints");
    let sim = SimServer::start(SimConfig {
        mode: LatencyMode::Instant,
        reasoning_tokens: 2,
        tls: Some(Arc::new(pki.ca.loopback_server().unwrap())),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = client(sim.base_url(), trusting(&pki)).unwrap();
    for endpoint in bench_transport::Endpoint::ALL {
        let opts = RequestOptions {
            endpoint,
            ..RequestOptions::default()
        };
        let body = request().to_endpoint_body(endpoint).unwrap();
        let t = c.chat_body(body, true, &opts).await.unwrap();
        assert_eq!(t.completion_tokens(), Some(8), "{endpoint}");
        assert_eq!(t.chunk_offsets.len(), 8, "{endpoint}");
        if endpoint != bench_transport::Endpoint::Completions {
            assert_eq!(t.reasoning_chunks, 2, "{endpoint}");
        }
    }
    assert_eq!(
        c.connections_opened(),
        1,
        "one TLS connection carried them all"
    );
    sim.shutdown().await;
}
