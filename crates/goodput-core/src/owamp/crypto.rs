//! The cryptography of OWAMP and TWAMP's authenticated and encrypted modes
//! (RFC 4656 §3.1, §3.4, §4.1.2; RFC 5357 §3.1, §4.1.2), as perfSONAR's
//! owamp does it:
//!
//! - the Set-Up-Response's Token is AES-128-CBC (IV zero) under a key
//!   derived from the shared passphrase with PBKDF2-HMAC-SHA1 (the
//!   greeting's salt and count, 16 octets out); it carries the challenge,
//!   the AES session key and the 32-octet HMAC session key;
//! - after Server-Start every control block is AES-CBC under the session
//!   key, chained across messages, one chain per direction: the client's
//!   starts at Client-IV, the server's at Server-IV;
//! - each direction keeps a running HMAC-SHA1 (truncated to 16 octets)
//!   under the HMAC session key over the clear blocks it has sent since its
//!   last digest; a message's HMAC block carries the digest and restarts
//!   it. Server-Start's last block is added without a digest, so the
//!   server's first Accept-Session covers it too;
//! - a test session's keys come from its SID: the AES key is the control
//!   AES key encrypted (one block) under the SID, the HMAC key the control
//!   HMAC key encrypted (CBC, IV zero) under the SID.
//!
//! In open mode nothing is encrypted and HMAC blocks are zero.

use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use aes::Aes128;
use hmac::{Hmac, Mac};
use sha1::Sha1;

type HmacSha1 = Hmac<Sha1>;

/// One AES block, and the unit every control message is made of.
pub const BLOCK: usize = 16;

/// The largest PBKDF2 iteration count a client accepts from a server's
/// greeting: a greeting may not make the client spin (owamp offers 2048).
pub const MAX_PBKDF2_COUNT: u32 = 1 << 20;

/// The keys a Token carries.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    /// AES-128 session key.
    pub aes: [u8; 16],
    /// HMAC-SHA1 session key.
    pub hmac: [u8; 32],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(…)")
    }
}

fn cbc_encrypt(key: &Aes128, iv: &mut [u8; BLOCK], buf: &mut [u8]) {
    debug_assert_eq!(buf.len() % BLOCK, 0);
    for block in buf.chunks_exact_mut(BLOCK) {
        for (b, v) in block.iter_mut().zip(iv.iter()) {
            *b ^= v;
        }
        key.encrypt_block(block.into());
        iv.copy_from_slice(block);
    }
}

fn cbc_decrypt(key: &Aes128, iv: &mut [u8; BLOCK], buf: &mut [u8]) {
    debug_assert_eq!(buf.len() % BLOCK, 0);
    let mut next = [0u8; BLOCK];
    for block in buf.chunks_exact_mut(BLOCK) {
        next.copy_from_slice(block);
        key.decrypt_block(block.into());
        for (b, v) in block.iter_mut().zip(iv.iter()) {
            *b ^= v;
        }
        *iv = next;
    }
}

fn token_key(passphrase: &[u8], salt: &[u8; 16], count: u32) -> Aes128 {
    let mut dk = [0u8; 16];
    pbkdf2::pbkdf2_hmac::<Sha1>(passphrase, salt, count, &mut dk);
    Aes128::new(&dk.into())
}

/// Builds the Set-Up-Response's Token: challenge, AES key and HMAC key,
/// encrypted under the passphrase's derived key.
pub fn seal_token(
    passphrase: &[u8],
    salt: &[u8; 16],
    count: u32,
    challenge: &[u8; 16],
    keys: &SessionKeys,
) -> [u8; 64] {
    let mut t = [0u8; 64];
    t[..16].copy_from_slice(challenge);
    t[16..32].copy_from_slice(&keys.aes);
    t[32..].copy_from_slice(&keys.hmac);
    cbc_encrypt(&token_key(passphrase, salt, count), &mut [0u8; 16], &mut t);
    t
}

/// Opens a Token: the challenge it answers and the session keys. Whether
/// the passphrase was right shows only in the challenge matching.
pub fn open_token(
    passphrase: &[u8],
    salt: &[u8; 16],
    count: u32,
    token: &[u8; 64],
) -> ([u8; 16], SessionKeys) {
    let mut t = *token;
    cbc_decrypt(&token_key(passphrase, salt, count), &mut [0u8; 16], &mut t);
    let mut challenge = [0u8; 16];
    challenge.copy_from_slice(&t[..16]);
    let mut keys = SessionKeys {
        aes: [0; 16],
        hmac: [0; 32],
    };
    keys.aes.copy_from_slice(&t[16..32]);
    keys.hmac.copy_from_slice(&t[32..]);
    (challenge, keys)
}

