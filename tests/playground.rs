//! The browser playground (`GET /`) in a real browser: starts `speechstream serve` with the
//! synthetic engine on free loopback ports, and once with real voices that declare their
//! languages (hibari's `heart`, American English, beside the packaged Japanese Kokoro voices, on
//! the CPU), and runs tests/browser/playground.test.mjs (node's test runner driving Debian's
//! chromium through playwright-core) against them.
//!
//! Needs node 20+, chromium (`/usr/bin/chromium`, or `$CHROMIUM`), `node_modules/` and the voices
//! in `.cache/` (hibari/, kokoro/; or `$SPEECHSTREAM_CACHE`), all installed by scripts/setup.sh.
//! Set SPEECHSTREAM_SKIP_BROWSER_TESTS=1 to skip it on a machine without them;
//! SPEECHSTREAM_UPDATE_SCREENSHOT=1 to rewrite docs/playground.png.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SERVER_START: Duration = Duration::from_secs(30);
const BROWSER_TESTS: Duration = Duration::from_secs(300);
const API_KEY: &str = "playground-test-key";
const SETUP_HINT: &str = "run scripts/setup.sh (it installs chromium and the npm packages), \
                          or set SPEECHSTREAM_SKIP_BROWSER_TESTS=1 to skip the browser tests";

/// A `speechstream serve` child process, killed on drop.
struct Server {
    child: Child,
    url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// `speechstream serve` with the synthetic engine and `extra`.
    fn start(extra: &[&str]) -> Server {
        Server::start_engine("synthetic", extra)
    }

    fn start_engine(engine: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_speechstream"))
            .args(["serve", "--engine", engine, "--host", "127.0.0.1", "--port", "0"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start target/…/speechstream serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (found, address) = mpsc::channel();
        let lines = log.clone();
        // Keep draining stderr for the server's whole life, or it blocks on a full pipe.
        std::thread::spawn(move || {
            let mut found = Some(found);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening addr=").nth(1) {
                    if let Some(found) = found.take() {
                        let _ = found.send(addr.split_whitespace().next().unwrap_or_default().to_owned());
                    }
                }
                lines.lock().unwrap().push(line);
            }
        });
        let addr = match address.recv_timeout(SERVER_START) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("speechstream serve {extra:?} did not start listening:\n{}", log.lock().unwrap().join("\n"));
            }
        };
        Server { child, url: format!("http://{addr}/"), log }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The voices' folders (hibari/, kokoro/), as scripts/setup.sh lays them out.
fn cache() -> PathBuf {
    std::env::var_os("SPEECHSTREAM_CACHE").map_or_else(|| root().join(".cache"), PathBuf::from)
}

/// A server whose voices declare their languages: hibari's `heart` (en-US, from its
/// voices.json) and the packaged Kokoro voices (`jf_alpha`, ...: ja), on the CPU.
fn start_with_languages() -> Server {
    let cache = cache();
    for file in ["hibari/hibari.onnx", "kokoro/kokoro-v1.0.int8.onnx", "kokoro/voices_ja.npz"] {
        let path = cache.join(file);
        assert!(path.is_file(), "the browser tests need {}: {SETUP_HINT}", path.display());
    }
    let cache = cache.to_str().expect("a UTF-8 cache path");
    Server::start_engine("hibari", &["--voices-dir", cache, "--device", "cpu", "--workers", "1", "--admission", "off"])
}

/// Node's major version, or why there is no usable node.
fn node_major() -> Result<u32, String> {
    let output = Command::new("node").arg("--version").output().map_err(|e| format!("`node` not found ({e})"))?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .ok_or_else(|| format!("cannot read node's version from {version:?}"))
}

fn check_prerequisites(chromium: &Path) {
    match node_major() {
        Ok(major) if major >= 20 => {}
        Ok(major) => {
            panic!("the browser tests need node 20 or later (playwright-core); found node {major}: {SETUP_HINT}")
        }
        Err(e) => panic!("the browser tests need node: {e}; {SETUP_HINT}"),
    }
    assert!(chromium.exists(), "the browser tests need chromium at {}: {SETUP_HINT}", chromium.display());
    let playwright = root().join("node_modules/playwright-core/package.json");
    assert!(playwright.exists(), "the browser tests need {}: {SETUP_HINT}", playwright.display());
}

fn wants_api_key_flag() -> bool {
    let help =
        Command::new(env!("CARGO_BIN_EXE_speechstream")).args(["serve", "--help"]).output().expect("serve --help");
    String::from_utf8_lossy(&help.stdout).contains("--api-key")
}

