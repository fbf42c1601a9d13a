//! HTTPS end to end: `bench sim --tls-self-signed` and the client flags of `bench probe` and
//! `bench run` (`--ca-cert`, `--insecure`, `--client-cert`/`--client-key`).

use std::path::Path;

use bench_sim::SelfSignedCa;
use serde_json::Value;

use crate::{random_run_args, read_jsonl, run, run_json, serial, spawn_sim, stop_sim, tempdir};

fn one_line_stderr(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "one line expected: {err}");
    err
}

#[test]
fn probe_over_tls_trusts_only_the_ca_it_is_given() {
    let _serial = serial();
    let dir = tempdir("tls-probe");
    let ca = dir.join("ca.pem");
    let (sim, url) = spawn_sim(&["--instant", "--tls-self-signed", ca.to_str().unwrap()]);
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let v = run_json(&[
        "probe",
        "--base-url",
        &url,
        "--ca-cert",
        ca.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(v["completion_tokens"], 32);
    assert!(v["tls_ms"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["connect_ms"].as_f64().is_some(), "{v}");

    // The platform's roots do not know the simulator's CA: exit 1, one line naming why.
    let out = run(&["probe", "--base-url", &url]);
    assert_eq!(out.status.code(), Some(1));
    let err = one_line_stderr(&out);
    assert!(
        err.contains("tls") && err.contains("unknown CA") && err.contains("127.0.0.1"),
        "{err}"
    );

    // --insecure: it works, with one warning.
    let out = run(&["probe", "--base-url", &url, "--insecure"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = one_line_stderr(&out);
    assert!(err.contains("--insecure"), "{err}");
    stop_sim(sim);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let _serial = serial();
    let dir = tempdir("tls-mtls");
    let server_ca = dir.join("server-ca.pem");
    // The CA client certificates must come from, and one client certificate of it.
    let clients = SelfSignedCa::new().unwrap();
    let client_ca = dir.join("client-ca.pem");
    std::fs::write(&client_ca, clients.cert_pem()).unwrap();
    let (cert, key) = clients.client("bench-ci").unwrap();
    let (cert_file, key_file) = (dir.join("client.pem"), dir.join("client.key"));
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    let (sim, url) = spawn_sim(&[
        "--instant",
        "--tls-self-signed",
        server_ca.to_str().unwrap(),
        "--tls-client-ca",
        client_ca.to_str().unwrap(),
    ]);
    let ca = server_ca.to_str().unwrap();
    let out = run(&["probe", "--base-url", &url, "--ca-cert", ca]);
    assert_eq!(out.status.code(), Some(1));
    let err = one_line_stderr(&out);
    assert!(err.contains("client certificate"), "{err}");

    let v = run_json(&[
        "probe",
        "--base-url",
        &url,
        "--ca-cert",
        ca,
        "--client-cert",
        cert_file.to_str().unwrap(),
        "--client-key",
        key_file.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(v["completion_tokens"], 32);

    // A certificate without its key is a usage error.
    let out = run(&[
        "probe",
        "--base-url",
        &url,
        "--client-cert",
        cert_file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    stop_sim(sim);
    std::fs::remove_dir_all(dir).unwrap();
}

fn turns(run_dir: &Path) -> Vec<Value> {
    read_jsonl(&run_dir.join("turns.jsonl"))
}

#[test]
fn a_run_over_tls_records_handshakes_and_stops_at_an_untrusted_server() {
    let _serial = serial();
    let dir = tempdir("tls-run");
    let ca = dir.join("ca.pem");
    let (sim, url) = spawn_sim(&["--instant", "--tls-self-signed", ca.to_str().unwrap()]);

    // Trusted: every turn ok; each of the 2 workers opened at most one connection, so one or
    // two turns carry a handshake time and the others none.
    let ok_dir = dir.join("ok");
    let args = random_run_args(
        3,
        4,
        &ok_dir,
        &[
            "--base-url",
            &url,
            "--ca-cert",
            ca.to_str().unwrap(),
            "-c",
            "2",
            "-q",
        ],
    );
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = turns(&ok_dir);
    assert_eq!(t.len(), 12);
    assert!(t.iter().all(|r| r["status"] == "ok"));
    let with_tls: Vec<&Value> = t.iter().filter(|r| r.get("tls_ms").is_some()).collect();
    assert!(
        (1..=2).contains(&with_tls.len()),
        "one handshake per connection"
    );
    for r in &with_tls {
        assert!(r["tls_ms"].as_f64().unwrap() > 0.0);
        assert!(r["tls_ms"].as_f64().unwrap() < r["ttft_ms"].as_f64().unwrap());
        assert!(r["connect_ms"].as_f64().is_some());
    }

    // Untrusted: the run stops at once (waiting does not fix a certificate), exit 1, with the
    // one-line reason; no turn was played.
    let bad_dir = dir.join("bad");
    let args = random_run_args(2, 2, &bad_dir, &["--base-url", &url, "-c", "1", "-q"]);
    let out = run(&args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tls:") && err.contains("unknown CA"), "{err}");
    assert!(!bad_dir.join("turns.jsonl").exists() || turns(&bad_dir).is_empty());

    // --insecure: one warning line, and run.json says so.
    let insecure_dir = dir.join("insecure");
    let args = random_run_args(
        1,
        2,
        &insecure_dir,
        &["--base-url", &url, "--insecure", "-q"],
    );
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("--insecure").count(), 1, "{stderr}");
    let run_json: Value =
        serde_json::from_slice(&std::fs::read(insecure_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        run_json["spec"]["target"]["url"]["tls"]["insecure"], true,
        "{run_json}"
    );
    stop_sim(sim);
    std::fs::remove_dir_all(dir).unwrap();
}
