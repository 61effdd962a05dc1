//! The `speechstream` command line.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions, DEFAULT_MODEL_NAME};
use speechstream_core::engine::Engine;
use speechstream_core::parse::Limits;
use speechstream_core::session::SessionOptions;
use speechstream_transports::{serve, ServerConfig};
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(
    name = "speechstream",
    version,
    about = "Streaming text-to-speech server speaking vLLM-Omni's WebSocket protocol",
    after_help = "Logging: set RUST_LOG (e.g. RUST_LOG=debug or RUST_LOG=speechstream_transports=debug); the default is info."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve WS /v1/audio/speech/stream, GET /health and GET /v1/models.
    Serve(ServeArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EngineKind {
    /// No model: deterministic tones derived from the text (tests, benchmarks, protocol work).
    Synthetic,
}

fn engine_kind(value: &str) -> Result<EngineKind, String> {
    match value {
        "synthetic" => Ok(EngineKind::Synthetic),
        "hibari" => Err("the hibari engine is not part of this build yet; use `synthetic`".to_owned()),
        other => Err(format!("unknown engine `{other}`; available: synthetic")),
    }
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// TCP port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Speech engine: `synthetic` (no model: deterministic tones derived from the text, for
    /// tests, benchmarks and protocol work). The hibari voice comes later.
    #[arg(long, value_name = "ENGINE", default_value = "synthetic", value_parser = engine_kind)]
    engine: EngineKind,
    /// Model name clients see in /v1/models and may send as session.config `model`
    /// [default: speechstream-synthetic for the synthetic engine].
    #[arg(long)]
    served_model_name: Option<String>,

    /// Seconds a session may wait for its first valid session.config.
    #[arg(long, value_name = "SECONDS", default_value = "10", allow_negative_numbers = true, value_parser = positive_seconds)]
    config_timeout: Duration,
    /// Seconds a configured session may sit without a client message while nothing is
    /// generating.
    #[arg(long, value_name = "SECONDS", default_value = "30", allow_negative_numbers = true, value_parser = positive_seconds)]
    idle_timeout: Duration,
    /// Largest client message other than session.config, in characters.
    #[arg(long, value_name = "CHARS", allow_negative_numbers = true, default_value = "131072", value_parser = positive_count)]
    max_text_message_chars: usize,
    /// Largest session.config message, in characters.
    #[arg(long, value_name = "CHARS", allow_negative_numbers = true, default_value = "4194304", value_parser = positive_count)]
    max_config_message_chars: usize,
    /// Most text characters buffered for one utterance before input.done.
    #[arg(long, value_name = "CHARS", allow_negative_numbers = true, default_value = "1048576", value_parser = positive_count)]
    max_buffered_chars: usize,
    /// Client messages held back while an utterance generates; past it the server stops
    /// reading that connection until the utterance ends.
    #[arg(long, value_name = "FRAMES", allow_negative_numbers = true, default_value = "64", value_parser = positive_count)]
    max_deferred_frames: usize,
    /// On SIGINT/SIGTERM, seconds connections get to finish the utterance in flight before
    /// they are closed with 1001.
    #[arg(long, value_name = "SECONDS", default_value = "10", allow_negative_numbers = true, value_parser = non_negative_seconds)]
    shutdown_grace: Duration,

    /// Synthetic engine: milliseconds of audio per streamed chunk.
    #[arg(long, value_name = "MS", default_value_t = 80, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    synthetic_chunk_ms: u32,
    /// Synthetic engine: pause after each chunk, in milliseconds (0 = as fast as possible).
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    synthetic_chunk_delay_ms: u64,
    /// Synthetic engine: pace output so N seconds of audio take N × FACTOR seconds to produce
    /// (1.0 = real time); unset = no pacing.
    #[arg(long, value_name = "FACTOR", allow_negative_numbers = true, value_parser = positive_factor)]
    synthetic_real_time_factor: Option<f64>,
    /// Synthetic engine: make every utterance exactly this many seconds long, whatever its
    /// text (the reference server's null engine emits 1.0 s).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = audio_seconds)]
    synthetic_audio_seconds: Option<f64>,
}

fn positive_seconds(value: &str) -> Result<Duration, String> {
    let seconds = seconds(value).map_err(|_| format!("`{value}` must be a positive number of seconds"))?;
    if seconds.is_zero() {
        return Err(format!("`{value}` must be more than 0 seconds"));
    }
    Ok(seconds)
}

fn non_negative_seconds(value: &str) -> Result<Duration, String> {
    seconds(value)
}

fn seconds(value: &str) -> Result<Duration, String> {
    let seconds: f64 = value.trim().parse().map_err(|_| format!("`{value}` is not a number of seconds"))?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("`{value}` must be a finite, non-negative number of seconds"));
    }
    if seconds > 1e9 {
        return Err(format!("`{value}` seconds is too long"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

fn positive_count(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(count) => Ok(count),
        Err(_) => Err(format!("`{value}` is not a whole positive number")),
    }
}

fn positive_factor(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(factor) if factor.is_finite() && factor > 0.0 && factor <= 1000.0 => Ok(factor),
        _ => Err(format!("`{value}` must be a number above 0 and at most 1000")),
    }
}

fn audio_seconds(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0 => Ok(seconds),
        _ => Err(format!("`{value}` must be a number of seconds above 0 and at most 3600")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Serve(args) => run_serve(args),
    }
}

fn run_serve(args: ServeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            error!(error = %e, "could not start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve_until_signalled(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            error!("{message}");
            ExitCode::FAILURE
        }
    }
}

async fn serve_until_signalled(args: ServeArgs) -> Result<(), String> {
    let engine: Arc<dyn Engine> = match args.engine {
        EngineKind::Synthetic => Arc::new(SyntheticEngine::new(SyntheticOptions {
            model_name: args.served_model_name.clone().unwrap_or_else(|| DEFAULT_MODEL_NAME.to_owned()),
            chunk_ms: args.synthetic_chunk_ms,
            chunk_delay: Duration::from_millis(args.synthetic_chunk_delay_ms),
            real_time_factor: args.synthetic_real_time_factor,
            audio_seconds: args.synthetic_audio_seconds,
        })),
    };
    let mut config = ServerConfig::new(SessionOptions {
        limits: Limits {
            max_text_message_chars: args.max_text_message_chars,
            max_config_message_chars: args.max_config_message_chars,
        },
        idle_timeout: args.idle_timeout,
        config_timeout: args.config_timeout,
        max_buffered_chars: args.max_buffered_chars,
        max_deferred_frames: args.max_deferred_frames,
    });
    config.shutdown_grace = args.shutdown_grace;

    let address = format!("{}:{}", args.host, args.port);
    let listener =
        tokio::net::TcpListener::bind(&address).await.map_err(|e| format!("cannot listen on {address}: {e}"))?;
    let local: Option<SocketAddr> = listener.local_addr().ok();
    info!(
        address = ?local,
        engine = ?args.engine,
        models = ?engine.capabilities().models,
        "speechstream serving"
    );
    serve(listener, engine, config, shutdown_signal()).await.map_err(|e| format!("server failed: {e}"))
}

/// Resolves on the first SIGINT or SIGTERM. A second one ends the process at once, for when
/// the grace period is too long to wait out.
async fn shutdown_signal() {
    wait_for_signal().await;
    info!("signal received: finishing utterances in flight (signal again to quit now)");
    tokio::spawn(async {
        wait_for_signal().await;
        warn!("second signal: exiting now");
        std::process::exit(130);
    });
}

async fn wait_for_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            warn!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_are_the_reference_values() {
        let cli = Cli::try_parse_from(["speechstream", "serve"]).unwrap();
        let Command::Serve(args) = cli.command;
        assert_eq!(args.port, 8000);
        assert_eq!(args.idle_timeout, Duration::from_secs(30));
        assert_eq!(args.config_timeout, Duration::from_secs(10));
        assert_eq!(args.max_text_message_chars, 131_072);
        assert_eq!(args.max_config_message_chars, 4_194_304);
        assert_eq!(args.shutdown_grace, Duration::from_secs(10));
    }

    #[test]
    fn absurd_values_are_rejected() {
        for bad in [
            &["--idle-timeout", "-1"][..],
            &["--idle-timeout", "0"],
            &["--config-timeout", "nan"],
            &["--max-text-message-chars", "0"],
            &["--max-buffered-chars", "-5"],
            &["--shutdown-grace", "inf"],
            &["--synthetic-chunk-ms", "0"],
            &["--synthetic-audio-seconds", "0"],
            &["--engine", "hibari"],
        ] {
            let argv = ["speechstream", "serve"].iter().chain(bad.iter());
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?} accepted");
        }
        let cli = Cli::try_parse_from(["speechstream", "serve", "--idle-timeout", "0.05"]).unwrap();
        let Command::Serve(args) = cli.command;
        assert_eq!(args.idle_timeout, Duration::from_millis(50));
    }
}
