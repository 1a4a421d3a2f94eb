//! Byte counts as the restorer's console lines show them, without floating point (whose
//! formatting would add its tables to the restorer).

/// Bytes shown in MiB with one decimal, rounded to nearest: `Mib(8_247_232)` is `7.9`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mib(pub u64);

impl core::fmt::Display for Mib {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let tenths = (u128::from(self.0) * 10 + (1 << 19)) >> 20;
        write!(f, "{}.{}", tenths / 10, tenths % 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mib_rounds_to_one_decimal() {
        assert_eq!(Mib(8_247_232).to_string(), "7.9");
        assert_eq!(Mib(8_011_776).to_string(), "7.6");
        assert_eq!(Mib(0).to_string(), "0.0");
        assert_eq!(Mib(1 << 20).to_string(), "1.0");
        assert_eq!(Mib((1 << 20) - 1).to_string(), "1.0");
        assert_eq!(Mib(u64::MAX).to_string(), "17592186044416.0");
    }
}
