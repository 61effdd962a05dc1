//! The body every response has, whole or streamed, and the helpers that make whole ones.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response's body: whole (`full`) or streamed (the speech handler's).
pub(crate) type Body = BoxBody<Bytes, BoxError>;

pub(crate) fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

pub(crate) fn json(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
