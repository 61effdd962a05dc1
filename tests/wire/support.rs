//! A server on loopback, a WebSocket client, and engines whose behaviour tests control.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use speechstream_core::engine::{
    CodecFlags, CodecSpec, Engine, EngineCapabilities, EngineEvent, EngineEventKind, EventSink, RequestId,
    SynthesisRequest, TrySendError, WordTiming,
};
use speechstream_core::session::SessionOptions;
use speechstream_transports::{serve, ServerConfig, STREAM_PATH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Generous: the machine running the tests may be slow and busy.
pub const TIMEOUT: Duration = Duration::from_secs(30);

pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl TestServer {
    pub async fn start(engine: Arc<dyn Engine>, options: SessionOptions) -> TestServer {
        TestServer::start_with(engine, ServerConfig::new(options)).await
    }

    /// A server that also speaks Wyoming; its Wyoming address (used by tests/abuse).
    #[allow(dead_code)]
    pub async fn start_with_wyoming(
        engine: Arc<dyn Engine>,
        config: ServerConfig,
        options: speechstream_core::wyoming::WyomingOptions,
    ) -> (TestServer, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let wyoming = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let wyoming_addr = wyoming.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let wyoming = speechstream_transports::WyomingListener { listener: wyoming, options };
        let task =
            tokio::spawn(speechstream_transports::serve_with_wyoming(listener, Some(wyoming), engine, config, async {
                let _ = stopped.await;
            }));
        (TestServer { addr, stop: Some(stop), task }, wyoming_addr)
    }

    pub async fn start_with(engine: Arc<dyn Engine>, config: ServerConfig) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, engine, config, async {
            let _ = stopped.await;
        }));
        TestServer { addr, stop: Some(stop), task }
    }

    pub async fn connect(&self) -> Client {
        let url = format!("ws://{}{}", self.addr, STREAM_PATH);
        let (ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect timed out")
            .expect("connect");
        Client { ws }
    }

    /// Signal shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Signal shutdown and wait for `serve` to return.
    pub async fn shutdown(mut self) {
        self.begin_shutdown();
        tokio::time::timeout(TIMEOUT, &mut self.task)
            .await
            .expect("server did not shut down")
            .expect("server task panicked")
            .expect("serve failed");
    }

    /// A plain HTTP/1.1 request; returns the status code and body.
    pub async fn http(&self, method: &str, path: &str) -> (u16, String) {
        self.try_http(method, path).await.expect("http")
    }

    /// [`TestServer::http`], with the connection's error (a reset, say) returned.
    pub async fn try_http(&self, method: &str, path: &str) -> io::Result<(u16, String)> {
        let exchange = async {
            let mut stream = TcpStream::connect(self.addr).await?;
            let request = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await?;
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await?;
            io::Result::Ok(response)
        };
        let response = tokio::time::timeout(TIMEOUT, exchange).await.expect("http timed out")?;
        let response = String::from_utf8(response).expect("utf-8 response");
        let (head, body) = response.split_once("\r\n\r\n").expect("response head");
        let status = head.split_whitespace().nth(1).and_then(|code| code.parse().ok()).expect("status code");
        Ok((status, body.to_owned()))
    }
}

/// The set-up most WebSocket tests share: a server on loopback with `engine`, a client connected
/// to it, and a `session.config` with the keys of `config` sent. The server runs while the
/// returned `TestServer` lives.
pub async fn configured(engine: Arc<dyn Engine>, options: SessionOptions, config: Value) -> (TestServer, Client) {
    let server = TestServer::start(engine, options).await;
    let mut client = server.connect().await;
    let mut message = serde_json::json!({"type": "session.config"});
    if let (Some(message), Some(config)) = (message.as_object_mut(), config.as_object()) {
        message.extend(config.clone());
    }
    client.send(message).await;
    (server, client)
}

#[derive(Debug, PartialEq)]
pub enum Received {
    Json(Value),
    Binary(Vec<u8>),
    /// A close frame (with its code) or the end of the stream (`None`).
    Closed(Option<u16>),
}

pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Client {
    pub async fn send(&mut self, message: Value) {
        self.send_text(&message.to_string()).await;
    }

    pub async fn send_text(&mut self, text: &str) {
        self.send_message(Message::text(text)).await;
    }

    pub async fn send_message(&mut self, message: Message) {
        tokio::time::timeout(TIMEOUT, self.ws.send(message)).await.expect("send timed out").expect("send");
    }

    pub async fn recv(&mut self) -> Received {
        loop {
            let next = tokio::time::timeout(TIMEOUT, self.ws.next()).await.expect("no message from the server in time");
            return match next {
                Some(Ok(Message::Text(text))) => {
                    Received::Json(serde_json::from_str(text.as_str()).expect("server sent bad JSON"))
                }
                Some(Ok(Message::Binary(bytes))) => Received::Binary(bytes.to_vec()),
                Some(Ok(Message::Close(frame))) => Received::Closed(frame.map(|frame| u16::from(frame.code))),
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Err(_)) | None => Received::Closed(None),
            };
        }
    }

    pub async fn json(&mut self) -> Value {
        match self.recv().await {
            Received::Json(value) => value,
            other => panic!("expected a JSON message, got {other:?}"),
        }
    }

    pub async fn binary(&mut self) -> Vec<u8> {
        match self.recv().await {
            Received::Binary(bytes) => bytes,
            other => panic!("expected a binary frame, got {other:?}"),
        }
    }

    /// Expect the server to close (a close frame, then the end of the stream).
    pub async fn closed(&mut self) -> Option<u16> {
        match self.recv().await {
            Received::Closed(code) => code,
            other => panic!("expected the connection to close, got {other:?}"),
        }
    }

    /// Everything up to and including the next `session.done`.
    pub async fn until_session_done(&mut self) -> Vec<Received> {
        let mut seen = Vec::new();
        loop {
            let message = self.recv().await;
            let done = matches!(&message, Received::Json(v) if v["type"] == "session.done");
            let closed = matches!(message, Received::Closed(_));
            seen.push(message);
            if done {
                return seen;
            }
            assert!(!closed, "closed before session.done: {seen:?}");
        }
    }
}

/// Records every request and abort, then delegates.
pub struct Recorded<E> {
    inner: E,
    requests: Mutex<Vec<(RequestId, SynthesisRequest)>>,
    aborts: Mutex<Vec<RequestId>>,
    finished: Arc<Mutex<Vec<RequestId>>>,
}

/// Passes events on, noting the requests whose `Finished` the consumer accepted.
struct NotingSink {
    inner: Box<dyn EventSink>,
    finished: Arc<Mutex<Vec<RequestId>>>,
}

impl EventSink for NotingSink {
    fn send(&self, event: EngineEvent) -> bool {
        // Noted before delivery: once delivered, the client may see session.done (and the test
        // look at this list) before this thread gets to run again.
        self.note(&event);
        self.inner.send(event)
    }

    fn try_send(&self, event: EngineEvent) -> Result<(), TrySendError> {
        let finished = (event.kind == EngineEventKind::Finished).then_some(event.id);
        let sent = self.inner.try_send(event);
        // A Full event comes back to the engine and will be offered again: note it once, sent.
        if let (Some(id), Ok(())) = (finished, &sent) {
            self.finished.lock().expect("lock").push(id);
        }
        sent
    }
}

impl NotingSink {
    fn note(&self, event: &EngineEvent) {
        if event.kind == EngineEventKind::Finished {
            self.finished.lock().expect("lock").push(event.id);
        }
    }
}

