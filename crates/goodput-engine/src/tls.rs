//! TLS for the echo load test and the TLS echo service (rustls with the
//! ring provider). A server without a certificate gets a self-signed ECDSA
//! P-256 one for localhost, 127.0.0.1 and ::1, generated at start (rcgen).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use crate::EngineError;

/// ring, with AES-128-GCM first: what quinn perf prefers (QUIC's own
/// Initial packets use it), with 10 AES rounds per block against the 14 of
/// rustls's default first choice, AES-256-GCM. A rustls server follows
/// the client's order, so a client of ours no longer talks a quinn perf
/// server into AES-256 (and a benchmark into measuring the cipher).
fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.sort_by_key(|s| match s.suite() {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 => 1,
        _ => 2,
    });
    Arc::new(p)
}

fn config_err(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Config(format!("{what}: {e}"))
}

/// A server configuration from PEM files, or with a generated self-signed
/// certificate when none are given.
pub fn server_config(cert_key: Option<(&Path, &Path)>) -> Result<Arc<ServerConfig>, EngineError> {
    let (chain, key) = match cert_key {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .map_err(|e| config_err(&format!("cannot read {}", cert.display()), e))?
                .collect::<Result<_, _>>()
                .map_err(|e| config_err(&format!("bad certificate in {}", cert.display()), e))?;
            if chain.is_empty() {
                return Err(EngineError::Config(format!(
                    "no certificate in {}",
                    cert.display()
                )));
            }
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| config_err(&format!("cannot read a private key from {}", key.display()), e))?;
            (chain, key)
        }
        None => {
            let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
            let c = rcgen::generate_simple_self_signed(names)
                .map_err(|e| config_err("cannot generate a certificate", e))?;
            let key = PrivateKeyDer::try_from(c.key_pair.serialize_der())
                .map_err(|e| config_err("generated key", e))?;
            (vec![c.cert.der().clone()], key)
        }
    };
    let cfg = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| config_err("TLS versions", e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| config_err("certificate and key do not fit", e))?;
    Ok(Arc::new(cfg))
}

/// How the client checks the server's certificate.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Accept any certificate (`--insecure`): the connection is encrypted
    /// but the server is not authenticated.
    Anything,
    /// Certificates that chain to the CA certificates in this PEM file.
    CaFile(std::path::PathBuf),
    /// Certificates that chain to the system's trusted roots.
    System,
    /// Exactly the certificate with this SHA-256 fingerprint (no chain,
    /// no name: the agent's pinned peers).
    Pinned([u8; 32]),
}

impl Trust {
    /// The trust a client's options ask for, the same for every kind: the
    /// CA file when one is given, any certificate with `insecure`, else the
    /// system's roots.
    pub fn of(ca: Option<&std::path::Path>, insecure: bool) -> Self {
        match (ca, insecure) {
            (Some(p), _) => Trust::CaFile(p.to_owned()),
            (None, true) => Trust::Anything,
            (None, false) => Trust::System,
        }
    }
}

/// The TLS server name a client checks the certificate against, the same
/// for every kind: `sni` when given, else the host as written (brackets
/// off; an IP address is checked as an IP address).
pub fn name_for(host: &str, sni: Option<&str>) -> String {
    match sni {
        Some(n) => n.to_owned(),
        None => host.trim_start_matches('[').trim_end_matches(']').to_owned(),
    }
}

/// A client configuration.
pub fn client_config(trust: &Trust) -> Result<Arc<ClientConfig>, EngineError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| config_err("TLS versions", e))?;
    let cfg = match trust {
        Trust::Anything => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ByFingerprint {
                provider: provider(),
                pin: None,
            }))
            .with_no_client_auth(),
        Trust::Pinned(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ByFingerprint {
                provider: provider(),
                pin: Some(*pin),
            }))
            .with_no_client_auth(),
        Trust::CaFile(p) => {
            let mut roots = RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(p)
                .map_err(|e| config_err(&format!("cannot read {}", p.display()), e))?;
            for c in certs {
                let c = c.map_err(|e| config_err(&format!("bad certificate in {}", p.display()), e))?;
                roots
                    .add(c)
                    .map_err(|e| config_err(&format!("unusable CA certificate in {}", p.display()), e))?;
            }
            if roots.is_empty() {
                return Err(EngineError::Config(format!("no certificate in {}", p.display())));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::System => {
            let mut roots = RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(EngineError::Config(
                    "no trusted root certificates found on this system (use `ca` FILE or `insecure`)".into(),
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    Ok(Arc::new(cfg))
}

/// The name to send as SNI and to check the certificate against.
pub fn server_name(name: &str) -> Result<ServerName<'static>, EngineError> {
    ServerName::try_from(name.to_owned())
        .map_err(|e| config_err(&format!("'{name}' as a TLS server name"), e))
}

/// A certificate's SHA-256 fingerprint, lower-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `--insecure` (no pin): any certificate is accepted; with a pin, only
/// the certificate of that SHA-256 fingerprint. Signatures are checked
/// either way, so the handshake itself is sound.
#[derive(Debug)]
struct ByFingerprint {
    provider: Arc<CryptoProvider>,
    pin: Option<[u8; 32]>,
}

impl ServerCertVerifier for ByFingerprint {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(pin) = self.pin else {
            return Ok(ServerCertVerified::assertion());
        };
        if ring::digest::digest(&ring::digest::SHA256, end_entity.as_ref()).as_ref() == pin {
            return Ok(ServerCertVerified::assertion());
        }
        Err(rustls::Error::General(format!(
            "the certificate's SHA-256 is {}, not the pinned {}",
            fingerprint(end_entity.as_ref()),
            pin.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
