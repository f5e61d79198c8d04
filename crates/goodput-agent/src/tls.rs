//! TLS between agents with pinned certificates: an address of the mesh
//! with `tls_sha256` in the configuration is an agent that serves its API
//! over HTTPS with the certificate of that SHA-256 fingerprint, and every
//! other agent checks exactly that fingerprint when it calls it — no
//! certificate authority. The certificate is the agent's own
//! (`--tls-cert`/`--tls-key`), or one made once and kept beside the archive.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

pub use goodput_engine::tls::fingerprint;

/// A fingerprint as configured (hex, colons and case ignored), or why not.
pub(crate) fn read_pin(text: &str) -> Result<[u8; 32], String> {
    let hex: String = text.chars().filter(|c| *c != ':').collect();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("'{text}' is not hex"))?;
    bytes
        .try_into()
        .map_err(|_| format!("'{text}' is not a SHA-256 fingerprint (64 hex digits)"))
}

/// The agent's certificate and key: the files given, or the pair kept
/// beside the archive (made on first use, for `names`).
pub(crate) fn identity(
    cert_key: Option<(&Path, &Path)>,
    archive: &Path,
    names: &[String],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let (cert, key): (PathBuf, PathBuf) = match cert_key {
        Some((c, k)) => (c.into(), k.into()),
        None => {
            let mut c = archive.as_os_str().to_owned();
            c.push(".tls-cert.pem");
            let mut k = archive.as_os_str().to_owned();
            k.push(".tls-key.pem");
            let (c, k) = (PathBuf::from(c), PathBuf::from(k));
            if !c.exists() || !k.exists() {
                let mut names = names.to_vec();
                names.push("localhost".into());
                let made = rcgen::generate_simple_self_signed(names)
                    .map_err(|e| format!("cannot make a certificate: {e}"))?;
                if let Some(dir) = c.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                }
                write_private(&k, made.key_pair.serialize_pem().as_bytes())?;
                std::fs::write(&c, made.cert.pem())
                    .map_err(|e| format!("cannot write {}: {e}", c.display()))?;
            }
            (c, k)
        }
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .map_err(|e| format!("cannot read {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad certificate in {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("no certificate in {}", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key)
        .map_err(|e| format!("cannot read a private key from {}: {e}", key.display()))?;
    Ok((chain, key))
}

/// Writes a private key readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(bytes)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The server side of the API's TLS.
pub(crate) fn acceptor(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<TlsAcceptor, String> {
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key do not fit: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

/// A client that trusts exactly the certificate with this fingerprint
/// (the engine's pinned trust).
pub(crate) fn pinned_client_config(pin: [u8; 32]) -> rustls::ClientConfig {
    let shared = goodput_engine::tls::client_config(&goodput_engine::tls::Trust::Pinned(pin))
        .expect("a pinned configuration needs no file");
    (*shared).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_read_with_or_without_colons() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let with_colons: String = hex
            .as_bytes()
            .chunks(2)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(read_pin(hex).unwrap(), read_pin(&with_colons).unwrap());
        assert_eq!(read_pin(hex).unwrap()[31], 0xff);
        assert!(read_pin("abcd").unwrap_err().contains("64 hex digits"));
        assert!(read_pin("zz").unwrap_err().contains("not hex"));
    }
}
