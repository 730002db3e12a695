//! Exact decimal numbers, so body limits compare what the client actually
//! sent: JSON numbers may exceed f64 precision ("10000.0000000000000001"
//! rounds to 10000.0), and the origin server may parse them exactly.

use std::cmp::Ordering;

/// Exponents beyond this are refused rather than compared; no real quota
/// or amount needs them and it keeps comparisons cheap.
const MAX_EXPONENT: i64 = 1_000_000;

/// A finite decimal: sign, significant digits (no leading/trailing zeros),
/// and the decimal exponent of the last digit. Zero has no digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    /// Parses JSON number syntax (RFC 8259 §6), also accepting a leading
    /// '+' and leading zeros as form fields may carry them.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        let mut i = 0;
        let mut negative = false;
        match bytes.first() {
            Some(b'-') => {
                negative = true;
                i = 1;
            }
            Some(b'+') => i = 1,
            _ => {}
        }
        let mut digits = Vec::new();
        let mut exponent: i64 = 0;
        let int_start = i;
        while let Some(b) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
            digits.push(b - b'0');
            i += 1;
        }
        let int_len = i - int_start;
        let mut frac_len = 0;
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            while let Some(b) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
                digits.push(b - b'0');
                exponent -= 1;
                frac_len += 1;
                i += 1;
            }
            if frac_len == 0 {
                return None;
            }
        }
        if int_len == 0 {
            return None;
        }
        if matches!(bytes.get(i), Some(b'e' | b'E')) {
            i += 1;
            let mut exp_negative = false;
            match bytes.get(i) {
                Some(b'-') => {
                    exp_negative = true;
                    i += 1;
                }
                Some(b'+') => i += 1,
                _ => {}
            }
            let exp_text = text.get(i..)?;
            if exp_text.is_empty() || !exp_text.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let value: i64 = exp_text.parse().ok().filter(|v| *v <= MAX_EXPONENT)?;
            exponent += if exp_negative { -value } else { value };
            i = bytes.len();
        }
        if i != bytes.len() {
            return None;
        }
        Some(Self::normalized(negative, digits, exponent))
    }

    /// The exact value of an i64.
    pub(crate) fn from_i64(value: i64) -> Self {
        Self::parse(&value.to_string()).unwrap_or_else(Self::zero)
    }

    /// The decimal a user wrote for a TOML float: Rust prints the shortest
    /// text that round-trips, which is what the user meant.
    pub(crate) fn from_f64(value: f64) -> Option<Self> {
        if !value.is_finite() {
            return None;
        }
        Self::parse(&format!("{value}"))
    }

    fn zero() -> Self {
        Self {
            negative: false,
            digits: Vec::new(),
            exponent: 0,
        }
    }

    fn normalized(negative: bool, mut digits: Vec<u8>, mut exponent: i64) -> Self {
        while digits.last() == Some(&0) {
            digits.pop();
            exponent += 1;
        }
        let leading = digits.iter().take_while(|d| **d == 0).count();
        digits.drain(..leading);
        if digits.is_empty() {
            return Self::zero();
        }
        Self {
            negative,
            digits,
            exponent,
        }
    }

    /// Position of the most significant digit (10^magnitude).
    fn magnitude(&self) -> i64 {
        self.exponent + self.digits.len() as i64 - 1
    }

    fn cmp_abs(&self, other: &Self) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        self.magnitude().cmp(&other.magnitude()).then_with(|| {
            let len = self.digits.len().max(other.digits.len());
            (0..len)
                .map(|k| {
                    let a = self.digits.get(k).copied().unwrap_or(0);
                    let b = other.digits.get(k).copied().unwrap_or(0);
                    a.cmp(&b)
                })
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        let self_neg = self.negative && !self.digits.is_empty();
        let other_neg = other.negative && !other.digits.is_empty();
        match (self_neg, other_neg) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_abs(other),
            (true, true) => other.cmp_abs(self),
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Decimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.digits.is_empty() {
            return f.write_str("0");
        }
        if self.negative {
            f.write_str("-")?;
        }
        for d in &self.digits {
            write!(f, "{d}")?;
        }
        if self.exponent != 0 {
            write!(f, "e{}", self.exponent)?;
        }
        Ok(())
    }
}
