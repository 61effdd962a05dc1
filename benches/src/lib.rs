//! Benchmarks and the load generator for speechstream.
