//! A TLS client handshake that reads the server's facts whatever its
//! certificate: the chain is verified as usual, but the verdict is kept
//! instead of ending the handshake, so an expired or misnamed
//! certificate still shows its dates and names. The caller decides what
//! an invalid chain means (`goodput http` sends nothing over it unless
//! `insecure`; `goodput tls` counts it as a failure).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use goodput_core::http::{days_left, TlsFacts, MAX_CHAIN_READ};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Where the trusted roots come from.
pub(crate) fn roots(ca: Option<&Path>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(p) => {
            let certs = CertificateDer::pem_file_iter(p)
                .map_err(|e| format!("cannot read `ca` {}: {e}", p.display()))?;
            for c in certs {
                let c = c.map_err(|e| format!("bad certificate in `ca` {}: {e}", p.display()))?;
                roots
                    .add(c)
                    .map_err(|e| format!("unusable CA certificate in `ca` {}: {e}", p.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("no certificate in `ca` {}", p.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err("no trusted root certificates found on this system (give `ca`)".into());
            }
        }
    }
    Ok(roots)
}

/// Verifies as webpki does and keeps the verdict.
#[derive(Debug)]
struct Recording {
    inner: Arc<WebPkiServerVerifier>,
    provider: Arc<CryptoProvider>,
    verdict: Mutex<Option<Result<(), String>>>,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .map(|_| ())
            .map_err(|e| in_words(&e, server_name));
        if let Ok(mut v) = self.verdict.lock() {
            *v = Some(got);
        }
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
            &self.provider.signature_verification_algorithms,
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
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A verification error as a person would say it.
fn in_words(e: &rustls::Error, name: &ServerName<'_>) -> String {
    let name = match name {
        ServerName::DnsName(d) => d.as_ref().to_owned(),
        ServerName::IpAddress(a) => std::net::IpAddr::from(*a).to_string(),
        _ => "the server".to_owned(),
    };
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the certificate has expired".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the certificate is not valid yet".into()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("the certificate is not valid for the name {name}")
            }
            CertificateError::UnknownIssuer => "the certificate's issuer is not trusted".into(),
            CertificateError::BadSignature => "a certificate's signature does not verify".into(),
            CertificateError::Revoked => "the certificate is revoked".into(),
            other => format!("the certificate is not valid: {other:?}"),
        },
        other => other.to_string(),
    }
}

/// A failed handshake in words; rustls's own limit on a handshake
/// message (64 KiB) named as the limit it is.
fn handshake_error(e: &std::io::Error) -> String {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidMessage(rustls::InvalidMessage::HandshakePayloadTooLarge)) => {
            "the server's handshake message is over rustls's 64 KiB limit (a certificate chain far too long?)"
                .into()
        }
        _ => e.to_string(),
    }
}

/// What a caller asks of one handshake.
pub(crate) struct Handshake<'a> {
    /// The trusted roots.
    pub roots: Arc<RootCertStore>,
    /// The name sent as SNI and checked.
    pub server_name: &'a str,
    /// ALPN protocols offered.
    pub alpn: Vec<Vec<u8>>,
}

/// Handshakes over `tcp`; the stream and what it showed, or why it
/// failed, in words.
pub(crate) async fn handshake(
    h: Handshake<'_>,
    tcp: TcpStream,
) -> Result<(TlsStream<TcpStream>, TlsFacts), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(h.roots, provider.clone())
        .build()
        .map_err(|e| format!("the trusted roots: {e}"))?;
    let recording = Arc::new(Recording {
        inner,
        provider: provider.clone(),
        verdict: Mutex::new(None),
    });
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(recording.clone())
        .with_no_client_auth();
    cfg.alpn_protocols = h.alpn;
    let name = ServerName::try_from(h.server_name.to_owned())
        .map_err(|e| format!("'{}' as a TLS server name: {e}", h.server_name))?;
    let stream = TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {}", handshake_error(&e)))?;
    let verdict = recording
        .verdict
        .lock()
        .ok()
        .and_then(|mut v| v.take())
        .unwrap_or_else(|| Err("the server sent no certificate to verify".into()));
    let (_, conn) = stream.get_ref();
    let mut facts = TlsFacts {
        protocol: match conn.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".into(),
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".into(),
            Some(v) => format!("{v:?}"),
            None => "unknown".into(),
        },
        cipher: conn
            .negotiated_cipher_suite()
            .map(|s| format!("{:?}", s.suite()))
            .unwrap_or_default(),
        alpn: conn
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
        chain_valid: verdict.is_ok(),
        verify_error: verdict.err(),
        ..TlsFacts::default()
    };
    if let Some(chain) = conn.peer_certificates() {
        read_chain(&mut facts, chain, now_unix());
    }
    Ok((stream, facts))
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64
}

/// The leaf's names and dates, and the earliest end of the chain's first
/// [`MAX_CHAIN_READ`] certificates.
fn read_chain(facts: &mut TlsFacts, chain: &[CertificateDer<'_>], now: i64) {
    use x509_parser::prelude::*;
    facts.chain_length = chain.len() as u64;
    let mut earliest: Option<i64> = None;
    for (i, der) in chain.iter().take(MAX_CHAIN_READ).enumerate() {
        let Ok((_, cert)) = X509Certificate::from_der(der.as_ref()) else {
            if i == 0 {
                facts.subject = "(a certificate that does not parse)".into();
            }
            continue;
        };
        let not_after = cert.validity().not_after.timestamp();
        earliest = Some(earliest.map_or(not_after, |e| e.min(not_after)));
        if i == 0 {
            facts.subject = cert.subject().to_string();
            facts.issuer = cert.issuer().to_string();
            facts.not_after_unix = not_after;
            facts.days_left = days_left(not_after, now);
            if let Ok(Some(san)) = cert.subject_alternative_name() {
                facts.names = san
                    .value
                    .general_names
                    .iter()
                    .take(64)
                    .filter_map(|g| match g {
                        GeneralName::DNSName(d) => Some((*d).to_owned()),
                        GeneralName::IPAddress(b) => match b.len() {
                            4 => <[u8; 4]>::try_from(*b)
                                .ok()
                                .map(|a| std::net::IpAddr::from(a).to_string()),
                            16 => <[u8; 16]>::try_from(*b)
                                .ok()
                                .map(|a| std::net::IpAddr::from(a).to_string()),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
            }
        }
    }
    facts.chain_days_left = earliest.map_or(facts.days_left, |e| days_left(e, now));
}
