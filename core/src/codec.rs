//! codec frames
