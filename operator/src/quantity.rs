//! Kubernetes quantities (`500m`, `0.5`, `1536Mi`, `1.5Gi`, `2e3`) as numbers: the one
//! parser the operator has, for the apply's comparison of resource values
//! (`objects::contains`), the spec's byte sizes (`crd::ByteSize`) and the gateway's memory
//! limits (the autoscaler's sampler, the per-pipeline gauges). Pure, no dependencies.

/// A Kubernetes memory quantity in whole bytes, rounded up (`1500m` is 2 bytes); `None`
/// when it does not parse, is negative or does not fit an `i64`. The one parser is
/// [`quantity`].
pub fn quantity_bytes(q: &str) -> Option<i64> {
    let nanos = quantity(q.trim())?;
    if nanos < 0 {
        return None;
    }
    i64::try_from((nanos + 999_999_999) / 1_000_000_000).ok()
}

/// A Kubernetes quantity (`500m`, `0.5`, `1536Mi`, `1.5Gi`, `2e3`) in nano-units; `None`
/// when it does not parse or does not fit.
pub fn quantity(s: &str) -> Option<i128> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if frac.len() > 9 || (int.is_empty() && frac.is_empty()) {
        return None;
    }
    let negative = int.starts_with('-');
    let int = int.trim_start_matches(['+', '-']);
    let mut nanos: i128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    nanos = nanos.checked_mul(1_000_000_000)?;
    if !frac.is_empty() {
        let f: i128 = frac.parse().ok()?;
        nanos += f * 10i128.pow(9 - frac.len() as u32);
    }
    let (num, den): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            if exp >= 0 {
                (10i128.checked_pow(exp.unsigned_abs())?, 1)
            } else {
                (1, 10i128.checked_pow(exp.unsigned_abs())?)
            }
        }
        _ => return None,
    };
    let value = nanos.checked_mul(num)? / den;
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_bytes() {
        for (q, bytes) in [
            ("512Mi", 512 << 20),
            ("1Gi", 1 << 30),
            ("1G", 1_000_000_000),
            ("500M", 500_000_000),
            ("128974848", 128_974_848),
            ("1e9", 1_000_000_000),
            ("1.5Gi", 3 << 29),
            ("100k", 100_000),
        ] {
            assert_eq!(quantity_bytes(q), Some(bytes), "{q}");
        }
        for bad in ["", "Mi", "12x", "-1", "1.5.2Gi"] {
            assert_eq!(quantity_bytes(bad), None, "{bad}");
        }
    }
}
