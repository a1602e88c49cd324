//! A hasher for the caches' maps keyed by addresses: one multiply (Fibonacci hashing) instead
//! of SipHash, whose protection against chosen keys buys nothing for pointers we handed out.

use std::hash::{BuildHasherDefault, Hasher};

/// Hashes one `usize` (an address) by multiplying with 2^64 / phi.
#[derive(Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, v: usize) {
        self.0 = (v as u64 ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A `HashMap` keyed by addresses.
pub(crate) type AddrMap<V> = std::collections::HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearby_addresses_spread() {
        let mut m: AddrMap<usize> = AddrMap::default();
        for i in 0..10_000usize {
            m.insert(0x7f00_0000_0000 + i * 256, i);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m.get(&(0x7f00_0000_0000 + 42 * 256)), Some(&42));
        let h = |v: usize| {
            let mut h = AddrHasher::default();
            h.write_usize(v);
            h.finish() >> 57
        };
        // The top bits (hashbrown's control bytes) differ for neighbouring blocks.
        assert_ne!(h(0x1000), h(0x1100));
    }
}
