//! speechstream: the server binary's library half.
//!
//! It holds what the binary wires together that belongs to no other crate: for now the
//! synthetic engine, which integration tests and benchmarks use as well. The protocol is in
//! speechstream-core and the sockets in speechstream-transports.

pub mod synthetic;
