//! Kokoro-82M beside hibari: its files and voices ([`voices`]).

pub mod voices;
