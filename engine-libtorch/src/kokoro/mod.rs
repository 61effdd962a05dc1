//! Kokoro-82M beside hibari: its files and voices ([`voices`]) and how the workers serve them
//! ([`serve`]).

pub mod serve;
pub mod voices;
