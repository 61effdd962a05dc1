//! The browser playground: one static page (HTML, JS and CSS embedded in the binary, no CDN)
//! that speaks to the server's own WebSocket endpoint, plus a small JSON description of the
//! engine (its voices and their languages, sample rate and whether it reports word timings) for
//! the page's form.
//!
//! The page itself carries no secret and is served without the API key: the user types the key
//! into the page, which then passes it on the WebSocket URL (and to `/playground.json`, which,
//! listing models and voices, wants the key like `/v1/models`). The page's code is in
//! `transports/assets/`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use speechstream_core::engine::EngineCapabilities;
use speechstream_core::session::SessionOptions;

use crate::paths::STREAM_PATH;
use crate::shared::Shared;

const INDEX_HTML: &str = include_str!("../assets/playground.html");
const PLAYGROUND_JS: &str = include_str!("../assets/playground.js");
const PLAYGROUND_CSS: &str = include_str!("../assets/playground.css");

/// Scripts, styles and images only from this server; the WebSocket to this server (`'self'`
/// covers ws: to the same host in CSP 3, the explicit schemes cover older browsers); downloads
/// are blob: URLs.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self' ws: wss:; media-src 'self' blob:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// Whether `path` is one of the page's own files (not its JSON description).
pub(crate) fn is_page(path: &str) -> bool {
    matches!(path, "/" | "/playground" | "/playground.js" | "/playground.css")
}

/// The playground's response to `request`, or `None` when the request is not for it.
pub(crate) fn route(request: &Request<Incoming>, shared: &Shared) -> Option<Response<Full<Bytes>>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return None;
    }
    let (body, content_type) = match request.uri().path() {
        "/" | "/playground" => (Bytes::from_static(INDEX_HTML.as_bytes()), "text/html; charset=utf-8"),
        "/playground.js" => (Bytes::from_static(PLAYGROUND_JS.as_bytes()), "text/javascript; charset=utf-8"),
        "/playground.css" => (Bytes::from_static(PLAYGROUND_CSS.as_bytes()), "text/css; charset=utf-8"),
        "/playground.json" => (Bytes::from(info(shared.catalog.capabilities(), &shared.options)), "application/json"),
        _ => return None,
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Small and embedded: always revalidate, so a new binary's page is never mixed with an old script.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(HeaderName::from_static("x-content-type-options"), HeaderValue::from_static("nosniff"));
    Some(response)
}

/// What the page needs to build its form and keep its session alive; nothing here is secret.
/// `voices` lists the voices' names; `voice_languages` maps each voice that declares a language
/// to it (a BCP 47 tag), for the page's picker to group them by (voices without one are left
/// out of it).
fn info(capabilities: &EngineCapabilities, options: &SessionOptions) -> String {
    let languages: serde_json::Map<String, serde_json::Value> = capabilities
        .voices
        .iter()
        .filter_map(|v| Some((v.id.clone(), serde_json::Value::from(v.language.as_deref()?))))
        .collect();
    serde_json::json!({
        "stream_path": STREAM_PATH,
        "models": capabilities.models,
        "voices": capabilities.voices.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
        "voice_languages": languages,
        "sample_rate": capabilities.sample_rate,
        "word_timestamps": capabilities.word_timestamps,
        "idle_timeout_ms": u64::try_from(options.idle_timeout.as_millis()).unwrap_or(u64::MAX),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_reference_each_other() {
        assert!(INDEX_HTML.contains("src=\"/playground.js\""));
        assert!(INDEX_HTML.contains("href=\"/playground.css\""));
        assert!(PLAYGROUND_JS.contains("/playground.json"));
    }

    #[test]
    fn page_loads_nothing_from_elsewhere() {
        for asset in [INDEX_HTML, PLAYGROUND_JS, PLAYGROUND_CSS] {
            assert!(!asset.contains("http://") && !asset.contains("https://"), "an external URL in an asset");
        }
    }

    #[test]
    fn info_describes_the_engine() {
        let capabilities = EngineCapabilities::new("m", 24000).with_voices(["a", "b"]).with_word_timestamps(true);
        let options =
            SessionOptions { idle_timeout: std::time::Duration::from_millis(1500), ..SessionOptions::default() };
        let info: serde_json::Value = serde_json::from_str(&info(&capabilities, &options)).unwrap();
        assert_eq!(
            info,
            serde_json::json!({
                "stream_path": STREAM_PATH,
                "models": ["m"],
                "voices": ["a", "b"],
                "voice_languages": {},
                "sample_rate": 24000,
                "word_timestamps": true,
                "idle_timeout_ms": 1500,
            })
        );
    }

    #[test]
    fn info_gives_each_voices_language() {
        use speechstream_core::engine::Voice;
        let capabilities = EngineCapabilities::new("kokoro", 24000).with_voices([
            Voice::new("af_heart").with_language("en-US"),
            Voice::new("jf_alpha").with_language("ja").with_description("Alpha (Japanese, female)"),
            Voice::new("Mystery"),
            Voice::new("zf_xiaobei").with_language("zh-CN"),
        ]);
        let info: serde_json::Value = serde_json::from_str(&info(&capabilities, &SessionOptions::default())).unwrap();
        // The names as before, in the engine's order, every voice listed...
        assert_eq!(info["voices"], serde_json::json!(["af_heart", "jf_alpha", "Mystery", "zf_xiaobei"]));
        // ... and the language of each that declares one, under its name as listed.
        assert_eq!(
            info["voice_languages"],
            serde_json::json!({"af_heart": "en-US", "jf_alpha": "ja", "zf_xiaobei": "zh-CN"})
        );
    }
}
