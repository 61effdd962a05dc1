//! How the intelligibility tests score a transcript: the words of a text, and how many of the
//! expected ones a recogniser heard in the right order.

/// Everyday sentences for a recogniser to hear.
pub const TEXT: &str = "The weather is nice today. Please call me tomorrow morning at nine. \
                        I would like a cup of coffee. She opened the window and looked outside.";

/// Lower-cased words without punctuation.
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.chars().filter(|c| c.is_alphanumeric() || *c == '\'').collect::<String>().to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Length of the longest common subsequence: words recognised in the right order.
pub fn common_in_order(a: &[String], b: &[String]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y { diagonal + 1 } else { row[j + 1].max(row[j]) };
            diagonal = above;
        }
    }
    row[b.len()]
}
