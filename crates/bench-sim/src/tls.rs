//! HTTPS for the simulator: a certificate and key from PEM files, or a throwaway CA made at
//! start (`bench sim --tls-self-signed CA_FILE`) so the whole stack runs over TLS offline.
//! Optionally client certificates are required (mutual TLS) and checked against a CA.

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::SimError;

/// The simulator's TLS identity: a certificate chain, its key, and optionally the CA client
/// certificates must be signed by.
pub struct SimTls {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_ca: Option<Vec<CertificateDer<'static>>>,
}

impl std::fmt::Debug for SimTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("SimTls")
            .field("certificates", &self.chain.len())
            .field("client_certificates_required", &self.client_ca.is_some())
            .finish_non_exhaustive()
    }
}

fn tls_err(msg: impl Into<String>) -> SimError {
    SimError::Tls(msg.into())
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, SimError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls_err(format!("{what} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(tls_err(format!(
            "{what} {}: no PEM certificate in the file",
            path.display()
        )));
    }
    Ok(certs)
}

impl SimTls {
    /// A certificate chain and its private key, both PEM files.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<SimTls, SimError> {
        let chain = read_certs(cert, "--tls-cert")?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| tls_err(format!("--tls-key {}: {e}", key.display())))?;
        Ok(SimTls {
            chain,
            key,
            client_ca: None,
        })
    }

    /// From PEM text (a chain and a key).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<SimTls, SimError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| tls_err(format!("certificate: {e}")))?;
        if chain.is_empty() {
            return Err(tls_err("certificate: no PEM certificate"));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| tls_err(format!("key: {e}")))?;
        Ok(SimTls {
            chain,
            key,
            client_ca: None,
        })
    }

    /// Requires every client to present a certificate signed by a CA in `ca_pem_file`.
    pub fn require_client_certs(mut self, ca_pem_file: &Path) -> Result<SimTls, SimError> {
        self.client_ca = Some(read_certs(ca_pem_file, "--tls-client-ca")?);
        Ok(self)
    }

    /// Requires client certificates signed by the CA in `ca_pem` (PEM text).
    pub fn require_client_certs_pem(mut self, ca_pem: &str) -> Result<SimTls, SimError> {
        let certs = CertificateDer::pem_slice_iter(ca_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| tls_err(format!("client CA: {e}")))?;
        self.client_ca = Some(certs);
        Ok(self)
    }

    /// The acceptor for the listening socket (HTTP/1.1 over ALPN).
    pub(crate) fn acceptor(&self) -> Result<tokio_rustls::TlsAcceptor, SimError> {
        Ok(tokio_rustls::TlsAcceptor::from(self.server_config()?))
    }

    /// The rustls server configuration the simulator serves with (HTTP/1.1 over ALPN), for a
    /// test server of one's own with the same identity.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, SimError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(e.to_string()))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(cas) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in cas {
                    roots
                        .add(c.clone())
                        .map_err(|e| tls_err(format!("client CA: {e}")))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| tls_err(format!("client CA: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| tls_err(format!("certificate and key: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A certificate authority made on the spot, for offline TLS: it signs the simulator's server
/// certificate and, for mutual-TLS tests, client certificates. Its certificate (PEM) is what a
/// client passes as `--ca-cert`.
pub struct SelfSignedCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for SelfSignedCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfSignedCa").finish_non_exhaustive()
    }
}

fn gen_err(e: rcgen::Error) -> SimError {
    tls_err(format!("generating a certificate: {e}"))
}

/// Valid from a day ago for `days` days.
fn validity(params: &mut CertificateParams, from_days_ago: i64, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(from_days_ago);
    params.not_after = params.not_before + time::Duration::days(days);
}

impl SelfSignedCa {
    /// A new CA ("bench-sim test CA"), valid for ten years.
    pub fn new() -> Result<SelfSignedCa, SimError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "bench-sim test CA");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        validity(&mut params, 1, 3650);
        let key = KeyPair::generate().map_err(gen_err)?;
        let cert = params.self_signed(&key).map_err(gen_err)?;
        Ok(SelfSignedCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.pem
    }

    fn leaf(
        &self,
        names: &[&str],
        purpose: ExtendedKeyUsagePurpose,
        expired: bool,
    ) -> Result<(String, String), SimError> {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).map_err(gen_err)?;
        if let Some(first) = names.first() {
            params
                .distinguished_name
                .push(DnType::CommonName, first.as_str());
        }
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![purpose];
        if expired {
            validity(&mut params, 30, 10);
        } else {
            validity(&mut params, 1, 3650);
        }
        let key = KeyPair::generate().map_err(gen_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(gen_err)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// A server identity for `names` (DNS names or IP addresses) signed by this CA.
    pub fn server(&self, names: &[&str]) -> Result<SimTls, SimError> {
        let (cert, key) = self.leaf(names, ExtendedKeyUsagePurpose::ServerAuth, false)?;
        SimTls::from_pem(&cert, &key)
    }

    /// A server identity whose certificate expired twenty days ago (for tests).
    pub fn expired_server(&self, names: &[&str]) -> Result<SimTls, SimError> {
        let (cert, key) = self.leaf(names, ExtendedKeyUsagePurpose::ServerAuth, true)?;
        SimTls::from_pem(&cert, &key)
    }

    /// The names a loopback simulator answers to: `localhost`, `127.0.0.1`, `::1`.
    pub fn loopback_server(&self) -> Result<SimTls, SimError> {
        self.server(&["localhost", "127.0.0.1", "::1"])
    }

    /// A client certificate and key (PEM) signed by this CA, for mutual TLS.
    pub fn client(&self, name: &str) -> Result<(String, String), SimError> {
        self.leaf(&[name], ExtendedKeyUsagePurpose::ClientAuth, false)
    }
}