/// Run `command` to completion or until `limit`, returning its exit status and its output.
fn run_with_limit(mut command: Command, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for node") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = format!("{}{}", stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
    (status, output)
}

#[test]
fn playground_works_in_chromium() {
    if std::env::var_os("SPEECHSTREAM_SKIP_BROWSER_TESTS").is_some_and(|v| v != "0") {
        eprintln!("SPEECHSTREAM_SKIP_BROWSER_TESTS is set: skipping the browser tests");
        return;
    }
    let chromium = std::env::var_os("CHROMIUM").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromium".into());
    check_prerequisites(&chromium);

    let fast = Server::start(&[]);
    let paced = Server::start(&["--synthetic-real-time-factor", "1.0"]);
    let keyed = wants_api_key_flag().then(|| Server::start(&["--api-key", API_KEY]));
    let languages = start_with_languages();
    if keyed.is_none() {
        eprintln!("this build has no `serve --api-key`: the browser test's API key case is skipped");
    }
    let screenshot = if std::env::var_os("SPEECHSTREAM_UPDATE_SCREENSHOT").is_some_and(|v| v != "0") {
        root().join("docs/playground.png")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("playground.png")
    };

    let mut node = Command::new("node");
    node.current_dir(root())
        .args(["--test", "--test-reporter=spec", "--test-timeout=120000", "tests/browser/playground.test.mjs"])
        .env("PLAYGROUND_URL", &fast.url)
        .env("PLAYGROUND_PACED_URL", &paced.url)
        .env("PLAYGROUND_LANGUAGES_URL", &languages.url)
        .env("PLAYGROUND_SCREENSHOT", &screenshot)
        .env("CHROMIUM", &chromium);
    if let Some(keyed) = &keyed {
        node.env("PLAYGROUND_KEYED_URL", &keyed.url).env("PLAYGROUND_API_KEY", API_KEY);
    }
    let (status, output) = run_with_limit(node, BROWSER_TESTS);
    let server_logs = || {
        [&fast, &paced, &languages]
            .into_iter()
            .chain(keyed.as_ref())
            .map(|s| s.log.lock().unwrap().join("\n"))
            .collect::<Vec<_>>()
    };
    match status {
        Some(status) if status.success() => eprintln!("{output}\nscreenshot: {}", screenshot.display()),
        Some(status) => {
            panic!(
                "the browser tests failed ({status}):\n{output}\n--- server logs ---\n{}",
                server_logs().join("\n---\n")
            )
        }
        None => panic!("the browser tests took over {BROWSER_TESTS:?}:\n{output}"),
    }
}

/// A plain HTTP/1.1 GET against `server`: the status line's code, the headers (lowercased
/// names) and the body.
fn get(server: &Server, path: &str) -> (u16, Vec<(String, String)>, String) {
    let authority = server.url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(authority).expect("connect");
    stream.set_read_timeout(Some(SERVER_START)).expect("read timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n").expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a whole response");
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Without a browser: the page and its files come with their content types, and without the
/// API key on a server that wants one (the key is typed into the page); the engine's
/// description, `/playground.json`, wants the key there.
#[test]
fn playground_files_are_served_with_their_types() {
    let plain = Server::start(&[]);
    let keyed = wants_api_key_flag().then(|| Server::start(&["--api-key", API_KEY]));
    for server in [Some(&plain), keyed.as_ref()].into_iter().flatten() {
        let json = if std::ptr::eq(server, &plain) {
            "/playground.json".to_owned()
        } else {
            assert_eq!(get(server, "/playground.json").0, 401);
            format!("/playground.json?api_key={API_KEY}")
        };
        for (path, content_type, needle) in [
            ("/", "text/html; charset=utf-8", "<title>speechstream playground</title>"),
            ("/playground.js", "text/javascript; charset=utf-8", "window.playground"),
            ("/playground.css", "text/css; charset=utf-8", ".word.current"),
            (json.as_str(), "application/json", "\"word_timestamps\":true"),
        ] {
            let (status, headers, body) = get(server, path);
            assert_eq!(status, 200, "GET {path}");
            assert_eq!(header(&headers, "content-type"), Some(content_type), "GET {path}");
            assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"), "GET {path}");
            assert!(body.contains(needle), "GET {path}: no {needle:?} in the body");
        }
    }
    assert_eq!(get(&plain, "/playground.txt").0, 404);
}
