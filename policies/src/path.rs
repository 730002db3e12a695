//! Request-path normalisation. The proxy forwards the raw path, so what we
//! match must be what any reasonable origin server would resolve; anything
//! two servers could read differently is refused (fail closed).

/// A request path prepared for matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NormalPath {
    /// Unreserved escapes decoded, other escapes upper-cased, raw non-ASCII
    /// percent-encoded (UTF-8, upper-case hex), `//` collapsed, query
    /// removed. Allow rules match this, case-sensitively.
    pub exact: String,
    /// `exact` fully percent-decoded, ASCII-lower-cased and with `;params`
    /// stripped from each segment. Deny rules additionally match this, so a
    /// case-insensitive or Tomcat-style server cannot be used to dodge them.
    pub loose: String,
    /// `exact` as a server that strips path parameters routes it: each
    /// segment cut at its first `;` (or `%3B`, for servers that decode
    /// first), and segments left empty collapsed like `//`. Tomcat, Jetty
    /// and Spring route `/files/admin;.whl` to `/files/admin`; allow rules
    /// must match this reading as well as `exact` (see `PathGlob::allows`).
    pub routed: String,
}

/// Why a path was refused as ambiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AmbiguousPath(pub String);

/// Normalises a raw request target (`/a/b?x=1`). `*` (the OPTIONS
/// asterisk-form, RFC 9112 §3.2.4) is returned as-is.
pub(crate) fn normalize(path_and_query: &str) -> Result<NormalPath, AmbiguousPath> {
    if path_and_query == "*" {
        return Ok(NormalPath {
            exact: "*".to_owned(),
            loose: "*".to_owned(),
            routed: "*".to_owned(),
        });
    }
    let path = path_and_query
        .split_once('?')
        .map_or(path_and_query, |(path, _query)| path);
    if path.starts_with("//") {
        // RFC 3986 §4.2: "//x/y" is a network-path reference. Python's
        // urllib.parse.urlsplit (used by older Werkzeug dev servers and by
        // handlers that re-parse the target) reads "x" as a host and "/y"
        // as the path, so "//public/secret" would be matched as
        // "/public/secret" but served as "/secret".
        return Err(AmbiguousPath(
            "the path starts with '//', which URL parsers read as '//host/path'".to_owned(),
        ));
    }
    let exact = normalize_pattern_text(path).map_err(|e| AmbiguousPath(e.to_string()))?;
    if exact
        .split('/')
        .any(|segment| String::from_utf8(percent_decode(segment)).is_err())
    {
        // e.g. overlong "%C0%AE" ('.' to some old decoders).
        return Err(AmbiguousPath(
            "percent-encoded bytes that are not valid UTF-8".to_owned(),
        ));
    }
    let loose = loosen(&exact);
    if loose
        .split('/')
        .any(|segment| matches!(segment, "." | ".."))
    {
        return Err(AmbiguousPath(
            "a segment decodes to a dot segment; servers resolve it differently".to_owned(),
        ));
    }
    let routed = strip_params(&exact);
    Ok(NormalPath {
        exact,
        loose,
        routed,
    })
}

/// Why [`normalize_pattern_text`] refused a path; Display is the problem
/// alone, which callers wrap ("ambiguous request path: ...", "invalid path
/// pattern: ...").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    #[error("path {path:?} does not start with '/'")]
    NotAbsolute { path: String },
    #[error("invalid percent-encoding at byte {at}")]
    InvalidPercentEncoding { at: usize },
    #[error(
        "encoded {:?} (%{byte:02X}) is read as a separator by some servers",
        char::from(*.byte)
    )]
    EncodedSeparator { byte: u8 },
    #[error("encoded control character %{byte:02X}")]
    EncodedControl { byte: u8 },
    #[error("double percent-encoding (%25XX) is decoded twice by some servers")]
    DoubleEncoding,
    #[error("backslash is read as '/' by some servers")]
    Backslash,
    #[error("control character 0x{byte:02X}")]
    ControlCharacter { byte: u8 },
    #[error("'#' is not allowed in a request path")]
    Fragment,
    #[error("dot segment {segment:?}; servers resolve it differently")]
    DotSegment { segment: String },
    #[error(r"a backslash in a path pattern only escapes '*' or '?' (write \* or \? for the character itself)")]
    BadEscape,
}

/// Normalises a rule's path pattern like a request path, keeping the glob
/// escapes `\*` and `\?` (a literal `*` or `?`). Request paths never
/// contain a backslash (it is refused), so an escape cannot be confused
/// with anything a request sends.
pub(crate) fn normalize_glob_text(pattern: &str) -> Result<String, PathError> {
    normalize_text(pattern, true)
}

