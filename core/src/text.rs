//! text helpers
