//! Reading another server's answer (a peer agent's, a configuration
//! URL's, an archive's), never more of it than a cap.

/// A response's body, read chunk by chunk and refused (not read further)
/// once it passes `max` bytes: a peer's answer never costs more memory
/// than its limit, whatever it sends. `Err(None)`: too large;
/// `Err(Some(e))`: the transfer failed.
pub(crate) async fn body_capped(
    mut r: reqwest::Response,
    max: u64,
) -> Result<Vec<u8>, Option<reqwest::Error>> {
    if r.content_length().is_some_and(|n| n > max) {
        return Err(None);
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(Some)? {
        if (bytes.len() + chunk.len()) as u64 > max {
            return Err(None);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A JSON answer read with [`body_capped`]: `Null` when it is larger
/// than `max` bytes, cut off or not JSON (for the CLI's calls to an
/// agent, which never read an answer without bound).
pub async fn json_capped(r: reqwest::Response, max: u64) -> serde_json::Value {
    body_capped(r, max)
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}
