//! Who may ask the server anything: the token, the `Host` and `Origin`
//! checks, and the browser's login cookie.
//!
//! A job's config names commands the server runs, so a request the server
//! acts on is a command run as its user. Three checks stand in front of every
//! route, in this order, each answering 4xx before the body is read:
//!
//! 1. **Host** must be one of the server's own names (loopback names, the
//!    address it listens on, `--allow-host` names; any IP literal when it
//!    listens on every address). A DNS-rebinding page reaches the server
//!    under a name of its own, so it is refused here.
//! 2. **Origin**, when a browser sent one, must be explicitly allowed
//!    (`--allow-origin`). Pages on other origins (including "simple"
//!    cross-site POSTs that need no CORS preflight) are refused; the server
//!    never answers with CORS headers.
//! 3. **The token**: `Authorization: Bearer TOKEN` (the scheme in any case),
//!    or, for reading only (GET, HEAD), the `sts_token` cookie that
//!    `GET /?token=TOKEN` sets (`SameSite=Strict; HttpOnly`) so that a person
//!    can open the index and its links in a browser.
//!
//! The token is always required. Without `--token-file` it is `DATA/token`,
//! made at the first start from the operating system's randomness, readable
//! by its owner only.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use axum::http::{header, HeaderMap, Method};

/// Longest token accepted from a file.
pub const MAX_TOKEN_LEN: usize = 4096;

/// The cookie `GET /?token=...` sets.
pub const COOKIE: &str = "sts_token";

/// Why a request is refused, before any route sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 400: no `Host`, or one the server does not answer to.
    Host(String),
    /// 403: a browser origin that is not allowed.
    Origin(String),
    /// 401: no token, or a wrong one.
    Token,
}

impl Refusal {
    pub fn message(&self) -> String {
        match self {
            Refusal::Host(h) => {
                format!("Host {h:?} is not a name of this server (loopback names, the listening address, --allow-host)")
            }
            Refusal::Origin(o) => {
                format!("requests from the web page at {o:?} are refused: browser origins need --allow-origin")
            }
            Refusal::Token => "a bearer token is required (Authorization: Bearer TOKEN; the token is in \
                               the data directory's `token` file, or the one --token-file names)"
                .into(),
        }
    }
}

/// The server's door: what every request is checked against.
#[derive(Debug, Clone)]
pub struct Door {
    token: String,
    listen: SocketAddr,
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Door {
    /// A door for a server listening on `listen` (the port it really got),
    /// with extra host names and browser origins allowed.
    pub fn new(token: String, listen: SocketAddr, hosts: &[String], origins: &[String]) -> Door {
        Door {
            token,
            listen,
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            origins: origins.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect(),
        }
    }

    /// Whether `host` (a `Host` header's value) names this server.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let Some((name, port)) = split_host_port(&host) else { return false };
        if name.is_empty() {
            return false;
        }
        if let Some(port) = port {
            if port != self.listen.port() {
                return false;
            }
        }
        if matches!(name, "localhost" | "localhost." | "127.0.0.1" | "::1") || self.hosts.iter().any(|h| h == name) {
            return true;
        }
        match name.parse::<IpAddr>() {
            // An IP literal is no DNS name a rebinding page could own.
            Ok(ip) => ip == self.listen.ip() || ip.is_loopback() || self.listen.ip().is_unspecified(),
            Err(_) => false,
        }
    }

