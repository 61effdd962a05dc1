//! Admission against clients that read audio as fast as it comes (batch jobs, benchmarks, agents
//! that buffer): 32 connections in a closed loop, each sending its next two-sentence utterance as
//! soon as the last one is done, six each, streamed. Such a client owes nothing to a playback
//! clock it does not have: each later utterance is sent while the audio before it would still be
//! playing, so its listener could only hear it after, and admission must not refuse it for
//! deadlines that do not exist. The rule (issue 35): with admission on, no utterance is refused
//! where the same load without admission gets its first audio within the target. Before the
//! listener clock, 31 to 90 of these 192 were refused on 2 quiet CPUs. Needs `.cache`
//! (scripts/setup-voice.sh). Generous: only refusals are asserted, and only where the machine
//! serves the load in time without admission; timings are printed (`-- --nocapture`).

mod common;

use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use speechstream_core::engine::{Engine, EngineEventKind, Failure, RequestId, SynthesisRequest};
use speechstream_engine_libtorch::{AdmissionMode, EngineOptions, TorchEngine};

/// Connections (`SPEECHSTREAM_CLOSED_LOOP_CONNECTIONS` overrides: the 16, 32, 64),
/// their starts spread over a second, as a load generator's ramp.
fn connections() -> u64 {
    std::env::var("SPEECHSTREAM_CLOSED_LOOP_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(32)
}
const UTTERANCES: u64 = 6;
const TEXT: &str = "The library closes early on Sundays, so we went on Saturday instead. \
                    My brother bought a red bicycle there, and rode it home in the rain.";
const TIMEOUT: Duration = Duration::from_secs(600);

/// What a closed loop saw.
struct Run {
    refused: u64,
    /// First audio, 99th percentile.
    p99: Duration,
    /// Streams admitted with their first audio due after the target.
    delayed: u64,
}

/// One closed loop at a time: the two tests' loads on the same CPUs would each slow the other
/// (both then too busy to judge).
static MACHINE: Mutex<()> = Mutex::new(());

/// Prints admission's decisions and the workers' rounds where `RUST_LOG` asks for them
/// (`RUST_LOG=speechstream_engine_libtorch=debug`, `=trace` for every round).
fn log() {
    let filter = tracing_subscriber::EnvFilter::from_default_env();
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
}

/// Runs the closed loop on a fresh engine: `connections` clients, their starts spread evenly
/// over `spread`, `utterances` each.
fn closed_loop(admission: AdmissionMode, connections: u64, spread: Duration, utterances: u64) -> Run {
    let mut options = EngineOptions::new(hibari_assets());
    options.admission = admission;
    options.threads = Some(1);
    let engine = TorchEngine::new(options).expect("engine");
    let engine = &engine;
    let results: Vec<(u64, Vec<Duration>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..connections)
            .map(|connection| {
                scope.spawn(move || {
                    std::thread::sleep(spread * connection as u32 / connections as u32);
                    let (mut refused, mut first_audio) = (0, Vec::new());
                    for utterance in 0..utterances {
                        let (tx, rx) = mpsc::channel();
                        let request = SynthesisRequest::new(TEXT).with_stream(true);
                        let (sent, mut heard) = (Instant::now(), false);
                        engine.submit(RequestId { connection, utterance }, request, Box::new(Sink(tx)));
                        loop {
                            match rx.recv_timeout(TIMEOUT).expect("engine event").kind {
                                EngineEventKind::Audio { .. } if !heard => {
                                    heard = true;
                                    first_audio.push(sent.elapsed());
                                }
                                EngineEventKind::Finished => break,
                                EngineEventKind::Failed(Failure::Overloaded(_)) => {
                                    refused += 1;
                                    break;
                                }
                                EngineEventKind::Failed(other) => panic!("utterance failed: {other}"),
                                _ => {}
                            }
                        }
                    }
                    (refused, first_audio)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("connection")).collect()
    });
    let refused: u64 = results.iter().map(|r| r.0).sum();
    let mut ttfa: Vec<Duration> = results.into_iter().flat_map(|r| r.1).collect();
    ttfa.sort();
    let at = |q: f64| {
        ttfa.get(((ttfa.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(Duration::MAX)
    };
    let delayed = engine.load().streams.delayed;
    eprintln!(
        "admission {admission:?}: {connections} connections x {utterances} (starts over {spread:?}): {refused} refused, \
         {delayed} delayed; first audio p50 {} ms, p99 {} ms",
        at(0.5).as_millis(),
        at(0.99).as_millis()
    );
    Run { refused, p99: at(0.99), delayed }
}

/// The rule: no utterance is refused where the same server without admission keeps
/// first audio within its target (p99 at most 250 ms). Judged only where it does so clearly
/// (p99 within 60% of the target: a quiet 2-CPU host gave 124 ms at 32 connections), since the
/// two runs see the machine at different moments; on a machine too busy for that (other work on
/// its CPUs), refusals are right and the figures are only printed.
#[test]
fn a_closed_loop_is_not_refused_where_it_is_served_in_time() {
    let _machine = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
    log();
    let target = EngineOptions::new(hibari_assets()).pacing.first_audio;
    let n = connections();
    let p99_off = closed_loop(AdmissionMode::Off, n, Duration::from_secs(1), UTTERANCES).p99;
    let run = closed_loop(AdmissionMode::Realtime, n, Duration::from_secs(1), UTTERANCES);
    if p99_off.as_secs_f64() <= 0.6 * target.as_secs_f64() {
        assert_eq!(run.refused, 0, "refused closed-loop utterances that --admission off served in time");
    } else {
        eprintln!("this machine is too busy to judge: without admission, first audio p99 {p99_off:?}");
    }
}

/// Connections starting all at once (`SPEECHSTREAM_BURST_CONNECTIONS` overrides): loadgen's
/// closed loop at 64 on 2 CPUs, scaled to 48, where 24 new streams a worker need a little more
/// than the target for their first audio (22 fit at a quiet Zen 4's costs).
fn burst() -> u64 {
    std::env::var("SPEECHSTREAM_BURST_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
}

/// A closed loop's connections that all start at once (as `loadgen`'s): their first streams
/// come before anything was heard on their connections, so nothing says they listen in real
/// time, and those that do not fit on time are admitted with their first audio due later, by
/// at most the time a refusal would tell them to retry after (1 s), rather than refused (the rule before refused them: 331 of 384 at
/// 64 connections on 2 quiet CPUs, where `--admission off` served every one, first audio p99
/// 402 ms; and, while a stream admitted at the least delay looked late a moment later, its
/// worker still in a round, 32 of 96 here on 2 quiet CPUs where `off` had p99 489 ms). Judged
/// where `off` serves the burst with first audio p99 clearly (60%) within that bound; the streams
/// delayed are printed.
#[test]
fn a_burst_of_new_connections_is_delayed_rather_than_refused() {
    let _machine = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
    log();
    let pacing = EngineOptions::new(hibari_assets()).pacing;
    let bound = pacing.first_audio + pacing.max_first_delay();
    let p99_off = closed_loop(AdmissionMode::Off, burst(), Duration::ZERO, 2).p99;
    let run = closed_loop(AdmissionMode::Realtime, burst(), Duration::ZERO, 2);
    if p99_off.as_secs_f64() <= 0.6 * bound.as_secs_f64() {
        assert_eq!(
            run.refused, 0,
            "refused new closed-loop streams ({} delayed) that `off` served in time",
            run.delayed
        );
    } else {
        eprintln!("this machine is too busy to judge: without admission, first audio p99 {p99_off:?}");
    }
}
