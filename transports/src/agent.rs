//! HAProxy's agent check (`server ... agent-check agent-port N`): each connection to the agent
//! port is answered with one line saying how much new work this replica should get, then closed.
//! With `balance leastconn`, HAProxy then sends new streams (WebSocket, HTTP, Wyoming) where there
//! is room by admission's own measure rather than by connection counts alone.
//!
//! The line: `up ready N%` while serving, with `N` the share of its configured weight the server
//! asks for, `100 × (1 − usage)` ([`EngineLoad::usage`]), at least 1% (a full replica still
//! answers: its refusal says when to retry, which a balancer with no server left could not);
//! `drain` once the shutdown drain has begun (no new work; what runs finishes); `down #why` when
//! the engine has failed.
//!
//! [`EngineLoad::usage`]: speechstream_core::engine::EngineLoad::usage

use std::sync::atomic::Ordering;

use tokio::net::TcpStream;
use tracing::debug;

use crate::shared::Shared;

/// What a replica in this state tells HAProxy.
pub(crate) fn line(usage: f64, draining: bool, failure: Option<&str>) -> String {
    if let Some(why) = failure {
        // The description ends at the line; keep it to one.
        let why: String = why.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        return format!("down #{why}\n");
    }
    if draining {
        return "drain\n".to_owned();
    }
    let usage = if usage.is_finite() { usage.clamp(0.0, 1.0) } else { 1.0 };
    let weight = ((1.0 - usage) * 100.0).round().max(1.0);
    format!("up ready {weight}%\n")
}

/// Answers one agent connection and closes it. The line fits in a new socket's empty send
/// buffer: nothing waits, and no task is spawned.
pub(crate) fn answer(stream: TcpStream, shared: &Shared) {
    let failure = shared.engine.failure();
    let usage = shared.engine.load().usage;
    let reply = line(usage, shared.draining.load(Ordering::Relaxed), failure.as_deref());
    if let Err(e) = stream.try_write(reply.as_bytes()) {
        debug!(error = %e, "agent check: write failed");
    }
    // Dropping the stream closes it (a FIN after the line: HAProxy reads to the end).
}

#[cfg(test)]
mod tests {
    use super::line;

    #[test]
    fn the_weight_is_the_room_left_and_never_zero_while_serving() {
        assert_eq!(line(0.0, false, None), "up ready 100%\n");
        assert_eq!(line(0.254, false, None), "up ready 75%\n");
        assert_eq!(line(1.0, false, None), "up ready 1%\n");
        assert_eq!(line(f64::NAN, false, None), "up ready 1%\n");
        assert_eq!(line(0.3, true, None), "drain\n");
        assert_eq!(line(0.3, true, Some("all 2 engine\nworkers")), "down #all 2 engine workers\n");
    }
}
