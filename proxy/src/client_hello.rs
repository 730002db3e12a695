//! Reading a TLS ClientHello without consuming the connection.
//!
//! Before deciding whether to intercept, tunnel or refuse a TLS connection the
//! proxy needs its SNI, so it reads the first handshake message itself, keeps
//! the bytes, and replays them to rustls (or upstream, for passthrough).
//! Wire format: RFC 8446 §4.1.2 (ClientHello), §5.1 (records), RFC 6066 §3
//! (server_name), RFC 7301 §3.1 (ALPN).

/// TLS record content type for handshake messages.
const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
/// No sane ClientHello is larger (post-quantum key shares make them ~2 KiB).
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// What the first bytes of a connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// Not enough bytes yet to decide.
    NeedMore,
    /// The connection does not start with a TLS handshake record.
    NotTls,
    /// A complete, well-formed ClientHello.
    Hello(ClientHello),
    /// It claims to be TLS but is malformed.
    Invalid(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHello {
    /// The host_name from server_name, if the client sent one.
    pub sni: Option<String>,
    /// Protocols offered by ALPN, in the client's order.
    pub alpn: Vec<Vec<u8>>,
}

/// Inspect the bytes received so far.
pub fn peek(buf: &[u8]) -> Peek {
    let Some(&first) = buf.first() else {
        return Peek::NeedMore;
    };
    if first != HANDSHAKE {
        return Peek::NotTls;
    }
    // Reassemble the handshake message from as many records as it spans.
    let mut message = Vec::new();
    let mut rest = buf;
    loop {
        if rest.len() < 5 {
            return Peek::NeedMore;
        }
        if rest[0] != HANDSHAKE {
            return Peek::Invalid("ClientHello interleaved with a non-handshake record");
        }
        if rest[1] != 3 {
            return Peek::Invalid("unknown TLS record version");
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 {
            return Peek::Invalid("empty handshake record");
        }
        if rest.len() < 5 + len {
            return Peek::NeedMore;
        }
        message.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if message.len() >= 4 {
            if message[0] != CLIENT_HELLO {
                return Peek::Invalid("first handshake message is not a ClientHello");
            }
            let body_len = (usize::from(message[1]) << 16)
                | (usize::from(message[2]) << 8)
                | usize::from(message[3]);
            if body_len > MAX_CLIENT_HELLO {
                return Peek::Invalid("ClientHello larger than 64 KiB");
            }
            if message.len() >= 4 + body_len {
                return match parse_body(&message[4..4 + body_len]) {
                    Ok(hello) => Peek::Hello(hello),
                    Err(why) => Peek::Invalid(why),
                };
            }
        }
        if message.len() > MAX_CLIENT_HELLO {
            return Peek::Invalid("ClientHello larger than 64 KiB");
        }
    }
}

/// A cursor over a byte slice that fails instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("truncated ClientHello");
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Result<&'a [u8], &'static str> {
        let n = usize::from(self.u8()?);
        self.take(n)
    }
    fn vec16(&mut self) -> Result<&'a [u8], &'static str> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn parse_body(body: &[u8]) -> Result<ClientHello, &'static str> {
    let mut r = Reader(body);
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    r.vec8()?; // legacy_session_id
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    let mut hello = ClientHello::default();
    if r.is_empty() {
        return Ok(hello); // extensions are optional before TLS 1.3
    }
    let mut exts = Reader(r.vec16()?);
    let mut seen = std::collections::HashSet::new();
    while !exts.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        // RFC 8446 §4.2: "There MUST NOT be more than one extension of the same type".
        if !seen.insert(kind) {
            return Err("duplicate extension in ClientHello");
        }
        match kind {
            EXT_SERVER_NAME => hello.sni = parse_server_name(data)?,
            EXT_ALPN => hello.alpn = parse_alpn(data)?,
            _ => {}
        }
    }
    if !r.is_empty() {
        return Err("trailing bytes after ClientHello extensions");
    }
    Ok(hello)
}

