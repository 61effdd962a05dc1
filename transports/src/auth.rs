//! `--api-key`: the key a request must carry, as `Authorization: Bearer <key>` or, for browsers
//! (whose WebSocket API cannot set headers), as the `api_key` query parameter.

use hyper::header::AUTHORIZATION;
use hyper::Request;

/// Whether `request` carries `key`, as its one credential. A request with several (two
/// `Authorization` headers, two `api_key` parameters, or one of each) is refused whatever they
/// hold: otherwise each request could try several guesses.
pub(crate) fn authorized<B>(request: &Request<B>, key: &str) -> bool {
    let headers = request.headers().get_all(AUTHORIZATION).iter().map(|value| value.as_bytes());
    let parameters = request
        .uri()
        .query()
        .into_iter()
        .flat_map(|query| query.split('&'))
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .filter(|(name, _)| *name == "api_key")
        .map(|(_, value)| value);
    let mut credentials = headers.map(Credential::Header).chain(parameters.map(Credential::Parameter));
    let (Some(credential), None) = (credentials.next(), credentials.next()) else { return false };
    match credential {
        Credential::Header(value) => std::str::from_utf8(value)
            .ok()
            .and_then(|value| value.trim().split_once(' '))
            .is_some_and(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer") && same(token.trim(), key)),
        Credential::Parameter(value) => percent_decode(value).is_some_and(|value| same(&value, key)),
    }
}

enum Credential<'a> {
    Header(&'a [u8]),
    Parameter(&'a str),
}

/// Compares in time independent of where the strings differ, so response timing doesn't
/// reveal how much of a guess was right.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = a.len() ^ b.len();
    for (n, byte) in b.iter().enumerate() {
        diff |= usize::from(a.get(n).copied().unwrap_or(0) ^ byte);
    }
    diff == 0
}

/// A query value's bytes (`%XX` escapes and `+` as space); `None` if malformed or not UTF-8.
fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut n = 0;
    while n < bytes.len() {
        match bytes[n] {
            b'%' => {
                let hex = value.get(n + 1..n + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                n += 3;
            }
            b'+' => {
                out.push(b' ');
                n += 1;
            }
            byte => {
                out.push(byte);
                n += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, authorization: Option<&str>) -> Request<()> {
        let mut builder = Request::builder().uri(uri);
        if let Some(value) = authorization {
            builder = builder.header(AUTHORIZATION, value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn bearer_header_or_query_parameter() {
        assert!(authorized(&request("/v1/models", Some("Bearer s3cret")), "s3cret"));
        assert!(authorized(&request("/v1/models", Some("bearer  s3cret ")), "s3cret"));
        assert!(authorized(&request("/x?a=1&api_key=s3%2Fc+t", None), "s3/c t"));
        assert!(!authorized(&request("/v1/models", Some("Bearer s3cre")), "s3cret"));
        assert!(!authorized(&request("/v1/models", Some("Basic s3cret")), "s3cret"));
        assert!(!authorized(&request("/v1/models", None), "s3cret"));
        assert!(!authorized(&request("/x?api_key=%zz", None), "s3cret"));
        assert!(!authorized(&request("/x?key=s3cret", None), "s3cret"));
    }

    #[test]
    fn two_credentials_are_refused_even_if_one_is_right() {
        let two_headers = Request::builder()
            .uri("/v1/models")
            .header(AUTHORIZATION, "Bearer nope")
            .header(AUTHORIZATION, "Bearer s3cret")
            .body(())
            .unwrap();
        assert!(!authorized(&two_headers, "s3cret"));
        assert!(!authorized(&request("/x?api_key=nope&api_key=s3cret", None), "s3cret"));
        assert!(!authorized(&request("/x?api_key=s3cret", Some("Bearer s3cret")), "s3cret"));
        assert!(!authorized(&request("/x?api_key&api_key=s3cret", None), "s3cret"));
    }

    #[test]
    fn comparison() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("ab", "abc"));
        assert!(!same("abcd", "abc"));
        assert!(!same("", "a") && !same("a", ""));
    }
}
