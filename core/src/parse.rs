//! Client text frames: the reference's checks in the reference's order. OWNER: lead.

/// Message size limits, in characters (Unicode scalar values), as the reference counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_text_message_chars: usize,
    pub max_config_message_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_text_message_chars: 128 * 1024,
            max_config_message_chars: 4 * 1024 * 1024,
        }
    }
}
