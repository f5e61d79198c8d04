//! An OWAMP or TWAMP control connection: the greeting and set-up both ends
//! go through, then whole messages sealed and unsealed through the
//! connection's [`Channel`], every read bounded in time.

use std::time::Duration;

use goodput_core::owamp::control::{ServerGreeting, ServerStart, SetupResponse};
use goodput_core::owamp::crypto::{self, Channel, SessionKeys, BLOCK, MAX_PBKDF2_COUNT};
use goodput_core::owamp::pfs::{self, Key};
use goodput_core::owamp::{Accept, Mode};
use rand::RngCore;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a control connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlFailure {
    /// The socket failed or closed.
    #[error("control connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent nothing for too long.
    #[error("control connection: nothing received for {0:?}")]
    Timeout(Duration),
    /// The peer said something the protocol does not allow here.
    #[error("control connection: {0}")]
    Protocol(String),
    /// The peer refused (an Accept code other than 0).
    #[error("{what}: {}", Accept::describe(*code))]
    Refused {
        /// What was refused.
        what: &'static str,
        /// The Accept code.
        code: u8,
    },
    /// A message's HMAC did not match.
    #[error(transparent)]
    Hmac(#[from] crypto::BadHmac),
}

impl ControlFailure {
    /// A protocol error in words.
    pub fn protocol(s: impl Into<String>) -> Self {
        Self::Protocol(s.into())
    }
}

/// A control connection past Server-Start.
pub struct ControlConn<S> {
    io: S,
    channel: Channel,
    /// The mode both ends agreed on.
    pub mode: Mode,
    /// The session keys (authenticated modes), for test sessions' keys.
    pub keys: Option<SessionKeys>,
    /// The longest wait for a message the peer owes.
    pub read_timeout: Duration,
}

impl<S: AsyncRead + AsyncWrite + Unpin> ControlConn<S> {
    async fn read_exact_within(&mut self, buf: &mut [u8], within: Duration) -> Result<(), ControlFailure> {
        match tokio::time::timeout(within, self.io.read_exact(buf)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(ControlFailure::Timeout(within)),
        }
    }

    /// Sends a whole message whose last block is its HMAC.
    pub async fn send(&mut self, msg: &mut [u8]) -> Result<(), ControlFailure> {
        self.channel.seal(msg);
        self.io.write_all(msg).await?;
        Ok(())
    }

    /// Sends blocks that belong to a longer message: authenticated and
    /// encrypted, no digest yet.
    pub async fn send_blocks(&mut self, blocks: &mut [u8]) -> Result<(), ControlFailure> {
        self.channel.send_mac(blocks);
        self.channel.encrypt(blocks);
        self.io.write_all(blocks).await?;
        Ok(())
    }

    /// Sends the HMAC block that ends a longer message.
    pub async fn send_hmac(&mut self) -> Result<(), ControlFailure> {
        let mut d = self.channel.send_digest();
        self.channel.encrypt(&mut d);
        self.io.write_all(&d).await?;
        Ok(())
    }

    /// Receives a whole message of `N` octets, its last block its HMAC.
    pub async fn recv<const N: usize>(&mut self) -> Result<[u8; N], ControlFailure> {
        self.recv_within(self.read_timeout).await
    }

    /// [`ControlConn::recv`] with its own time limit.
    pub async fn recv_within<const N: usize>(&mut self, within: Duration) -> Result<[u8; N], ControlFailure> {
        let mut b = [0u8; N];
        self.read_exact_within(&mut b, within).await?;
        self.channel.unseal(&mut b)?;
        Ok(b)
    }

    /// Receives blocks of a longer message (decrypted, added to the
    /// incoming HMAC, not yet checked).
    pub async fn recv_blocks(&mut self, buf: &mut [u8]) -> Result<(), ControlFailure> {
        self.recv_blocks_within(buf, self.read_timeout).await
    }

    /// [`ControlConn::recv_blocks`] with its own time limit.
    pub async fn recv_blocks_within(
        &mut self,
        buf: &mut [u8],
        within: Duration,
    ) -> Result<(), ControlFailure> {
        self.read_exact_within(buf, within).await?;
        self.channel.decrypt(buf);
        self.channel.recv_mac(buf);
        Ok(())
    }

    /// Receives and checks the HMAC block that ends a longer message.
    pub async fn recv_hmac(&mut self) -> Result<(), ControlFailure> {
        let mut b = [0u8; BLOCK];
        let t = self.read_timeout;
        self.read_exact_within(&mut b, t).await?;
        self.channel.decrypt(&mut b);
        self.channel.recv_check(&b)?;
        Ok(())
    }

    /// Receives the first block of a request (its command byte first),
    /// decrypted and added to the incoming HMAC, waiting up to `within`.
    pub async fn recv_first_block(&mut self, within: Duration) -> Result<[u8; BLOCK], ControlFailure> {
        let mut b = [0u8; BLOCK];
        self.recv_blocks_within(&mut b, within).await?;
        Ok(b)
    }

    /// Receives the rest of a message whose first block was read with
    /// [`ControlConn::recv_first_block`]; `msg` holds that block and gets
    /// the rest; its last block is checked as the HMAC.
    pub async fn recv_rest(&mut self, msg: &mut [u8]) -> Result<(), ControlFailure> {
        let n = msg.len() - BLOCK;
        if n > BLOCK {
            let (_, rest) = msg[..n].split_at_mut(BLOCK);
            self.recv_blocks(rest).await?;
        }
        let mut mac = [0u8; BLOCK];
        let t = self.read_timeout;
        self.read_exact_within(&mut mac, t).await?;
        self.channel.decrypt(&mut mac);
        self.channel.recv_check(&mac)?;
        msg[n..].copy_from_slice(&mac);
        Ok(())
    }

    /// The socket, to close it or read its addresses.
    pub fn get_ref(&self) -> &S {
        &self.io
    }
}

/// What the client learned from the server's greeting and start.
#[derive(Debug, Clone)]
pub struct ServerHello {
    /// The modes the server offered (bitmask).
    pub offered: u32,
    /// The server's start time (NTP format).
    pub start_time: u64,
}

fn mode_names(bits: u32) -> String {
    let names: Vec<&str> = Mode::ALL
        .into_iter()
        .filter(|m| bits & m.bit() != 0)
        .map(Mode::name)
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The client's side of the greeting and set-up: asks for `mode` (with
/// `key` in the authenticated modes).
pub async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    mode: Mode,
    key: Option<&Key>,
    read_timeout: Duration,
) -> Result<(ControlConn<S>, ServerHello), ControlFailure> {
    let mut g = [0u8; ServerGreeting::LEN];
    match tokio::time::timeout(read_timeout, io.read_exact(&mut g)).await {
        Ok(r) => {
            r?;
        }
        Err(_) => return Err(ControlFailure::Timeout(read_timeout)),
    }
    let greeting = ServerGreeting::decode(&g);
    if greeting.modes & 7 == 0 {
        return Err(ControlFailure::protocol(
            "the server offers no mode to this client (it refuses it)",
        ));
    }
    if greeting.modes & mode.bit() == 0 {
        // Tell the server we give up, as owping does, then say why.
        let _ = io.write_all(&[0u8; SetupResponse::LEN]).await;
        return Err(ControlFailure::protocol(format!(
            "the server does not offer {mode} mode (it offers: {})",
            mode_names(greeting.modes)
        )));
    }
    let mut setup = SetupResponse {
        mode: mode.bit(),
        key_id: [0; 80],
        token: [0; 64],
        client_iv: [0; 16],
    };
    let mut keys = None;
    if mode.is_secured() {
        let key = key.ok_or_else(|| {
            ControlFailure::protocol(format!("{mode} mode needs a key identity and passphrase"))
        })?;
        if greeting.count == 0 || greeting.count > MAX_PBKDF2_COUNT {
            return Err(ControlFailure::protocol(format!(
                "the server asks for {} PBKDF2 iterations (goodput allows 1 to {MAX_PBKDF2_COUNT})",
                greeting.count
            )));
        }
        let mut rng = rand::rngs::OsRng;
        let mut k = SessionKeys {
            aes: [0; 16],
            hmac: [0; 32],
        };
        rng.fill_bytes(&mut k.aes);
        rng.fill_bytes(&mut k.hmac);
        rng.fill_bytes(&mut setup.client_iv);
        setup.key_id = goodput_core::owamp::control::key_id(&key.identity)
            .ok_or_else(|| ControlFailure::protocol("the key identity is longer than 80 octets"))?;
        setup.token = crypto::seal_token(
            &key.passphrase,
            &greeting.salt,
            greeting.count,
            &greeting.challenge,
            &k,
        );
        keys = Some(k);
    }
    io.write_all(&setup.encode()).await?;
    let mut s = [0u8; ServerStart::LEN];
    match tokio::time::timeout(read_timeout, io.read_exact(&mut s)).await {
        Ok(r) => {
            r?;
        }
        Err(_) => return Err(ControlFailure::Timeout(read_timeout)),
    }
    let start = ServerStart::decode(&s);
    if start.accept != 0 {
        return Err(ControlFailure::Refused {
            what: if mode.is_secured() {
                "the server refused the connection (a wrong key identity or passphrase is the usual reason)"
            } else {
                "the server refused the connection"
            },
            code: start.accept,
        });
    }
    let mut channel = match &keys {
        Some(k) => Channel::secured(k, setup.client_iv, start.server_iv),
        None => Channel::open(),
    };
    // The last block: decrypted, and counted in the server's next HMAC.
    let mut last = [0u8; BLOCK];
    last.copy_from_slice(&s[32..]);
    channel.decrypt(&mut last);
    channel.recv_mac(&last);
    let start_time = u64::from_be_bytes(last[..8].try_into().expect("8 octets"));
    Ok((
        ControlConn {
            io,
            channel,
            mode,
            keys,
            read_timeout,
        },
        ServerHello {
            offered: greeting.modes,
            start_time,
        },
    ))
}

/// What a server allows at set-up.
#[derive(Debug, Clone)]
pub struct ServerPolicy {
    /// Modes offered (bitmask).
    pub modes: u32,
    /// Keys of the authenticated modes.
    pub keys: Vec<Key>,
    /// PBKDF2 iterations asked of clients.
    pub count: u32,
}

/// Who connected, after set-up.
#[derive(Debug, Clone)]
pub struct ClientHello {
    /// The key identity used (authenticated modes).
    pub identity: Option<String>,
}

/// The server's side of the greeting and set-up. A client that asks for a
/// mode not offered, names an unknown identity or fails the challenge gets
/// a Server-Start with Accept 1 and an error here.
pub async fn server_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    policy: &ServerPolicy,
    start_time: u64,
    read_timeout: Duration,
) -> Result<(ControlConn<S>, ClientHello), ControlFailure> {
    let mut rng = rand::rngs::OsRng;
    let mut greeting = ServerGreeting {
        modes: policy.modes,
        challenge: [0; 16],
        salt: [0; 16],
        count: policy.count,
    };
    rng.fill_bytes(&mut greeting.challenge);
    rng.fill_bytes(&mut greeting.salt);
    io.write_all(&greeting.encode()).await?;
    let mut b = [0u8; SetupResponse::LEN];
    match tokio::time::timeout(read_timeout, io.read_exact(&mut b)).await {
        Ok(r) => {
            r?;
        }
        Err(_) => return Err(ControlFailure::Timeout(read_timeout)),
    }
    let setup = SetupResponse::decode(&b);
    if setup.mode == 0 {
        return Err(ControlFailure::protocol("the client found no mode it wants"));
    }
    let refuse = |why: String| ControlFailure::Protocol(why);
    let mode = match Mode::from_bit(setup.mode) {
        Some(m) if policy.modes & m.bit() != 0 => m,
        _ => {
            let _ = io.write_all(&refused_start()).await;
            return Err(refuse(format!(
                "the client asked for mode bits {:#x}, not offered",
                setup.mode
            )));
        }
    };
    let mut server_iv = [0u8; 16];
    rng.fill_bytes(&mut server_iv);
    let (channel, keys, identity) = if mode.is_secured() {
        let identity = setup.identity();
        let Some(key) = pfs::find(&policy.keys, &identity) else {
            let _ = io.write_all(&refused_start()).await;
            return Err(refuse(format!("unknown key identity {identity:?}")));
        };
        let (challenge, keys) =
            crypto::open_token(&key.passphrase, &greeting.salt, greeting.count, &setup.token);
        if challenge != greeting.challenge {
            let _ = io.write_all(&refused_start()).await;
            return Err(refuse(format!(
                "identity {identity:?} did not answer the challenge (wrong passphrase)"
            )));
        }
        (
            Channel::secured(&keys, server_iv, setup.client_iv),
            Some(keys),
            Some(identity),
        )
    } else {
        (Channel::open(), None, None)
    };
    let mut conn = ControlConn {
        io,
        channel,
        mode,
        keys,
        read_timeout,
    };
    let mut start = ServerStart {
        accept: 0,
        server_iv,
        start_time,
    }
    .encode();
    let (head, last) = start.split_at_mut(32);
    conn.channel.send_mac(last);
    conn.channel.encrypt(last);
    conn.io.write_all(head).await?;
    conn.io.write_all(last).await?;
    Ok((conn, ClientHello { identity }))
}

