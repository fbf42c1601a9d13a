//! TLS for `https://` base URLs, through rustls (no OpenSSL).
//!
//! Trust: the platform's roots (`rustls-native-certs`: on Linux the system bundle, honouring
//! `SSL_CERT_FILE`/`SSL_CERT_DIR`) plus any `--ca-cert` file, or nothing at all with
//! `--insecure` (every certificate accepted; signatures are still checked, so the session is
//! still encrypted, just not authenticated). A client certificate and key (PEM) give mutual TLS.
//! SNI carries the base URL's host; ALPN offers `http/1.1` only, which is what the client speaks.
//!
//! A failed handshake becomes one line naming the host and the reason ("unknown CA", "name
//! mismatch", "expired", "the server requires a client certificate") with
//! `ErrorKind::Tls`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind};

/// How `https://` servers are trusted and how the client proves who it is. Paths only: the
/// files are read when a client is built and their contents are never stored or printed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsOptions {
    /// Extra trusted roots (PEM, one or more certificates), beside the platform's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
    /// Accept any server certificate (self-signed, expired, another name). The connection is
    /// encrypted but not authenticated.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// Client certificate chain (PEM) for servers that require one (mutual TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
}

impl TlsOptions {
    /// True when nothing is set (the default: platform roots, no client certificate).
    pub fn is_default(&self) -> bool {
        self == &TlsOptions::default()
    }

    /// Checks the combination (a certificate needs its key and the other way round).
    pub fn validate(&self) -> Result<(), Error> {
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => Err(invalid("--client-cert needs --client-key")),
            (None, Some(_)) => Err(invalid("--client-key needs --client-cert")),
            _ => Ok(()),
        }
    }

    /// The rustls client configuration these options describe.
    pub(crate) fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, Error> {
        self.validate()?;
        let provider = provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(format!("TLS setup: {e}")))?;
        let builder = if self.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
        } else {
            let mut roots = RootCertStore::empty();
            roots.extend(native_roots().roots.iter().cloned());
            if let Some(path) = &self.ca_cert {
                let certs = read_certs(path, "--ca-cert")?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(invalid(format!(
                        "--ca-cert {}: no usable CA certificate in the file",
                        path.display()
                    )));
                }
            }
            builder.with_root_certificates(roots)
        };
        let mut config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "--client-cert")?;
                let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    invalid(format!(
                        "--client-key {}: no private key read ({})",
                        key.display(),
                        pem_error(&e)
                    ))
                })?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| invalid(format!("--client-cert/--client-key: {e}")))?
            }
            _ => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidRequest, msg)
}

fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of that kind".to_owned(),
        other => other.to_string(),
    }
}

fn read_certs(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(format!("{flag} {}: {}", path.display(), pem_error(&e))))?;
    if certs.is_empty() {
        return Err(invalid(format!(
            "{flag} {}: no PEM certificate in the file",
            path.display()
        )));
    }
    Ok(certs)
}

/// The crypto provider every TLS connection of the workspace uses (ring).
pub fn provider() -> Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

struct NativeRoots {
    roots: Vec<rustls::pki_types::TrustAnchor<'static>>,
}

/// The platform's roots, loaded once per process (reading the system bundle takes a few ms).
fn native_roots() -> &'static NativeRoots {
    static R: OnceLock<NativeRoots> = OnceLock::new();
    R.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::debug!(error = %e, "skipped a platform root certificate");
        }
        let mut store = RootCertStore::empty();
        let (added, ignored) = store.add_parsable_certificates(found.certs);
        tracing::debug!(added, ignored, "platform root certificates loaded");
        NativeRoots { roots: store.roots }
    })
}

/// `--insecure`: any certificate is accepted, handshake signatures are still verified.
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The rustls error somewhere in `e`'s source chain, if any (hyper and tokio-rustls wrap it in
/// `io::Error`s).
pub(crate) fn find_rustls_error<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(r) = inner.downcast_ref::<rustls::Error>()
        {
            return Some(r);
        }
        cur = err.source();
    }
    None
}

/// A short reason for a TLS failure a user can act on.
pub(crate) fn reason(e: &rustls::Error) -> String {
    use rustls::AlertDescription as A;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => "unknown CA: the server's certificate is not signed by a trusted root (pass --ca-cert FILE with its CA, or --insecure)".to_owned(),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "name mismatch: the server's certificate is not valid for this host".to_owned()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "expired: the server's certificate is past its validity".to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "not yet valid: the server's certificate starts later (check the clocks)".to_owned()
            }
            CertificateError::Revoked => "the server's certificate is revoked".to_owned(),
            CertificateError::BadSignature => "the server's certificate has a bad signature".to_owned(),
            other => format!("invalid server certificate: {other:?}"),
        },
        rustls::Error::AlertReceived(A::CertificateRequired) => {
            "the server requires a client certificate (pass --client-cert and --client-key)".to_owned()
        }
        rustls::Error::AlertReceived(
            A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied,
        ) => "the server refused the client certificate".to_owned(),
        rustls::Error::AlertReceived(A::HandshakeFailure) => {
            "the server ended the handshake (no common protocol or cipher, or it wants a client certificate)".to_owned()
        }
        rustls::Error::AlertReceived(a) => format!("the server sent the alert {a:?}"),
        rustls::Error::InvalidMessage(_) => {
            "the server did not answer with TLS (is it plain http://?)".to_owned()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_certificate_needs_its_key() {
        let o = TlsOptions {
            client_cert: Some("c.pem".into()),
            ..TlsOptions::default()
        };
        assert!(
            o.validate()
                .unwrap_err()
                .to_string()
                .contains("--client-key")
        );
        let o = TlsOptions {
            client_key: Some("k.pem".into()),
            ..TlsOptions::default()
        };
        assert!(
            o.validate()
                .unwrap_err()
                .to_string()
                .contains("--client-cert")
        );
        assert!(TlsOptions::default().is_default());
    }

    #[test]
    fn unreadable_files_are_named() {
        let o = TlsOptions {
            ca_cert: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        let e = o.client_config().unwrap_err().to_string();
        assert!(e.contains("--ca-cert /nonexistent/ca.pem"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let o = TlsOptions {
            ca_cert: Some(empty.clone()),
            ..TlsOptions::default()
        };
        let e = o.client_config().unwrap_err().to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn reasons_are_actionable() {
        let r = reason(&rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        assert!(r.starts_with("unknown CA"), "{r}");
        let r = reason(&rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName,
        ));
        assert!(r.starts_with("name mismatch"), "{r}");
        let r = reason(&rustls::Error::InvalidCertificate(
            CertificateError::Expired,
        ));
        assert!(r.starts_with("expired"), "{r}");
    }
}
