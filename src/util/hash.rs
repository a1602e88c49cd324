//! A hasher for the caches' maps keyed by addresses: one multiply (Fibonacci hashing) instead
//! of SipHash, whose protection against chosen keys buys nothing for pointers we handed out.
//! The product's high half is folded into its low half: hashbrown picks the bucket from the low
//! bits, and a multiply leaves the low bits of aligned addresses zero (4 KiB-aligned blocks
//! would all start at bucket 0).

use std::hash::{BuildHasherDefault, Hasher};

/// 2^64 / phi, odd: Fibonacci hashing's multiplier.
const PHI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Hashes one `usize` (an address) by multiplying with 2^64 / phi.
#[derive(Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(PHI);
        }
    }

    fn write_usize(&mut self, v: usize) {
        self.0 = (v as u64 ^ self.0).wrapping_mul(PHI);
    }
}

/// Which of `n` (a power of two) parts an address falls in: the top bits of its product.
pub(crate) fn part(addr: usize, n: usize) -> usize {
    debug_assert!(n.is_power_of_two() && n > 1);
    ((addr as u64).wrapping_mul(PHI) >> (64 - n.trailing_zeros())) as usize
}

/// A `HashMap` keyed by addresses.
pub(crate) type AddrMap<V> = std::collections::HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(addr: usize) -> u64 {
        let mut h = AddrHasher::default();
        h.write_usize(addr);
        h.finish()
    }

    #[test]
    fn nearby_addresses_spread() {
        let mut m: AddrMap<usize> = AddrMap::default();
        for i in 0..10_000usize {
            m.insert(0x7f00_0000_0000 + i * 256, i);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get(&(0x7f00_0000_0000 + 42 * 256)), Some(&42));
        // The top bits (hashbrown's control bytes) differ for neighbouring blocks.
        assert_ne!(hash(0x1000) >> 57, hash(0x1100) >> 57);
    }

    #[test]
    fn aligned_addresses_spread_over_buckets_and_parts() {
        // hashbrown's bucket: the low bits of the hash. 1024 blocks 4 KiB (and 2 MiB) apart over
        // 1024 buckets, and over 16 parts.
        for stride in [4096usize, 2 << 20] {
            let addrs: Vec<usize> = (0..1024).map(|i| 0x7f00_0000_0000 + i * stride).collect();
            let buckets: std::collections::HashSet<u64> =
                addrs.iter().map(|&a| hash(a) & 1023).collect();
            assert!(
                buckets.len() > 600,
                "stride {stride}: {} buckets",
                buckets.len()
            );
            let mut per_part = [0usize; 16];
            for &a in &addrs {
                per_part[part(a, 16)] += 1;
            }
            assert!(
                per_part.iter().all(|&n| n > 32),
                "stride {stride}: {per_part:?}"
            );
        }
    }
}