fn refused_start() -> [u8; ServerStart::LEN] {
    ServerStart {
        accept: Accept::Failure.byte(),
        server_iv: [0; 16],
        start_time: 0,
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            identity: "alice".into(),
            passphrase: b"hunter2".to_vec(),
        }
    }

    async fn pair(mode: Mode, client_key: Option<Key>) -> Result<(), ControlFailure> {
        let (a, b) = tokio::io::duplex(4096);
        let policy = ServerPolicy {
            modes: 7,
            keys: vec![key()],
            count: 1024,
        };
        let t = Duration::from_secs(2);
        let server = tokio::spawn(async move {
            let (mut c, hello) = server_handshake(b, &policy, 99, t).await?;
            let m: [u8; 32] = c.recv().await?;
            assert_eq!(m[0], 2);
            let mut ack = goodput_core::owamp::control::start_ack(0);
            c.send(&mut ack).await?;
            Ok::<_, ControlFailure>(hello.identity)
        });
        let (mut c, hello) = client_handshake(a, mode, client_key.as_ref(), t).await?;
        assert_eq!(hello.start_time, 99);
        let mut start = goodput_core::owamp::control::start_sessions();
        c.send(&mut start).await?;
        let ack: [u8; 32] = c.recv().await?;
        assert_eq!(ack[0], 0);
        let who = server.await.unwrap()?;
        assert_eq!(who.is_some(), mode.is_secured());
        Ok(())
    }

    #[tokio::test]
    async fn both_ends_agree_in_every_mode() {
        for mode in Mode::ALL {
            pair(mode, Some(key())).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_wrong_passphrase_is_refused_at_server_start() {
        let wrong = Key {
            identity: "alice".into(),
            passphrase: b"hunter3".to_vec(),
        };
        let e = pair(Mode::Encrypted, Some(wrong)).await.unwrap_err();
        assert!(matches!(e, ControlFailure::Refused { code: 1, .. }), "{e}");
    }
}
