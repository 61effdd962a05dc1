//! Throughput of the core alone: client frames through parse + `Session` + serialisation,
//! with engine events fed by hand (no engine, no sockets, no runtime).
//!
//!   cargo bench -p speechstream-benches --bench core_throughput [-- --seconds 2 --json]
//!
//! Each cycle on one session is `input.text`, `input.done`, the engine's audio chunks and
//! `Finished`, draining every output after every input as a transport would. Scenarios:
//!   empty   `input.text ""` + `input.done`: no engine request, only `session.done`;
//!           the floor cost of two client frames.
//!   pcm     streamed PCM (`stream_audio`): 1.0 s of 24 kHz audio in 80 ms chunks
//!           (12 x 3840 B + 1920 B), as the reference's null engine sends.
//!   wav     non-streamed WAV: the same chunks, collected and encoded as one frame.
//! Plain `Instant` timing; numbers are printed, never asserted.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use speechstream_core::engine::{EngineCapabilities, EngineEvent, EngineEventKind, RequestId};
use speechstream_core::session::{ClientFrame, EngineCommand, Output, Session, SessionOptions};

const SAMPLE_RATE: u32 = 24_000;
const AUDIO_SECONDS: f64 = 1.0;
const CHUNK_MS: u32 = 80;

#[derive(Clone, Copy)]
enum Scenario {
    Empty,
    Pcm,
    Wav,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Empty => "empty",
            Scenario::Pcm => "pcm",
            Scenario::Wav => "wav",
        }
    }

    fn config(self) -> &'static str {
        match self {
            Scenario::Empty | Scenario::Pcm => {
                r#"{"type":"session.config","response_format":"pcm","stream_audio":true}"#
            }
            Scenario::Wav => r#"{"type":"session.config","response_format":"wav"}"#,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Scenario::Empty => r#"{"type":"input.text","text":""}"#,
            Scenario::Pcm | Scenario::Wav => {
                r#"{"type":"input.text","text":"Hello from the speechstream core benchmark."}"#
            }
        }
    }
}

/// What one scenario did in its timed window.
#[derive(Default)]
struct Tally {
    cycles: u64,
    client_frames: u64,
    engine_events: u64,
    out_text_frames: u64,
    out_binary_frames: u64,
    out_bytes: u64,
    closed_early: bool,
}

fn options() -> Arc<SessionOptions> {
    Arc::new(SessionOptions::default())
}

fn capabilities() -> Arc<EngineCapabilities> {
    Arc::new(EngineCapabilities::new("synthetic", SAMPLE_RATE).with_voices(["default"]))
}

/// The reference null engine's chunks: a 440 Hz tone cut into `CHUNK_MS` pieces.
fn audio_chunks() -> Vec<Vec<u8>> {
    let n = (AUDIO_SECONDS * f64::from(SAMPLE_RATE)) as usize;
    let pcm: Vec<u8> = (0..n)
        .flat_map(|i| {
            let t = i as f64 / f64::from(SAMPLE_RATE);
            let s = (8000.0 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()) as i16;
            s.to_le_bytes()
        })
        .collect();
    let chunk_bytes = (CHUNK_MS * SAMPLE_RATE / 1000) as usize * 2;
    pcm.chunks(chunk_bytes).map(<[u8]>::to_vec).collect()
}

/// Drain outputs as a transport would; returns the engine request asked for, if any.
fn drain(s: &mut Session, t: &mut Tally) -> Option<RequestId> {
    let mut synth = None;
    while let Some(out) = s.poll_output() {
        match out {
            Output::Text(text) => {
                t.out_text_frames += 1;
                t.out_bytes += text.len() as u64;
                black_box(text);
            }
            Output::Binary(bytes) => {
                t.out_binary_frames += 1;
                t.out_bytes += bytes.len() as u64;
                black_box(bytes);
            }
            Output::Engine(EngineCommand::Synthesize { id, request }) => {
                black_box(request);
                synth = Some(id);
            }
            Output::Engine(EngineCommand::Abort { id }) => {
                black_box(id);
            }
            Output::RequestEnded { id, .. } => {
                black_box(id);
            }
            Output::Close(_) => t.closed_early = true,
            Output::Encode { id, job } => {
                let _ = s.handle_encoded(Instant::now(), id, job.run());
            }
        }
    }
    synth
}