    /// Checks a request's head: its Host, its Origin, its token.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        match host {
            Some(h) if self.host_allowed(h) => {}
            Some(h) => return Err(Refusal::Host(quoted(h))),
            None => return Err(Refusal::Host(String::new())),
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let o = origin.to_str().unwrap_or("").trim_end_matches('/').to_ascii_lowercase();
            if !self.origins.contains(&o) {
                return Err(Refusal::Origin(quoted(&o)));
            }
        }
        if self.bearer_ok(headers) {
            return Ok(());
        }
        if (method == Method::GET || method == Method::HEAD) && self.cookie_ok(headers) {
            return Ok(());
        }
        Err(Refusal::Token)
    }

    fn bearer_ok(&self, headers: &HeaderMap) -> bool {
        headers.get_all(header::AUTHORIZATION).iter().any(|v| {
            let v = v.as_bytes();
            // RFC 9110: the scheme is case-insensitive.
            v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") && self.is_token(v[7..].trim_ascii())
        })
    }

    fn cookie_ok(&self, headers: &HeaderMap) -> bool {
        headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).any(|cookies| {
            cookies
                .split(';')
                .filter_map(|c| c.trim().split_once('='))
                .any(|(name, value)| name == COOKIE && self.is_token(value.as_bytes()))
        })
    }

    /// Whether `given` is the token (in constant time).
    pub fn is_token(&self, given: &[u8]) -> bool {
        let t = self.token.as_bytes();
        given.len() == t.len() && given.iter().zip(t).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// Name and port of a `Host` value (`[::1]:7878`, `localhost:7878`, `h`);
/// None when it is not one.
fn split_host_port(host: &str) -> Option<(&str, Option<u16>)> {
    let port = |p: &str| p.parse::<u16>().ok();
    if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        return match after {
            "" => Some((name, None)),
            _ => Some((name, Some(port(after.strip_prefix(':')?)?))),
        };
    }
    match host.rsplit_once(':') {
        // One colon: a name and a port; more: a bare IPv6 address.
        Some((name, p)) if !name.contains(':') => Some((name, Some(port(p)?))),
        _ => Some((host, None)),
    }
}

/// Something a client sent, bounded for a message.
fn quoted(s: &str) -> String {
    sts_trace::bounded_message(s.to_string(), 80)
}

/// Why a token could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file given is not a usable token (exit 2).
    #[error("token file {0}: {1}")]
    Bad(PathBuf, String),
    /// The data directory's token could not be made or read (exit 3).
    #[error("token file {0}: {1}")]
    Io(PathBuf, String),
}

/// Reads a token from `path`: a regular file (not a FIFO or a device) of at
/// most [`MAX_TOKEN_LEN`] bytes, one line of printable ASCII without spaces
/// (what a client can send in a header).
pub fn read_token_file(path: &Path) -> Result<String, TokenError> {
    let bad = |m: &str| TokenError::Bad(path.to_path_buf(), m.to_string());
    // O_NONBLOCK: opening a FIFO must not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| TokenError::Bad(path.to_path_buf(), e.to_string()))?;
    let meta = file.metadata().map_err(|e| TokenError::Bad(path.to_path_buf(), e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_LEN as u64 + 2).read_to_end(&mut bytes).map_err(|e| bad(&e.to_string()))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("not text"))?;
    let token = text.strip_suffix('\n').unwrap_or(text);
    let token = token.strip_suffix('\r').unwrap_or(token);
    if token.len() > MAX_TOKEN_LEN {
        return Err(bad(&format!("longer than {MAX_TOKEN_LEN} bytes")));
    }
    if token.is_empty() {
        return Err(bad("empty"));
    }
    if let Some(c) = token.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(bad(&format!(
            "holds {c:?}: a token is one line of printable ASCII without spaces (what a header can carry)"
        )));
    }
    Ok(token.to_string())
}

