//! picoquic's quicperf scenario strings: the current grammar
//! (`*1:397:5000000;`, names, dependencies, media `s…` and datagram `d…`
//! descriptions) and the legacy one picoquic's documentation still shows
//! (`*1:0:-:397:5000000;`), which is translated.
//!
//! Post sizes count the 8-byte request header (16 for media), as picoquic
//! counts them: a post size of 397 sends the header and 389 bytes.

use std::fmt;

use super::{HEADER_LEN, MAX_U24};

/// What a batch stream asks back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// Exactly this many bytes.
    Bytes(u64),
    /// An unlimited response the client stops (STOP_SENDING) after this
    /// many bytes.
    StopAfter(u64),
}

/// A media description (`s…` on the stream, `d…` as datagrams).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaDesc {
    /// DATAGRAM frames instead of stream frames.
    pub datagram: bool,
    /// Frames per second (1-255).
    pub frequency: u8,
    /// Priority.
    pub priority: Option<u8>,
    /// Client-sourced (`C`; picoquic parses but does not implement it).
    pub client_source: bool,
    /// Frames (picoquic's effective default is 1).
    pub frames: u32,
    /// Bytes per frame.
    pub frame_size: u32,
    /// Frames per group; each group is a new stream.
    pub group: Option<u32>,
    /// First frame of each group, bytes.
    pub first_frame: Option<u32>,
    /// STOP_SENDING when a frame is later than this, microseconds.
    pub reset_delay_us: Option<u64>,
}

/// One description's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Post then response on one bidirectional stream.
    Batch {
        /// Bytes the client sends, header included.
        post: u64,
        /// What comes back.
        response: Response,
    },
    /// Media frames.
    Media(MediaDesc),
}

/// One description: a body repeated in parallel, maybe named, maybe after
/// another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desc {
    /// Name (`=id:`), for reports and dependencies.
    pub id: Option<String>,
    /// Starts when every repeat of this named description has ended.
    pub after: Option<String>,
    /// Copies run in parallel.
    pub repeat: u32,
    /// What each copy does.
    pub body: Body,
}

/// A parsed scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// The descriptions, in order.
    pub descs: Vec<Desc>,
    /// Written in the legacy grammar and translated.
    pub legacy: bool,
}

/// Why a scenario does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scenario description {index} ('{text}'): {why}")]
pub struct ScenarioError {
    /// 1-based description index.
    pub index: usize,
    /// Its text.
    pub text: String,
    /// What is wrong.
    pub why: String,
}

fn err(index: usize, text: &str, why: impl Into<String>) -> ScenarioError {
    ScenarioError {
        index,
        text: text.trim().to_string(),
        why: why.into(),
    }
}