fn cycle(s: &mut Session, sc: Scenario, chunks: &[Vec<u8>], t: &mut Tally) {
    let now = Instant::now();
    s.handle_client(now, ClientFrame::Text(sc.text().to_owned()));
    drain(s, t);
    s.handle_client(now, ClientFrame::Text(r#"{"type":"input.done"}"#.to_owned()));
    let synth = drain(s, t);
    t.client_frames += 2;
    if let Some(id) = synth {
        for c in chunks {
            let ev = EngineEvent { id, kind: EngineEventKind::Audio { pcm: c.clone(), sample_rate: SAMPLE_RATE } };
            if let Err(e) = s.handle_engine(now, ev) {
                panic!("session rejected an engine event for its own request: {e:?}");
            }
            drain(s, t);
        }
        let fin = EngineEvent { id, kind: EngineEventKind::Finished };
        if let Err(e) = s.handle_engine(now, fin) {
            panic!("session rejected Finished for its own request: {e:?}");
        }
        t.engine_events += chunks.len() as u64 + 1;
        drain(s, t);
    }
    t.cycles += 1;
}

fn run(sc: Scenario, seconds: f64, chunks: &[Vec<u8>]) -> (Tally, Duration) {
    let caps = capabilities();
    let opts = options();
    let mut warm = Tally::default();
    let mut s = Session::new(Instant::now(), 1, caps.clone(), opts.clone());
    s.handle_client(Instant::now(), ClientFrame::Text(sc.config().to_owned()));
    drain(&mut s, &mut warm);
    // Warm up caches and the allocator for a tenth of the window.
    let warm_until = Instant::now() + Duration::from_secs_f64(seconds / 10.0);
    while Instant::now() < warm_until {
        cycle(&mut s, sc, chunks, &mut warm);
    }

    let mut t = Tally::default();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    // Check the clock every 64 cycles: reading it is not free next to an empty cycle.
    'outer: loop {
        for _ in 0..64 {
            cycle(&mut s, sc, chunks, &mut t);
            if t.closed_early || s.is_closed() {
                t.closed_early = true;
                break 'outer;
            }
        }
        if Instant::now() >= end {
            break;
        }
    }
    (t, start.elapsed())
}

fn main() {
    let mut seconds = 2.0;
    let mut json = false;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().and_then(|v| v.parse().ok()).expect("--seconds needs a number"),
            "--json" => json = true,
            "--scenario" => only = args.next(),
            // `cargo bench` passes --bench; other harness flags are ignored too.
            _ => {}
        }
    }
    let chunks = audio_chunks();
    println!(
        "core throughput: one Session, {seconds:.1}s per scenario, audio {AUDIO_SECONDS}s in {} chunks of {CHUNK_MS} ms",
        chunks.len()
    );
    for sc in [Scenario::Empty, Scenario::Pcm, Scenario::Wav] {
        if only.as_deref().is_some_and(|o| o != sc.name()) {
            continue;
        }
        let (t, el) = run(sc, seconds, &chunks);
        let secs = el.as_secs_f64();
        let frames_per_s = t.client_frames as f64 / secs;
        let inputs = t.client_frames + t.engine_events;
        let ns_per_input = secs * 1e9 / inputs.max(1) as f64;
        let cycles_per_s = t.cycles as f64 / secs;
        let mib_per_s = t.out_bytes as f64 / secs / (1024.0 * 1024.0);
        println!(
            "  {:<6} {:>10.0} client frames/s  {:>9.0} utterances/s  {:>7.0} ns/input (client+engine)  \
             out {:.0} text + {:.0} binary frames/utt, {:.0} MiB/s{}",
            sc.name(),
            frames_per_s,
            cycles_per_s,
            ns_per_input,
            t.out_text_frames as f64 / t.cycles.max(1) as f64,
            t.out_binary_frames as f64 / t.cycles.max(1) as f64,
            mib_per_s,
            if t.closed_early { "  (SESSION CLOSED EARLY: check the scenario)" } else { "" }
        );
        if json {
            println!(
                "{{\"kind\":\"core_throughput\",\"scenario\":\"{}\",\"seconds\":{:.3},\"cycles\":{},\"client_frames_per_s\":{:.1},\"utterances_per_s\":{:.1},\"ns_per_input\":{:.1},\"out_mib_per_s\":{:.1},\"closed_early\":{}}}",
                sc.name(),
                secs,
                t.cycles,
                frames_per_s,
                cycles_per_s,
                ns_per_input,
                mib_per_s,
                t.closed_early
            );
        }
    }
}