/// A control message's HMAC did not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the control message's HMAC does not match (wrong key, or altered on the way)")]
pub struct BadHmac;

struct Secured {
    aes: Aes128,
    hmac_key: [u8; 32],
    send_iv: [u8; BLOCK],
    recv_iv: [u8; BLOCK],
    send_mac: HmacSha1,
    recv_mac: HmacSha1,
}

/// One end's view of a control connection after Server-Start: what it
/// encrypts and authenticates on the way out and checks on the way in.
pub struct Channel {
    secured: Option<Box<Secured>>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.secured.is_some() {
            "Channel(secured)"
        } else {
            "Channel(open)"
        })
    }
}

fn new_mac(key: &[u8; 32]) -> HmacSha1 {
    <HmacSha1 as Mac>::new_from_slice(key).expect("HMAC takes any key length")
}

impl Channel {
    /// Open mode: nothing encrypted, HMAC blocks zero and unchecked.
    pub fn open() -> Self {
        Self { secured: None }
    }

    /// Authenticated or encrypted mode. `send_iv` is this end's IV (the
    /// client's Client-IV, the server's Server-IV), `recv_iv` the peer's.
    pub fn secured(keys: &SessionKeys, send_iv: [u8; BLOCK], recv_iv: [u8; BLOCK]) -> Self {
        Self {
            secured: Some(Box::new(Secured {
                aes: Aes128::new(&keys.aes.into()),
                hmac_key: keys.hmac,
                send_iv,
                recv_iv,
                send_mac: new_mac(&keys.hmac),
                recv_mac: new_mac(&keys.hmac),
            })),
        }
    }

    /// Whether blocks are encrypted and authenticated.
    pub fn is_secured(&self) -> bool {
        self.secured.is_some()
    }

    /// Adds clear blocks about to be sent to the outgoing HMAC.
    pub fn send_mac(&mut self, clear: &[u8]) {
        if let Some(s) = &mut self.secured {
            s.send_mac.update(clear);
        }
    }

    /// The outgoing HMAC's digest (16 octets; zero in open mode), which
    /// restarts it.
    pub fn send_digest(&mut self) -> [u8; BLOCK] {
        let mut out = [0u8; BLOCK];
        if let Some(s) = &mut self.secured {
            let mac = std::mem::replace(&mut s.send_mac, new_mac(&s.hmac_key));
            out.copy_from_slice(&mac.finalize().into_bytes()[..BLOCK]);
        }
        out
    }

    /// Encrypts whole blocks in place, continuing this direction's chain.
    pub fn encrypt(&mut self, buf: &mut [u8]) {
        if let Some(s) = &mut self.secured {
            cbc_encrypt(&s.aes, &mut s.send_iv, buf);
        }
    }

    /// Decrypts whole blocks in place, continuing the peer's chain.
    pub fn decrypt(&mut self, buf: &mut [u8]) {
        if let Some(s) = &mut self.secured {
            cbc_decrypt(&s.aes, &mut s.recv_iv, buf);
        }
    }

    /// Adds clear blocks received to the incoming HMAC.
    pub fn recv_mac(&mut self, clear: &[u8]) {
        if let Some(s) = &mut self.secured {
            s.recv_mac.update(clear);
        }
    }

    /// Checks a received (decrypted) HMAC block and restarts the incoming
    /// HMAC. Always passes in open mode.
    pub fn recv_check(&mut self, got: &[u8]) -> Result<(), BadHmac> {
        let Some(s) = &mut self.secured else {
            return Ok(());
        };
        let mac = std::mem::replace(&mut s.recv_mac, new_mac(&s.hmac_key));
        let want = mac.finalize().into_bytes();
        // Not secret-dependent timing worth guarding: the peer already
        // holds the key if it can produce any valid digest.
        if got.len() == BLOCK && want[..BLOCK] == *got {
            Ok(())
        } else {
            Err(BadHmac)
        }
    }

    /// Seals a whole message whose last block is its HMAC: authenticates
    /// the blocks before it, writes the digest, encrypts everything.
    pub fn seal(&mut self, msg: &mut [u8]) {
        let n = msg.len() - BLOCK;
        self.send_mac(&msg[..n]);
        let d = self.send_digest();
        msg[n..].copy_from_slice(&d);
        self.encrypt(msg);
    }

    /// Opens a whole message sealed by [`Channel::seal`].
    pub fn unseal(&mut self, msg: &mut [u8]) -> Result<(), BadHmac> {
        self.decrypt(msg);
        let n = msg.len() - BLOCK;
        self.recv_mac(&msg[..n]);
        self.recv_check(&msg[n..])
    }
}

