//! A minimal WebSocket client over a plain TCP stream: enough of RFC 6455's handshake to
//! talk to a loopback server, then fastwebsockets for the framing. No TLS, no hyper.

use std::io;

use fastwebsockets::{FragmentCollector, Role, WebSocket};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub type Client = FragmentCollector<TcpStream>;

/// A `ws://host:port/path` URL taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsUrl {
    /// `host:port`, as given (the Host header and the address to connect to).
    pub authority: String,
    pub path: String,
}

impl WsUrl {
    pub fn parse(url: &str) -> Result<WsUrl, String> {
        let rest = url.strip_prefix("ws://").ok_or_else(|| format!("only ws:// URLs are supported, got {url:?}"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("no host in {url:?}"));
        }
        let authority = if authority.contains(':') { authority.to_string() } else { format!("{authority}:80") };
        Ok(WsUrl { authority, path: path.to_string() })
    }
}

/// Connect and complete the opening handshake. TCP_NODELAY is on: the client's small JSON
/// frames must not wait for a delayed ACK, or time to first audio measures Nagle.
pub async fn connect(url: &WsUrl) -> io::Result<Client> {
    let mut stream = TcpStream::connect(&url.authority).await?;
    stream.set_nodelay(true)?;
    // The key must be 16 bytes in base64 (RFC 6455's sample nonce here); servers echo a hash
    // of it, which we do not check (a loopback benchmark, not a security boundary).
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        url.path, url.authority
    );
    stream.write_all(request.as_bytes()).await?;

    // Read the response head. The server sends nothing after it until the client speaks,
    // so reading past the head would mean a protocol surprise; that is reported, not hidden.
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed during the WebSocket handshake",
            ));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = find_head_end(&head) {
            check_status(&head)?;
            if end != head.len() {
                return Err(io::Error::other("server sent data right after the handshake response"));
            }
            break;
        }
        if head.len() > 16 * 1024 {
            return Err(io::Error::other("handshake response head too large"));
        }
    }
    let mut ws = WebSocket::after_handshake(stream, Role::Client);
    ws.set_auto_close(true);
    ws.set_auto_pong(true);
    Ok(FragmentCollector::new(ws))
}

fn check_status(head: &[u8]) -> io::Result<()> {
    let status_line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let status_line = String::from_utf8_lossy(status_line);
    if status_line.split_whitespace().nth(1) != Some("101") {
        return Err(io::Error::other(format!("handshake refused: {}", status_line.trim_end())));
    }
    Ok(())
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = WsUrl::parse("ws://127.0.0.1:8901/v1/audio/speech/stream").unwrap();
        assert_eq!(u.authority, "127.0.0.1:8901");
        assert_eq!(u.path, "/v1/audio/speech/stream");
        assert_eq!(WsUrl::parse("ws://localhost").unwrap().authority, "localhost:80");
        assert!(WsUrl::parse("http://x/").is_err());
        assert!(WsUrl::parse("ws:///x").is_err());
    }
}