/// The normalisation of request paths (rule patterns add escapes, see
/// [`normalize_glob_text`]).
pub(crate) fn normalize_pattern_text(path: &str) -> Result<String, PathError> {
    normalize_text(path, false)
}

fn normalize_text(path: &str, escapes: bool) -> Result<String, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute {
            path: path.to_owned(),
        });
    }
    let mut decoded = String::with_capacity(path.len());
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'%' => {
                let byte = hex_pair(bytes.get(i + 1..i + 3))
                    .ok_or(PathError::InvalidPercentEncoding { at: i })?;
                match byte {
                    b'/' | b'\\' => {
                        return Err(PathError::EncodedSeparator { byte });
                    }
                    0x00..=0x1f | 0x7f => {
                        return Err(PathError::EncodedControl { byte });
                    }
                    b'%' if hex_pair(bytes.get(i + 3..i + 5)).is_some() => {
                        return Err(PathError::DoubleEncoding);
                    }
                    _ if is_unreserved(byte) => decoded.push(byte as char),
                    _ => decoded.push_str(&format!("%{byte:02X}")),
                }
                i += 3;
                continue;
            }
            b'\\' if escapes => match bytes.get(i + 1) {
                Some(c @ (b'*' | b'?')) => {
                    decoded.push('\\');
                    decoded.push(char::from(*c));
                    i += 2;
                    continue;
                }
                _ => return Err(PathError::BadEscape),
            },
            b'\\' => return Err(PathError::Backslash),
            0x00..=0x1f | 0x7f => {
                return Err(PathError::ControlCharacter { byte: b });
            }
            b'#' => return Err(PathError::Fragment),
            0x80..=0xff => {
                // Raw non-ASCII (a rule written as "/café", or a client that
                // sends UTF-8 unencoded) is percent-encoded byte by byte, so
                // it compares equal to the "%C3%A9" form clients normally
                // send: both reach the server as the same bytes.
                decoded.push_str(&format!("%{b:02X}"));
            }
            _ => decoded.push(b as char),
        }
        i += 1;
    }
    let mut out = String::with_capacity(decoded.len());
    let segments: Vec<&str> = decoded.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (n, segment) in segments.iter().enumerate() {
        // Collapse `//` (empty segments) except a trailing slash, which is
        // significant to most servers ("/user" vs "/user/").
        if segment.is_empty() && n != last {
            continue;
        }
        let without_params = segment.split(';').next().unwrap_or(segment);
        if matches!(without_params, "." | "..") {
            return Err(PathError::DotSegment {
                segment: (*segment).to_owned(),
            });
        }
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Cuts every segment of a normalised path (or pattern) at its first `;`
/// or `%3B`, collapsing segments left empty except a trailing one, as
/// servlet containers do with path parameters (Servlet 6.0 §3.5:
/// `/a;x/b` is `/a/b`; `/;x/admin` is `/admin`).
pub(crate) fn strip_params(exact: &str) -> String {
    if !exact.contains(';') && !exact.contains("%3B") {
        return exact.to_owned();
    }
    let mut out = String::with_capacity(exact.len());
    let segments: Vec<&str> = exact.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (n, segment) in segments.iter().enumerate() {
        let cut = [segment.find(';'), segment.find("%3B")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(segment.len());
        let without_params = &segment[..cut];
        if without_params.is_empty() && n != last {
            continue;
        }
        out.push('/');
        out.push_str(without_params);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Fully decodes remaining escapes, lower-cases ASCII and strips `;params`.
fn loosen(exact: &str) -> String {
    let mut out = String::with_capacity(exact.len());
    let segments: Vec<&str> = exact.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (n, segment) in segments.iter().enumerate() {
        let decoded = percent_decode_lossy(segment);
        let without_params = decoded.split(';').next().unwrap_or(&decoded);
        // A segment that is only `;params` is empty to a server that strips
        // them, which then collapses it like `//` ("/;x/admin" is "/admin").
        if without_params.is_empty() && n != last {
            continue;
        }
        out.push('/');
        out.push_str(&without_params.to_ascii_lowercase());
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

fn percent_decode_lossy(s: &str) -> String {
    String::from_utf8_lossy(&percent_decode(s)).into_owned()
}

fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = hex_pair(bytes.get(i + 1..i + 3))
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

fn hex_pair(pair: Option<&[u8]>) -> Option<u8> {
    let pair = pair?;
    let text = std::str::from_utf8(pair).ok()?;
    if text.len() != 2 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(text, 16).ok()
}

/// RFC 3986 §2.3 unreserved characters: decoding them never changes meaning.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Lower-cases and strips `;params` from a pattern so deny rules can be
/// matched against [`NormalPath::loose`].
pub(crate) fn loosen_pattern(pattern: &str) -> String {
    loosen(pattern)
}
