//! TLS flags: a client's trust and certificate (`run`, `probe`, `journeys`) and the
//! simulator's identity (`sim`).

use std::path::PathBuf;
use std::sync::Arc;

use bench_sim::{SelfSignedCa, SimTls};
use bench_transport::TlsOptions;
use clap::Args;

use crate::CliError;

/// How an `https://` server is trusted and how this client proves who it is.
#[derive(Debug, Clone, Default, Args)]
pub struct TlsArgs {
    /// https://: also trust this CA certificate (PEM), beside the platform's roots.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    pub ca_cert: Option<PathBuf>,
    /// https://: do not verify the server's certificate (encrypted, not authenticated).
    /// Prints one warning; a run records it in run.json.
    #[arg(long, help_heading = "TLS")]
    pub insecure: bool,
    /// https://: client certificate chain (PEM) for a server that requires one (mutual TLS).
    #[arg(
        long,
        value_name = "FILE",
        requires = "client_key",
        help_heading = "TLS"
    )]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        value_name = "FILE",
        requires = "client_cert",
        help_heading = "TLS"
    )]
    pub client_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The options these flags give, paths made absolute (a resumed run may start elsewhere).
    pub fn options(&self) -> TlsOptions {
        let abs = |p: &Option<PathBuf>| p.as_deref().map(crate::run::absolute);
        TlsOptions {
            ca_cert: abs(&self.ca_cert),
            insecure: self.insecure,
            client_cert: abs(&self.client_cert),
            client_key: abs(&self.client_key),
        }
    }
}

/// `bench sim` over HTTPS.
#[derive(Debug, Clone, Default, Args)]
pub struct SimTlsArgs {
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls_self_signed",
        help_heading = "TLS"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert", help_heading = "TLS")]
    pub tls_key: Option<PathBuf>,
    /// Serve HTTPS with a certificate for localhost, 127.0.0.1 and ::1, made at start and
    /// signed by a new CA whose certificate is written to FILE (give it to clients as
    /// --ca-cert FILE).
    #[arg(long, value_name = "CA_FILE", help_heading = "TLS")]
    pub tls_self_signed: Option<PathBuf>,
    /// Require client certificates signed by this CA (mutual TLS).
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    pub tls_client_ca: Option<PathBuf>,
}

impl SimTlsArgs {
    /// The simulator's TLS identity, if HTTPS was asked for (writing the CA file of
    /// `--tls-self-signed`).
    pub fn identity(&self) -> Result<Option<Arc<SimTls>>, CliError> {
        let usage = |e: bench_sim::SimError| CliError::Usage(e.to_string());
        let tls = match (&self.tls_cert, &self.tls_key, &self.tls_self_signed) {
            (Some(c), Some(k), _) => SimTls::from_pem_files(c, k).map_err(usage)?,
            (_, _, Some(ca_file)) => {
                let ca = SelfSignedCa::new().map_err(usage)?;
                std::fs::write(ca_file, ca.cert_pem()).map_err(|e| {
                    CliError::Usage(format!(
                        "--tls-self-signed {}: cannot write the CA certificate: {e}",
                        ca_file.display()
                    ))
                })?;
                ca.loopback_server().map_err(usage)?
            }
            _ if self.tls_client_ca.is_some() => {
                return Err(CliError::Usage(
                    "--tls-client-ca needs --tls-cert/--tls-key or --tls-self-signed".into(),
                ));
            }
            _ => return Ok(None),
        };
        let tls = match &self.tls_client_ca {
            Some(ca) => tls.require_client_certs(ca).map_err(usage)?,
            None => tls,
        };
        Ok(Some(Arc::new(tls)))
    }
}
