//! owamp's passphrase files (`owamp-server.pfs`, `owping -k`), as i2util's
//! `pfstore` writes them: one key per line, an identity, white space, and
//! the passphrase's octets in hexadecimal. Blank lines and lines whose
//! first non-blank character is `#` are ignored.

/// A passphrase file that cannot be read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct PfsError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub what: &'static str,
}

/// The longest identity on the wire (the Set-Up-Response's KeyID field).
pub const MAX_IDENTITY: usize = 80;
/// The longest passphrase read (owamp has no limit; this keeps a hostile
/// file from sizing memory).
pub const MAX_PASSPHRASE: usize = 1024;

/// One key: an identity and its passphrase.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    /// The identity (the KeyID).
    pub identity: String,
    /// The passphrase's octets.
    pub passphrase: Vec<u8>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({:?}, …)", self.identity)
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads every key of a file's text.
pub fn parse(text: &str) -> Result<Vec<Key>, PfsError> {
    let mut keys = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |what| PfsError { line: i + 1, what };
        let mut parts = line.split_whitespace();
        let identity = parts.next().ok_or(err("no identity"))?;
        let hex = parts.next().ok_or(err("an identity without a passphrase"))?;
        if parts.next().is_some() {
            return Err(err("more than an identity and a passphrase"));
        }
        if identity.len() > MAX_IDENTITY {
            return Err(err("an identity longer than 80 octets"));
        }
        if hex.len() > 2 * MAX_PASSPHRASE {
            return Err(err("a passphrase longer than 1024 octets"));
        }
        let passphrase = unhex(hex).ok_or(err("a passphrase that is not hexadecimal octets"))?;
        keys.push(Key {
            identity: identity.to_string(),
            passphrase,
        });
    }
    Ok(keys)
}

/// The passphrase of one identity in a file's keys.
pub fn find<'a>(keys: &'a [Key], identity: &str) -> Option<&'a Key> {
    keys.iter().find(|k| k.identity == identity)
}

/// One line of a passphrase file, as `pfstore` writes it.
pub fn line(key: &Key) -> String {
    let hex: String = key.passphrase.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}\t{hex}\n", key.identity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_pfstore_writes_and_skips_comments() {
        let k = Key {
            identity: "alice".into(),
            passphrase: b"correct horse".to_vec(),
        };
        let text = format!("# keys\n\n{}  bob\t6869\n", line(&k));
        let keys = parse(&text).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(find(&keys, "alice").unwrap().passphrase, b"correct horse");
        assert_eq!(find(&keys, "bob").unwrap().passphrase, b"hi");
        assert!(find(&keys, "carol").is_none());
    }

    #[test]
    fn refuses_what_is_not_a_key() {
        assert_eq!(parse("alice\n").unwrap_err().line, 1);
        assert_eq!(parse("#\nalice 6g\n").unwrap_err().line, 2);
        assert!(parse("alice 686\n").is_err());
        assert!(parse("alice 68 69\n").is_err());
        assert!(parse(&format!("{} 68\n", "x".repeat(81))).is_err());
    }
}
