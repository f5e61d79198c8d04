//! OWAMP (RFC 4656) and TWAMP (RFC 5357): the control messages, the test
//! packets in open, authenticated and encrypted modes, their cryptography
//! and owamp's passphrase files — the wire as perfSONAR's owping, owampd,
//! twping and twampd speak it. Sans I/O; the engine drives it.
//!
//! Times on the wire are 64-bit NTP timestamps with 16-bit error estimates,
//! as in STAMP ([`crate::stamp`] has the conversions).

pub mod control;
pub mod crypto;
pub mod packet;
pub mod pfs;
pub mod schedule;
pub mod stats;

/// OWAMP-Control's port.
pub const OWAMP_PORT: u16 = 861;
/// TWAMP-Control's port.
pub const TWAMP_PORT: u16 = 862;
/// The TTL a sender sends test packets with, so hops = 255 − TTL seen.
pub const SEND_TTL: u8 = 255;

/// A security mode (the Modes bitmask's bits 1, 2 and 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Unauthenticated.
    Open,
    /// Authenticated: control encrypted, test packets' first block
    /// encrypted and authenticated.
    Authenticated,
    /// Encrypted: control and whole test headers encrypted.
    Encrypted,
}

impl Mode {
    /// Every mode, strongest last.
    pub const ALL: [Mode; 3] = [Mode::Open, Mode::Authenticated, Mode::Encrypted];

    /// The mode's bit.
    pub fn bit(self) -> u32 {
        match self {
            Self::Open => 1,
            Self::Authenticated => 2,
            Self::Encrypted => 4,
        }
    }

    /// The mode a single bit names.
    pub fn from_bit(bit: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.bit() == bit)
    }

    /// Its name, as goodput's flags and results say it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Authenticated => "authenticated",
            Self::Encrypted => "encrypted",
        }
    }

    /// Whether control and test packets are protected.
    pub fn is_secured(self) -> bool {
        self != Self::Open
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s_low = s.to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s_low || m.name()[..1] == s_low)
            .ok_or_else(|| format!("unknown mode {s:?}: open, authenticated or encrypted (O, A, E)"))
    }
}

/// Accept codes (RFC 4656 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// 0: accepted.
    Ok,
    /// 1: refused, no reason given.
    Failure,
    /// 2: internal error.
    Internal,
    /// 3: a field holds something the server does not support.
    NotSupported,
    /// 4: a limit that will not change (too many packets, say).
    PermanentLimit,
    /// 5: a limit that may clear (too many sessions now).
    TemporaryLimit,
}

impl Accept {
    /// The wire value.
    pub fn byte(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Failure => 1,
            Self::Internal => 2,
            Self::NotSupported => 3,
            Self::PermanentLimit => 4,
            Self::TemporaryLimit => 5,
        }
    }

    /// From the wire; `None` for a value RFC 4656 does not define.
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            0 => Self::Ok,
            1 => Self::Failure,
            2 => Self::Internal,
            3 => Self::NotSupported,
            4 => Self::PermanentLimit,
            5 => Self::TemporaryLimit,
            _ => return None,
        })
    }

    /// In words, for errors and reports.
    pub fn describe(b: u8) -> String {
        match Self::from_byte(b) {
            Some(Self::Ok) => "accepted".into(),
            Some(Self::Failure) => "refused (failure, no reason given)".into(),
            Some(Self::Internal) => "refused (internal error)".into(),
            Some(Self::NotSupported) => "refused (not supported)".into(),
            Some(Self::PermanentLimit) => "refused (permanent resource limitation)".into(),
            Some(Self::TemporaryLimit) => "refused (temporary resource limitation)".into(),
            None => format!("refused with undefined accept code {b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_names_or_owping_letters() {
        assert_eq!("encrypted".parse::<Mode>(), Ok(Mode::Encrypted));
        assert_eq!("A".parse::<Mode>(), Ok(Mode::Authenticated));
        assert_eq!("o".parse::<Mode>(), Ok(Mode::Open));
        assert!("x".parse::<Mode>().is_err());
        assert_eq!(Mode::from_bit(4), Some(Mode::Encrypted));
        assert_eq!(Mode::from_bit(3), None);
    }

    #[test]
    fn accept_codes_name_their_limits() {
        assert_eq!(Accept::from_byte(5), Some(Accept::TemporaryLimit));
        assert!(Accept::describe(4).contains("permanent"));
        assert!(Accept::describe(9).contains("undefined"));
    }
}