/// The data directory's token (`DATA/token`), made at the first start (32
/// random bytes in hex, owner-only); `Ok((token, true))` when made now.
pub fn data_token(data: &Path) -> Result<(String, bool), TokenError> {
    let path = data.join("token");
    let io = |e: std::io::Error| TokenError::Io(path.clone(), e.to_string());
    match std::fs::symlink_metadata(&path) {
        Ok(meta) => {
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(TokenError::Bad(
                    path.clone(),
                    format!(
                        "readable by others (mode {:o}): `chmod 600 {}` or remove it for a new one",
                        meta.permissions().mode() & 0o777,
                        path.display()
                    ),
                ));
            }
            read_token_file(&path).map(|t| (t, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            getrandom(&mut bytes).map_err(io)?;
            let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            // Written beside, then linked into place: never half a token, never two.
            let tmp = data.join(format!(".token.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
            std::io::Write::write_all(&mut f, format!("{token}\n").as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            drop(f);
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => Ok((token, true)),
                // Another start made one meanwhile: use it.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_token_file(&path).map(|t| (t, false)),
                Err(e) => Err(io(e)),
            }
        }
        Err(e) => Err(io(e)),
    }
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::open("/dev/urandom")?;
    f.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn door() -> Door {
        Door::new("s3cret".into(), "127.0.0.1:7878".parse().unwrap(), &["sts.lab".into()], &[])
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn hosts_are_the_servers_own_names() {
        let d = door();
        for ok in ["127.0.0.1:7878", "localhost:7878", "LOCALHOST", "[::1]:7878", "sts.lab:7878", "127.0.0.2"] {
            assert!(d.host_allowed(ok), "{ok}");
        }
        for bad in ["evil.example", "evil.example:7878", "127.0.0.1:80", "10.0.0.1:7878", "localhost.evil", "", "[::1"]
        {
            assert!(!d.host_allowed(bad), "{bad}");
        }
        let any = Door::new("t".into(), "0.0.0.0:7878".parse().unwrap(), &[], &[]);
        assert!(any.host_allowed("10.1.2.3:7878"));
        assert!(!any.host_allowed("rebound.example:7878"));
    }

    #[test]
    fn the_token_origin_and_host_are_checked_in_order() {
        let d = door();
        let get = Method::GET;
        assert_eq!(d.check(&get, &headers(&[("host", "localhost:7878"), ("authorization", "Bearer s3cret")])), Ok(()));
        assert_eq!(d.check(&get, &headers(&[("host", "localhost:7878"), ("authorization", "bearer s3cret")])), Ok(()));
        assert_eq!(
            d.check(&get, &headers(&[("host", "localhost:7878"), ("authorization", "Bearer s3cre")])),
            Err(Refusal::Token)
        );
        assert_eq!(d.check(&get, &headers(&[("host", "localhost:7878")])), Err(Refusal::Token));
        assert!(matches!(
            d.check(&get, &headers(&[("host", "evil.example"), ("authorization", "Bearer s3cret")])),
            Err(Refusal::Host(_))
        ));
        assert!(matches!(
            d.check(
                &Method::POST,
                &headers(&[
                    ("host", "localhost:7878"),
                    ("origin", "http://evil.example"),
                    ("authorization", "Bearer s3cret")
                ])
            ),
            Err(Refusal::Origin(_))
        ));
        let allowed =
            Door::new("s3cret".into(), "127.0.0.1:7878".parse().unwrap(), &[], &["http://ci.lab:8080/".into()]);
        assert_eq!(
            allowed.check(
                &Method::POST,
                &headers(&[
                    ("host", "localhost:7878"),
                    ("origin", "http://ci.lab:8080"),
                    ("authorization", "Bearer s3cret")
                ])
            ),
            Ok(())
        );
    }

    #[test]
    fn the_cookie_reads_but_never_writes() {
        let d = door();
        let h = headers(&[("host", "localhost:7878"), ("cookie", "a=b; sts_token=s3cret")]);
        assert_eq!(d.check(&Method::GET, &h), Ok(()));
        assert_eq!(d.check(&Method::POST, &h), Err(Refusal::Token));
        assert_eq!(d.check(&Method::DELETE, &h), Err(Refusal::Token));
    }

    #[test]
    fn token_files_are_bounded_and_plain() {
        let dir = std::env::temp_dir().join(format!("sts-door-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t");
        std::fs::write(&f, "abc\n").unwrap();
        assert_eq!(read_token_file(&f).unwrap(), "abc");
        for bad in ["", "\n", "a b\n", "ab\ncd\n", "ab\0"] {
            std::fs::write(&f, bad).unwrap();
            assert!(read_token_file(&f).is_err(), "{bad:?}");
        }
        std::fs::write(&f, "x".repeat(MAX_TOKEN_LEN + 10)).unwrap();
        assert!(read_token_file(&f).is_err());
        assert!(read_token_file(Path::new("/dev/zero")).is_err());
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(read_token_file(&fifo).unwrap_err().to_string().contains("not a regular file"));
        // The data directory's own token: made once, owner-only, then read back.
        let (made, new) = data_token(&dir).unwrap();
        assert!(new && made.len() == 64);
        assert_eq!(std::fs::metadata(dir.join("token")).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(data_token(&dir).unwrap(), (made, false));
        std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(data_token(&dir).unwrap_err().to_string().contains("readable by others"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
