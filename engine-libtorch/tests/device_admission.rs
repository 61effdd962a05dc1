//! Workers that share one device are admitted against the device (issue 52). On a GPU the
//! workers' passes share it: each worker's speed measured alone promised streams the device
//! could not compute all at once (an H200 ran 256 hibari streams late on 4 workers, none
//! refused: benches/results/15-gpu.md). Here, on the CPU, `simulated_device` makes two
//! workers' passes take turns on one lock, as on a device that runs one pass at a time, so
//! together they compute what one worker computes. The same burst of listeners arrives at two
//! workers with and without it: with it, admission must take about half as many (the device's
//! speed, measured at start-up with both workers on it at once), and the streams it takes must
//! play without gaps. Admission that counted each worker alone would take as many with the
//! lock as without, and run them late. hibari in fp32 (slower than int8, so fewer listeners
//! fill a worker); needs `.cache/hibari`.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use speechstream_core::engine::{Engine, EngineEventKind, Failure, RequestId, SynthesisRequest};
use speechstream_engine_libtorch::{AdmissionMode, EngineOptions, Precision, TorchEngine};

const TEXT: &str = "The weather today is sunny with a light breeze from the west. \
                    We walked along the river until the sun went down.";
const TIMEOUT: Duration = Duration::from_secs(300);

fn engine(simulated_device: bool) -> TorchEngine {
    let mut options = EngineOptions::new(hibari_assets());
    options.admission = AdmissionMode::Realtime;
    options.workers = Some(2);
    options.threads = Some(1);
    options.precision = Some(Precision::Fp32);
    options.simulated_device = simulated_device;
    TorchEngine::new(options).expect("engine")
}

/// Waits for the end of each request on `receivers`: (served, refused).
fn outcomes(receivers: Vec<mpsc::Receiver<speechstream_core::engine::EngineEvent>>) -> (u64, u64) {
    let (mut served, mut refused) = (0, 0);
    for rx in receivers {
        loop {
            match rx.recv_timeout(TIMEOUT).expect("engine event").kind {
                EngineEventKind::Finished => {
                    served += 1;
                    break;
                }
                EngineEventKind::Failed(Failure::Overloaded(_)) => {
                    refused += 1;
                    break;
                }
                EngineEventKind::Failed(other) => panic!("utterance failed: {other}"),
                _ => {}
            }
        }
    }
    (served, refused)
}

/// `listeners` streams of [`TEXT`] arriving at once: (served, refused, late chunks, chunks).
fn burst(engine: &TorchEngine, listeners: u64) -> (u64, u64, u64, u64) {
    let receivers = (0..listeners)
        .map(|connection| {
            let (tx, rx) = mpsc::channel();
            let request = SynthesisRequest::new(TEXT).with_stream(true);
            engine.submit(RequestId { connection, utterance: 0 }, request, Box::new(Sink(tx)));
            rx
        })
        .collect();
    let (served, refused) = outcomes(receivers);
    let timing = engine.load().streams;
    (served, refused, timing.underruns, timing.chunks)
}

#[test]
fn workers_sharing_a_device_are_admitted_against_what_the_device_computes() {
    cached("hibari/voices.json", "scripts/setup-voice.sh");
    let plain = engine(false);
    // One utterance alone, whole: how many listeners one worker keeps up with here.
    let (tx, rx) = mpsc::channel();
    let alone = Instant::now();
    plain.submit(RequestId { connection: u64::MAX, utterance: 0 }, SynthesisRequest::new(TEXT), Box::new(Sink(tx)));
    let mut samples = 0.0;
    loop {
        match rx.recv_timeout(TIMEOUT).expect("engine event").kind {
            EngineEventKind::Audio { pcm, sample_rate } => samples += pcm.len() as f64 / 2.0 / f64::from(sample_rate),
            EngineEventKind::Finished => break,
            EngineEventKind::Failed(e) => panic!("an utterance alone failed: {e}"),
            _ => {}
        }
    }
    let one_worker = samples / alone.elapsed().as_secs_f64();
    // Four times what one worker keeps up with: more than two workers can take.
    let listeners = 32.max((4.0 * one_worker).ceil() as u64);
    let (served, refused, late, chunks) = burst(&plain, listeners);
    drop(plain);
    eprintln!(
        "one worker keeps up with {one_worker:.1} listeners; {listeners} at once on two workers: \
         {served} served, {refused} refused, {late} of {chunks} chunks late"
    );
    let shared = engine(true);
    let (s_served, s_refused, s_late, s_chunks) = burst(&shared, listeners);
    eprintln!(
        "the same on two workers taking turns on one simulated device: {s_served} served, {s_refused} refused, \
         {s_late} of {s_chunks} chunks late"
    );
    assert!(served > 1 && s_served >= 1, "nothing served");
    assert!(
        (s_served as f64) < 0.75 * served as f64,
        "{s_served} streams admitted to a device that computes one worker's share, against {served} to two workers"
    );
    // (a gap or two in a loaded 2-CPU test box is noise; a device promised twice over is not)
    assert!(s_late * 50 <= s_chunks.max(1), "{s_late} of {s_chunks} chunks late on the simulated device");
}
