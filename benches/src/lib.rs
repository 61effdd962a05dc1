//! Benchmarks and the load generator for speechstream.
//!
//! `loadgen` (src/bin) drives any server speaking the streaming speech WebSocket protocol
//! (ours or the reference) over loopback and reports throughput, time to first audio and
//! memory per idle connection; `benches/core_throughput.rs` times the core state machine
//! alone. Numbers go to BENCHMARKS.md; nothing here asserts a timing.

pub mod proc_stats;
pub mod stats;
pub mod ws_client;