impl<E: Engine> Recorded<E> {
    pub fn new(inner: E) -> Arc<Recorded<E>> {
        Arc::new(Recorded {
            inner,
            requests: Mutex::new(Vec::new()),
            aborts: Mutex::new(Vec::new()),
            finished: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// Requests whose `Finished` event was handed to the server.
    pub fn finished(&self) -> Vec<RequestId> {
        self.finished.lock().expect("lock").clone()
    }

    pub fn inner(&self) -> &E {
        &self.inner
    }

    pub fn requests(&self) -> Vec<(RequestId, SynthesisRequest)> {
        self.requests.lock().expect("lock").clone()
    }

    pub fn aborts(&self) -> Vec<RequestId> {
        self.aborts.lock().expect("lock").clone()
    }

    /// Wait (generously) until `n` aborts were recorded.
    pub async fn await_aborts(&self, n: usize) -> Vec<RequestId> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let aborts = self.aborts();
            if aborts.len() >= n {
                return aborts;
            }
            assert!(tokio::time::Instant::now() < deadline, "expected {n} aborts, saw {aborts:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl<E: Engine> Engine for Recorded<E> {
    fn capabilities(&self) -> &EngineCapabilities {
        self.inner.capabilities()
    }

    fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>) {
        self.requests.lock().expect("lock").push((id, request.clone()));
        let sink = NotingSink { inner: sink, finished: self.finished.clone() };
        self.inner.submit(id, request, Box::new(sink));
    }

    fn abort(&self, id: RequestId) {
        self.aborts.lock().expect("lock").push(id);
        self.inner.abort(id);
    }
}

/// One step of a scripted request.
#[derive(Clone, Debug)]
pub enum Step {
    Audio(Vec<u8>, u32),
    Words(Vec<WordTiming>),
    Codec(Vec<i32>, bool),
    Fail(String),
    /// Produce nothing more until the request is aborted (then stop without finishing).
    HoldUntilAborted,
}

/// An engine that plays the same script for every request, like the reference tests' fakes.
pub struct Scripted {
    capabilities: EngineCapabilities,
    script: Vec<Step>,
    running: Arc<Mutex<Vec<Running>>>,
}

type Running = (RequestId, Arc<AbortFlag>);

#[derive(Default)]
struct AbortFlag {
    aborted: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Scripted {
    pub fn new(script: Vec<Step>) -> Scripted {
        Scripted {
            capabilities: EngineCapabilities::new("scripted", 24000).with_voices(["vivian", "serena"]),
            script,
            running: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn with_word_timestamps(mut self) -> Scripted {
        self.capabilities.word_timestamps = true;
        self
    }

    /// The codec spec of the reference tests.
    pub fn with_codec(mut self) -> Scripted {
        self.capabilities.codec = Some(CodecSpec::new(16, 2048, 12.5, 24000).with_decoder_id("d"));
        self
    }
}

impl Engine for Scripted {
    fn capabilities(&self) -> &EngineCapabilities {
        &self.capabilities
    }

    fn submit(&self, id: RequestId, _request: SynthesisRequest, sink: Box<dyn EventSink>) {
        let flag = Arc::new(AbortFlag::default());
        self.running.lock().expect("lock").push((id, flag.clone()));
        let mut script: VecDeque<Step> = self.script.clone().into();
        std::thread::spawn(move || {
            let send = |kind| sink.send(EngineEvent { id, kind });
            while let Some(step) = script.pop_front() {
                if flag.aborted.load(Ordering::SeqCst) {
                    return;
                }
                let delivered = match step {
                    Step::Audio(pcm, sample_rate) => send(EngineEventKind::Audio { pcm, sample_rate }),
                    Step::Words(words) => send(EngineEventKind::Words(words)),
                    Step::Codec(codes, eos) => {
                        send(EngineEventKind::Codec { codes, flags: CodecFlags { eos, ..CodecFlags::default() } })
                    }
                    Step::Fail(message) => {
                        send(EngineEventKind::Failed(message.into()));
                        return;
                    }
                    Step::HoldUntilAborted => {
                        let mut guard = flag.lock.lock().expect("lock");
                        while !flag.aborted.load(Ordering::SeqCst) {
                            let (next, timeout) = flag.wake.wait_timeout(guard, TIMEOUT * 2).expect("wait");
                            guard = next;
                            if timeout.timed_out() {
                                break;
                            }
                        }
                        return;
                    }
                };
                if !delivered {
                    return;
                }
            }
            send(EngineEventKind::Finished);
        });
    }

    fn abort(&self, id: RequestId) {
        for (running, flag) in self.running.lock().expect("lock").iter() {
            if *running == id {
                let _guard = flag.lock.lock().expect("lock");
                flag.aborted.store(true, Ordering::SeqCst);
                flag.wake.notify_all();
            }
        }
    }
}

/// A codec frame's header fields and body length: (seq, n_frames, flags, body bytes).
pub fn codec_header(frame: &[u8]) -> (u32, u16, u8, usize) {
    assert!(frame.len() >= 7, "codec frame shorter than its header");
    let seq = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
    let n_frames = u16::from_le_bytes([frame[4], frame[5]]);
    (seq, n_frames, frame[6], frame.len() - 7)
}
