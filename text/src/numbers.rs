//! English number words (the subset of num2words that misaki's number reading uses): cardinal,
//! ordinal, year and decimal, in British "and" style ("one hundred and one").

pub(super) const ONES: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
pub(super) const TENS: [&str; 10] =
    ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
pub(super) const SCALES: [&str; 12] = [
    "",
    "thousand",
    "million",
    "billion",
    "trillion",
    "quadrillion",
    "quintillion",
    "sextillion",
    "septillion",
    "octillion",
    "nonillion",
    "decillion",
];

/// A digit's word ("0" -> "zero").
pub fn digit_word(d: u32) -> &'static str {
    ONES[d as usize % 10]
}

fn below_1000(mut n: u128) -> Vec<String> {
    let mut words = Vec::new();
    if n >= 100 {
        words.push(ONES[(n / 100) as usize].to_string());
        words.push("hundred".to_string());
        n %= 100;
        if n != 0 {
            words.push("and".to_string());
        }
    }
    if n >= 20 {
        let t = TENS[(n / 10) as usize];
        words.push(if !n.is_multiple_of(10) { format!("{t}-{}", ONES[(n % 10) as usize]) } else { t.to_string() });
    } else if n != 0 || words.is_empty() {
        words.push(ONES[n as usize].to_string());
    }
    words
}

/// num2words(n): "one thousand, two hundred and thirty-four".
pub fn cardinal(n: i128) -> String {
    if n < 0 {
        return format!("minus {}", cardinal(-n));
    }
    let mut n = n as u128;
    if n < 1000 {
        return below_1000(n).join(" ");
    }
    let mut groups = Vec::new();
    let mut scale = 0;
    while n != 0 {
        let g = n % 1000;
        n /= 1000;
        if g != 0 {
            let mut s = below_1000(g).join(" ");
            if scale != 0 {
                s.push(' ');
                s.push_str(SCALES.get(scale).copied().unwrap_or(""));
            }
            groups.push(s);
        }
        scale += 1;
    }
    groups.reverse();
    let last = groups.last().cloned().unwrap_or_default();
    let tail = last.rsplit(" and ").next().unwrap_or("");
    if groups.len() > 1 && !tail.contains(' ') && !last.contains("hundred") {
        return format!("{} and {}", groups[..groups.len() - 1].join(", "), last);
    }
    groups.join(", ")
}

fn ord_word(w: &str) -> String {
    match w {
        "one" => "first".into(),
        "two" => "second".into(),
        "three" => "third".into(),
        "five" => "fifth".into(),
        "eight" => "eighth".into(),
        "nine" => "ninth".into(),
        "twelve" => "twelfth".into(),
        _ if w.ends_with('y') => format!("{}ieth", &w[..w.len() - 1]),
        _ => format!("{w}th"),
    }
}

/// num2words(n, to='ordinal'): "twenty-third", "one hundred and first".
pub fn ordinal(n: i128) -> String {
    ordinal_of(&cardinal(n))
}

/// The ordinal of a number said as the cardinal `c`: its last word made ordinal
/// ("one hundred and one" -> "one hundred and first", "twenty-one" -> "twenty-first").
pub(super) fn ordinal_of(c: &str) -> String {
    let (head, last) = match c.rfind(' ') {
        Some(i) => (&c[..=i], &c[i + 1..]),
        None => ("", c),
    };
    let last = match last.rfind('-') {
        Some(i) => format!("{}-{}", &last[..i], ord_word(&last[i + 1..])),
        None => ord_word(last),
    };
    format!("{head}{last}")
}

/// num2words(n, to='year'): "nineteen oh-five", "two thousand and five", "twenty ten".
pub fn year(n: i128) -> String {
    let (high, low) = (n.div_euclid(100), n.rem_euclid(100));
    if high == 0 || (high % 10 == 0 && low < 10) || high >= 100 {
        return cardinal(n);
    }
    let lowtext = if low == 0 {
        "hundred".to_string()
    } else if low < 10 {
        format!("oh-{}", cardinal(low))
    } else {
        cardinal(low)
    };
    format!("{} {}", cardinal(high), lowtext)
}

/// num2words(float(s)): "3.14" -> "three point one four"; trailing zeros dropped.
pub fn decimal(s: &str) -> String {
    let (ip, fp) = s.split_once('.').unwrap_or((s, ""));
    let fp = fp.trim_end_matches('0');
    let mut words = cardinal(ip.parse::<i128>().unwrap_or(0));
    if !fp.is_empty() {
        words.push_str(" point");
        for c in fp.chars() {
            words.push(' ');
            words.push_str(digit_word(c.to_digit(10).unwrap_or(0)));
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(cardinal(0), "zero");
        assert_eq!(cardinal(101), "one hundred and one");
        assert_eq!(cardinal(1234), "one thousand, two hundred and thirty-four");
        assert_eq!(cardinal(1001), "one thousand and one");
        assert_eq!(cardinal(1_000_021), "one million and twenty-one");
        assert_eq!(cardinal(-5), "minus five");
        assert_eq!(ordinal(23), "twenty-third");
        assert_eq!(ordinal(101), "one hundred and first");
        assert_eq!(ordinal(1000), "one thousandth");
        assert_eq!(ordinal(12), "twelfth");
        assert_eq!(ordinal(40), "fortieth");
        assert_eq!(year(1905), "nineteen oh-five");
        assert_eq!(year(2005), "two thousand and five");
        assert_eq!(year(2010), "twenty ten");
        assert_eq!(year(1900), "nineteen hundred");
        assert_eq!(decimal("3.140"), "three point one four");
        assert_eq!(decimal("2.0"), "two");
    }
}
