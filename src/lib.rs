//! speechstream: the server binary's library half.
//!
//! The synthetic engine lives in speechstream-core (feature `synthetic`) so that embedders get
//! it too; it is re-exported here under its old path, which the integration tests and
//! benchmarks use. The protocol is in speechstream-core and the sockets in
//! speechstream-transports.

pub use speechstream_core::synthetic;