/// A test session's keys (RFC 4656 §4.1.2), derived from the control
/// session's keys and the SID.
#[derive(Clone)]
pub struct TestKeys {
    aes: Aes128,
    hmac_key: [u8; 32],
}

impl std::fmt::Debug for TestKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestKeys(…)")
    }
}

impl TestKeys {
    /// Derives a session's keys from the control keys and its SID.
    pub fn derive(keys: &SessionKeys, sid: &[u8; 16]) -> Self {
        let by_sid = Aes128::new(sid.into());
        let mut aes_key = keys.aes;
        by_sid.encrypt_block((&mut aes_key).into());
        let mut hmac_key = keys.hmac;
        cbc_encrypt(&by_sid, &mut [0u8; BLOCK], &mut hmac_key);
        Self {
            aes: Aes128::new(&aes_key.into()),
            hmac_key,
        }
    }

    /// Encrypts `clear_blocks` (a multiple of 16 octets) as one CBC chain
    /// from a zero IV; the first block alone is ECB.
    pub fn encrypt(&self, buf: &mut [u8]) {
        cbc_encrypt(&self.aes, &mut [0u8; BLOCK], buf);
    }

    /// Decrypts like [`TestKeys::encrypt`] encrypts.
    pub fn decrypt(&self, buf: &mut [u8]) {
        cbc_decrypt(&self.aes, &mut [0u8; BLOCK], buf);
    }

    /// HMAC-SHA1 of `clear`, truncated to 16 octets.
    pub fn mac(&self, clear: &[u8]) -> [u8; BLOCK] {
        let mut m = new_mac(&self.hmac_key);
        m.update(clear);
        let mut out = [0u8; BLOCK];
        out.copy_from_slice(&m.finalize().into_bytes()[..BLOCK]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> SessionKeys {
        SessionKeys {
            aes: *b"0123456789abcdef",
            hmac: *b"ABCDEFGHIJKLMNOPQRSTUVWXYZ012345",
        }
    }

    #[test]
    fn a_token_opens_with_the_same_passphrase_only() {
        let salt = [7u8; 16];
        let challenge = [9u8; 16];
        let t = seal_token(b"secret", &salt, 1024, &challenge, &keys());
        let (c, k) = open_token(b"secret", &salt, 1024, &t);
        assert_eq!(c, challenge);
        assert_eq!(k, keys());
        let (c, _) = open_token(b"Secret", &salt, 1024, &t);
        assert_ne!(c, challenge);
    }

    #[test]
    fn pbkdf2_matches_rfc6070() {
        // RFC 6070 test vector 2 (HMAC-SHA1, 2 iterations), first 16 octets.
        let mut dk = [0u8; 16];
        pbkdf2::pbkdf2_hmac::<Sha1>(b"password", b"salt", 2, &mut dk);
        assert_eq!(dk[..4], [0xea, 0x6c, 0x01, 0x4d]);
    }

    #[test]
    fn a_sealed_chain_opens_in_order_and_catches_a_changed_bit() {
        let client_iv = [1u8; 16];
        let server_iv = [2u8; 16];
        let mut client = Channel::secured(&keys(), client_iv, server_iv);
        let mut server = Channel::secured(&keys(), server_iv, client_iv);
        let mut a = [3u8; 48];
        let mut b = [4u8; 32];
        client.seal(&mut a);
        client.seal(&mut b);
        assert_ne!(a[..16], [3u8; 16], "encrypted");
        let mut a2 = a;
        server.unseal(&mut a2).unwrap();
        assert_eq!(a2[..32], [3u8; 32]);
        let mut b2 = b;
        b2[5] ^= 1;
        assert_eq!(server.unseal(&mut b2), Err(BadHmac));
    }

    #[test]
    fn open_channels_pass_blocks_through_with_zero_hmacs() {
        let mut c = Channel::open();
        let mut m = [5u8; 32];
        c.seal(&mut m);
        assert_eq!(m[..16], [5u8; 16]);
        assert_eq!(m[16..], [0u8; 16]);
        assert!(Channel::open().unseal(&mut m).is_ok());
    }

    #[test]
    fn test_keys_depend_on_the_sid() {
        let a = TestKeys::derive(&keys(), &[1; 16]);
        let b = TestKeys::derive(&keys(), &[2; 16]);
        assert_ne!(a.mac(b"x"), b.mac(b"x"));
        let mut blk = [0u8; 32];
        a.encrypt(&mut blk);
        let enc = blk;
        a.decrypt(&mut blk);
        assert_eq!(blk, [0u8; 32]);
        let mut other = [0u8; 32];
        b.encrypt(&mut other);
        assert_ne!(enc, other);
    }
}
