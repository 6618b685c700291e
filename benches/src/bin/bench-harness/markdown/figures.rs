//! How the report writes figures: rates with thousands separators.

/// A rate rounded and grouped by thousands, `–` for none.
pub fn fmt_rate(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| group_digits(v.round() as u64))
}

/// `n` grouped by thousands with commas.
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