fn parse_server_name(data: &[u8]) -> Result<Option<String>, &'static str> {
    let mut outer = Reader(data);
    let mut list = Reader(outer.vec16()?);
    if !outer.is_empty() {
        return Err("trailing bytes in server_name");
    }
    let mut name = None;
    while !list.is_empty() {
        let kind = list.u8()?;
        let value = list.vec16()?;
        if kind != 0 {
            continue; // only host_name(0) is defined
        }
        // RFC 6066 §3: at most one name of each type.
        if name.is_some() {
            return Err("more than one host_name in server_name");
        }
        let text = std::str::from_utf8(value).map_err(|_| "server_name is not ASCII")?;
        if text.is_empty() || !text.is_ascii() {
            return Err("server_name is empty or not ASCII");
        }
        name = Some(text.to_owned());
    }
    Ok(name)
}

fn parse_alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
    let mut outer = Reader(data);
    let mut list = Reader(outer.vec16()?);
    if !outer.is_empty() {
        return Err("trailing bytes in ALPN");
    }
    let mut protocols = Vec::new();
    while !list.is_empty() {
        let p = list.vec8()?;
        if p.is_empty() {
            return Err("empty ALPN protocol name");
        }
        protocols.push(p.to_vec());
    }
    Ok(protocols)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a ClientHello record the way a client would.
    pub(crate) fn hello(sni: Option<&str>, alpn: &[&str]) -> Vec<u8> {
        let mut exts = Vec::new();
        if let Some(name) = sni {
            let mut entry = vec![0u8];
            entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
            entry.extend_from_slice(name.as_bytes());
            let mut list = (entry.len() as u16).to_be_bytes().to_vec();
            list.extend_from_slice(&entry);
            exts.extend_from_slice(&0u16.to_be_bytes());
            exts.extend_from_slice(&(list.len() as u16).to_be_bytes());
            exts.extend_from_slice(&list);
        }
        if !alpn.is_empty() {
            let mut protos = Vec::new();
            for p in alpn {
                protos.push(p.len() as u8);
                protos.extend_from_slice(p.as_bytes());
            }
            let mut list = (protos.len() as u16).to_be_bytes().to_vec();
            list.extend_from_slice(&protos);
            exts.extend_from_slice(&16u16.to_be_bytes());
            exts.extend_from_slice(&(list.len() as u16).to_be_bytes());
            exts.extend_from_slice(&list);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&[0, 2, 0x13, 0x01]);
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut msg = vec![CLIENT_HELLO];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        let mut rec = vec![HANDSHAKE, 3, 1];
        rec.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        rec.extend_from_slice(&msg);
        rec
    }

    #[test]
    fn reads_sni_and_alpn() {
        let rec = hello(Some("api.example.com"), &["h2", "http/1.1"]);
        let Peek::Hello(h) = peek(&rec) else {
            panic!("not parsed")
        };
        assert_eq!(h.sni.as_deref(), Some("api.example.com"));
        assert_eq!(h.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    }

    #[test]
    fn every_strict_prefix_needs_more() {
        let rec = hello(Some("a.example"), &["h2"]);
        for n in 0..rec.len() {
            assert_eq!(peek(&rec[..n]), Peek::NeedMore, "prefix {n}");
        }
    }

    #[test]
    fn reassembles_a_hello_split_over_records() {
        let rec = hello(Some("split.example"), &[]);
        let msg = &rec[5..];
        let (a, b) = msg.split_at(10);
        let mut two = Vec::new();
        for part in [a, b] {
            two.extend_from_slice(&[HANDSHAKE, 3, 1]);
            two.extend_from_slice(&(part.len() as u16).to_be_bytes());
            two.extend_from_slice(part);
        }
        let Peek::Hello(h) = peek(&two) else {
            panic!("not parsed")
        };
        assert_eq!(h.sni.as_deref(), Some("split.example"));
    }

    #[test]
    fn plain_http_is_not_tls() {
        assert_eq!(peek(b"GET / HTTP/1.1\r\n"), Peek::NotTls);
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        assert!(matches!(
            peek(&[22, 3, 1, 0, 4, 9, 9, 9, 9]),
            Peek::Invalid(_)
        ));
        assert!(matches!(peek(&[22, 9, 9, 0, 1, 1]), Peek::Invalid(_)));
        let mut rec = hello(Some("x.example"), &[]);
        let last = rec.len() - 1;
        rec[last] ^= 0xff;
        assert!(!matches!(peek(&rec), Peek::NeedMore));
    }

    #[test]
    fn no_sni_is_allowed() {
        let Peek::Hello(h) = peek(&hello(None, &[])) else {
            panic!("not parsed")
        };
        assert_eq!(h.sni, None);
    }
}
