//! speechstream-transports
