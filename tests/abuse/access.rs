//! One key check per request, and the same rule for everything that reveals configuration.

use std::sync::Arc;

use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::session::SessionOptions;
use speechstream_transports::ServerConfig;

use crate::peers::{exchange, status_and_json};
use crate::support::TestServer;

async fn status(server: &TestServer, path: &str, headers: &str) -> u16 {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\r\n");
    status_and_json(&exchange(server, request.as_bytes()).await).0
}

// Issue 9: two credentials used to be tried one after the other (several guesses per
// request), and /playground.json listed models and voices without the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_carry_one_credential_and_configuration_wants_the_key() {
    let mut config = ServerConfig::new(SessionOptions::default());
    config.api_key = Some("s3cret".into());
    let server = TestServer::start_with(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), config).await;
    let right = "Authorization: Bearer s3cret\r\n";
    assert_eq!(status(&server, "/v1/models", right).await, 200);
    assert_eq!(status(&server, "/v1/models?api_key=s3cret", "").await, 200);
    // Two credentials, one of them right: refused.
    assert_eq!(status(&server, "/v1/models", &format!("Authorization: Bearer guess\r\n{right}")).await, 401);
    assert_eq!(status(&server, "/v1/models?api_key=guess&api_key=s3cret", "").await, 401);
    assert_eq!(status(&server, "/v1/models?api_key=s3cret", right).await, 401);
    // The playground's description of the engine, like /v1/models.
    assert_eq!(status(&server, "/playground.json", "").await, 401);
    assert_eq!(status(&server, "/playground.json", right).await, 200);
    server.shutdown().await;
}