fn number(t: &str) -> Option<u64> {
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

fn is_name(t: &str) -> bool {
    (1..=15).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl Scenario {
    /// Parses either grammar (a description with four numeric fields and no
    /// names is legacy; a scenario may not mix the two).
    pub fn parse(s: &str) -> Result<Scenario, ScenarioError> {
        let parts: Vec<&str> = s.split(';').collect();
        let n = parts.len();
        let mut descs = Vec::new();
        let mut legacy_state: Option<LegacyState> = None;
        let mut current = false;
        for (i, part) in parts.iter().enumerate() {
            let compact: String = part.chars().filter(|c| !c.is_whitespace()).collect();
            if compact.is_empty() {
                if i + 1 == n && i > 0 {
                    break; // trailing ';'
                }
                return Err(err(i + 1, part, "empty description"));
            }
            let index = i + 1;
            let tokens: Vec<&str> = compact.split(':').collect();
            if looks_legacy(&tokens) {
                if current {
                    return Err(err(index, part, "legacy and current forms mixed in one scenario"));
                }
                let st = legacy_state.get_or_insert_with(LegacyState::default);
                descs.push(parse_legacy(index, part, &tokens, st)?);
            } else {
                if legacy_state.is_some() {
                    return Err(err(index, part, "legacy and current forms mixed in one scenario"));
                }
                current = true;
                descs.push(parse_current(index, part, &tokens)?);
            }
        }
        if descs.is_empty() {
            return Err(err(1, s, "no description"));
        }
        // Dependencies must name an earlier named description.
        for (i, d) in descs.iter().enumerate() {
            if let Some(a) = &d.after {
                if !descs[..i].iter().any(|p| p.id.as_deref() == Some(a)) {
                    return Err(err(
                        i + 1,
                        &d.to_string(),
                        format!("it depends on '{a}', which no earlier description is named"),
                    ));
                }
            }
            if let Some(id) = &d.id {
                if descs[..i].iter().any(|p| p.id.as_deref() == Some(id)) {
                    return Err(err(
                        i + 1,
                        &d.to_string(),
                        format!("the name '{id}' is used twice"),
                    ));
                }
            }
        }
        Ok(Scenario {
            descs,
            legacy: legacy_state.is_some(),
        })
    }
}

fn looks_legacy(tokens: &[&str]) -> bool {
    let rest = match tokens.first() {
        Some(t) if t.starts_with('*') => &tokens[1..],
        Some(t) if t.starts_with('=') => return false,
        _ => tokens,
    };
    rest.len() == 4
        && rest[..2].iter().all(|t| *t == "-" || number(t).is_some())
        && (rest[2] == "-" || number(rest[2]).is_some())
}

fn repeat_of(index: usize, text: &str, t: &str) -> Result<u32, ScenarioError> {
    match number(&t[1..]) {
        Some(r) if (1..=1_000_000).contains(&r) => Ok(r as u32),
        _ => Err(err(
            index,
            text,
            format!("'{t}': the repeat count must be 1-1000000"),
        )),
    }
}

fn post_of(index: usize, text: &str, t: &str, header: usize) -> Result<u64, ScenarioError> {
    let p = if t == "-" {
        0
    } else {
        number(t).ok_or_else(|| err(index, text, format!("'{t}': the post size must be a byte count")))?
    };
    if p < header as u64 {
        return Err(err(
            index,
            text,
            format!("post size {p} is below the {header}-byte request header it includes (picoquic would send a truncated header)"),
        ));
    }
    Ok(p)
}

fn response_of(index: usize, text: &str, t: &str) -> Result<Response, ScenarioError> {
    if let Some(n) = t.strip_prefix('-') {
        return number(n).map(Response::StopAfter).ok_or_else(|| {
            err(
                index,
                text,
                format!("'{t}': -N means an unlimited response stopped after N bytes"),
            )
        });
    }
    match number(t) {
        Some(n) if n < super::UNLIMITED => Ok(Response::Bytes(n)),
        _ => Err(err(
            index,
            text,
            format!("'{t}': the response size must be a byte count"),
        )),
    }
}

fn parse_current(index: usize, text: &str, tokens: &[&str]) -> Result<Desc, ScenarioError> {
    let mut i = 0;
    let mut id = None;
    let mut after = None;
    let mut repeat = 1;
    // Up to two names: "=id:" then "=prev:".
    for slot in 0..2 {
        match tokens.get(i) {
            Some(t) if t.starts_with('=') => {
                let name = &t[1..];
                if !is_name(name) {
                    return Err(err(
                        index,
                        text,
                        format!("'{t}': a name is 1-15 letters or digits"),
                    ));
                }
                if slot == 0 {
                    id = Some(name.to_string());
                } else {
                    after = Some(name.to_string());
                }
                i += 1;
            }
            _ => break,
        }
    }
    if let Some(t) = tokens.get(i).filter(|t| t.starts_with('*')) {
        repeat = repeat_of(index, text, t)?;
        i += 1;
    }
    let rest = &tokens[i..];
    let first = rest.first().copied().unwrap_or("");
    let body = if let Some(f) = first.strip_prefix('s').or_else(|| first.strip_prefix('d')) {
        Body::Media(parse_media(index, text, first.starts_with('d'), f, &rest[1..])?)
    } else {
        let (post, resp) = match rest {
            [p, r] => (p.strip_prefix('b').unwrap_or(p), *r),
            _ => {
                return Err(err(
                    index,
                    text,
                    "expected [=id:][=after:][*repeat:]post:response, or a media description s…/d…",
                ))
            }
        };
        Body::Batch {
            post: post_of(index, text, post, HEADER_LEN)?,
            response: response_of(index, text, resp)?,
        }
    };
    Ok(Desc {
        id,
        after,
        repeat,
        body,
    })
}

fn parse_media(
    index: usize,
    text: &str,
    datagram: bool,
    freq: &str,
    rest: &[&str],
) -> Result<MediaDesc, ScenarioError> {
    let frequency = match number(freq) {
        Some(f) if (1..=255).contains(&f) => f as u8,
        _ => {
            return Err(err(
                index,
                text,
                format!("'{freq}': the frame rate must be 1-255 frames/s"),
            ))
        }
    };
    let mut m = MediaDesc {
        datagram,
        frequency,
        priority: None,
        client_source: false,
        frames: 1,
        frame_size: 0,
        group: None,
        first_frame: None,
        reset_delay_us: None,
    };
    let mut size_seen = false;
    for t in rest {
        let (tag, val) = t.split_at(
            t.chars()
                .next()
                .map_or(0, |c| if c.is_ascii_digit() { 0 } else { 1 }),
        );
        let num = || number(val).ok_or_else(|| err(index, text, format!("'{t}': expected a number")));
        let u24 = |v: u64, what: &str| {
            u32::try_from(v)
                .ok()
                .filter(|&v| v <= MAX_U24)
                .ok_or_else(|| err(index, text, format!("{what} above 16777215")))
        };
        match (tag, size_seen) {
            ("p", false) => {
                m.priority = Some(u8::try_from(num()?).map_err(|_| err(index, text, "priority above 255"))?)
            }
            ("C", false) if val.is_empty() => m.client_source = true,
            ("S", false) if val.is_empty() => m.client_source = false,
            ("n", false) => m.frames = u24(num()?, "frames")?,
            ("", false) => {
                m.frame_size = u24(num()?, "frame size")?;
                size_seen = true;
            }
            ("G", true) => m.group = Some(u24(num()?, "group size")?.max(1)),
            ("I", true) => m.first_frame = Some(u24(num()?, "first frame size")?),
            ("D", true) => m.reset_delay_us = Some(num()?),
            _ => return Err(err(index, text, format!("'{t}' is not expected here"))),
        }
    }
    if !size_seen {
        return Err(err(index, text, "a media description needs a frame size"));
    }
    if m.client_source {
        return Err(err(
            index,
            text,
            "client-sourced media (C) is not implemented (picoquic does not implement it either)",
        ));
    }
    Ok(m)
}

#[derive(Default)]
struct LegacyState {
    prev_stream: Option<u64>,
}

/// `[*repeat:]stream:previous:post:response` with numeric QUIC stream ids
/// (`-` = the default): the description is named after its stream id, and
/// depends on its previous stream, which defaults to the description
/// before (none for the first).
fn parse_legacy(
    index: usize,
    text: &str,
    tokens: &[&str],
    st: &mut LegacyState,
) -> Result<Desc, ScenarioError> {
    let (repeat, rest) = match tokens.first() {
        Some(t) if t.starts_with('*') => (repeat_of(index, text, t)?, &tokens[1..]),
        _ => (1, tokens),
    };
    let stream = match rest[0] {
        "-" => st.prev_stream.map_or(0, |p| p + 4),
        t => number(t).ok_or_else(|| err(index, text, "bad stream id"))?,
    };
    let after = match rest[1] {
        "-" => st.prev_stream,
        t => Some(number(t).ok_or_else(|| err(index, text, "bad previous stream id"))?),
    };
    // A repeated description used ids stream, stream + 4, …
    st.prev_stream = Some(stream + 4 * u64::from(repeat - 1));
    Ok(Desc {
        id: Some(format!("s{stream}")),
        after: after.map(|a| format!("s{a}")),
        repeat,
        body: Body::Batch {
            post: post_of(index, text, rest[2], HEADER_LEN)?,
            response: response_of(index, text, rest[3])?,
        },
    })
}

impl fmt::Display for Desc {
    /// The description in the current grammar.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(id) = &self.id {
            write!(f, "={id}:")?;
        }
        if let Some(a) = &self.after {
            write!(f, "={a}:")?;
        }
        write!(f, "*{}:", self.repeat)?;
        match self.body {
            Body::Batch { post, response } => {
                write!(f, "{post}:")?;
                match response {
                    Response::Bytes(n) => write!(f, "{n}"),
                    Response::StopAfter(n) => write!(f, "-{n}"),
                }
            }
            Body::Media(m) => {
                write!(f, "{}{}:", if m.datagram { 'd' } else { 's' }, m.frequency)?;
                if let Some(p) = m.priority {
                    write!(f, "p{p}:")?;
                }
                write!(f, "n{}:{}", m.frames, m.frame_size)?;
                if let Some(g) = m.group {
                    write!(f, ":G{g}")?;
                }
                if let Some(i) = m.first_frame {
                    write!(f, ":I{i}")?;
                }
                if let Some(d) = m.reset_delay_us {
                    write!(f, ":D{d}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Scenario {
    /// The scenario in the current grammar.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.descs {
            write!(f, "{d};")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(post: u64, n: u64) -> Body {
        Body::Batch {
            post,
            response: Response::Bytes(n),
        }
    }

    #[test]
    fn current_grammar_examples() {
        let s = Scenario::parse("*1:397:5000000;").unwrap();
        assert!(!s.legacy);
        assert_eq!(
            s.descs,
            vec![Desc {
                id: None,
                after: None,
                repeat: 1,
                body: batch(397, 5_000_000)
            }]
        );
        let s = Scenario::parse("* 100:256 : 12345;").unwrap();
        assert_eq!((s.descs[0].repeat, s.descs[0].body), (100, batch(256, 12345)));
        let s = Scenario::parse("=b1:*1:397:1000000;").unwrap();
        assert_eq!(s.descs[0].id.as_deref(), Some("b1"));
        let s = Scenario::parse("= b1:256 : 12345; = b2:=b1: 256 : 12345;").unwrap();
        assert_eq!(s.descs[1].id.as_deref(), Some("b2"));
        assert_eq!(s.descs[1].after.as_deref(), Some("b1"));
        // b prefix and an unlimited response.
        let s = Scenario::parse("b8:-1000000").unwrap();
        assert_eq!(
            s.descs[0].body,
            Body::Batch {
                post: 8,
                response: Response::StopAfter(1_000_000)
            }
        );
    }

    #[test]
    fn media_examples() {
        let s = Scenario::parse("=v1:s30:n150:2000:G30:I20000;").unwrap();
        let Body::Media(m) = s.descs[0].body else { panic!() };
        assert_eq!(
            m,
            MediaDesc {
                datagram: false,
                frequency: 30,
                priority: None,
                client_source: false,
                frames: 150,
                frame_size: 2000,
                group: Some(30),
                first_frame: Some(20000),
                reset_delay_us: None
            }
        );
        let s = Scenario::parse("=a1:d50:n250:100;").unwrap();
        let Body::Media(m) = s.descs[0].body else { panic!() };
        assert!(m.datagram);
        assert_eq!((m.frequency, m.frames, m.frame_size), (50, 250, 100));
        let s = Scenario::parse("=v4 : s30:p4:S:  n1800:12345:G150:I11111:D1000;").unwrap();
        let Body::Media(m) = s.descs[0].body else { panic!() };
        assert_eq!(
            (
                m.priority,
                m.frames,
                m.frame_size,
                m.group,
                m.first_frame,
                m.reset_delay_us
            ),
            (Some(4), 1800, 12345, Some(150), Some(11111), Some(1000))
        );
        assert!(Scenario::parse("s30:C:n10:100").is_err());
    }

    #[test]
    fn legacy_grammar_is_translated() {
        let s = Scenario::parse("*1:0:-:397:5000000;").unwrap();
        assert!(s.legacy);
        assert_eq!(s.descs[0].body, batch(397, 5_000_000));
        assert_eq!(s.descs[0].after, None);
        let s = Scenario::parse("*1:0:-:397:5000;*1:4:0:432:4999;").unwrap();
        assert_eq!(s.descs[1].id.as_deref(), Some("s4"));
        assert_eq!(s.descs[1].after.as_deref(), Some("s0"));
        assert_eq!(s.descs[1].body, batch(432, 4999));
        assert_eq!(s.to_string(), "=s0:*1:397:5000;=s4:=s0:*1:432:4999;");
        // The translation parses in the current grammar to the same plan.
        let again = Scenario::parse(&s.to_string()).unwrap();
        assert_eq!(again.descs, s.descs);
        assert!(!again.legacy);
    }

    #[test]
    fn bad_scenarios_say_why() {
        for (s, want) in [
            ("", "empty description"),
            (";", "empty description"),
            ("*0:100:100", "repeat count"),
            ("1:100", "post size 1 is below"),
            ("100:abc", "response size"),
            ("=b2:=b1:100:100", "depends on 'b1'"),
            ("=a:100:1;=a:100:1", "used twice"),
            ("=waytoolongname12345:100:1", "1-15 letters"),
            ("s0:100", "frame rate"),
            ("s30:n1:G5", "not expected"),
            ("100:1;;100:1", "empty description"),
            ("*1:0:-:397:5000;100:200", "mixed"),
        ] {
            let e = Scenario::parse(s).expect_err(s).to_string();
            assert!(e.contains(want), "{s}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(s in "[-=*:;0-9a-zA-Z ]{0,60}") {
            let _ = Scenario::parse(&s);
        }

        #[test]
        fn printed_scenarios_parse_back(repeat in 1u32..50, post in 8u64..1_000_000, resp in 0u64..u64::MAX / 2) {
            let s = Scenario::parse(&format!("=x1:*{repeat}:{post}:{resp};=x2:=x1:{post}:-{resp}")).unwrap();
            let again = Scenario::parse(&s.to_string()).unwrap();
            proptest::prop_assert_eq!(again, s);
        }
    }
}
