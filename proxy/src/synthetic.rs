//! The two-way map between DNS names and the synthetic addresses Airlock's
//! resolver hands out for them, so that every captured connection names its
//! host.
//!
//! Addresses come from 198.18.0.0/15 (RFC 2544's benchmarking range, never
//! routed). The map is bounded: it keeps the [`CAPACITY`] most recently used
//! names, because every well-formed name gets an address and a hostile
//! program can ask for as many names as it likes. A connection to an address
//! that was evicted, or never handed out, names no host and is refused.
//!
//! Addresses are handed out round-robin over the whole range, skipping those
//! still mapped, so an evicted address is given to another name only after
//! about 131,000 further names: long after a client's cached answer (TTL
//! 60 s) has expired. Even then, a stale client would reach the new name's
//! connection, whose TLS SNI and HTTP Host checks refuse a request for the old
//! name.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroUsize;
use std::sync::Mutex;

use airlock_policy::Host;
use lru::LruCache;

const BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
/// A /15.
const SIZE: u32 = 1 << 17;
/// Names kept at once: about 10 MiB at the longest names, well under the
/// range's size so that round-robin allocation always finds a free address.
pub const CAPACITY: usize = 32_768;

/// The bounded two-way map between names and synthetic addresses.
#[derive(Debug)]
pub struct SyntheticAddresses {
    inner: Mutex<Maps>,
}

#[derive(Debug)]
struct Maps {
    by_name: LruCache<Host, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, Host>,
    /// Offset of the last address handed out.
    last: u32,
}

impl Default for SyntheticAddresses {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl SyntheticAddresses {
    /// A map that keeps at most `capacity` names (at least 1, and fewer than
    /// the range holds).
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, (SIZE / 2) as usize);
        Self {
            inner: Mutex::new(Maps {
                by_name: LruCache::new(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)),
                by_addr: HashMap::new(),
                last: 0,
            }),
        }
    }

    /// The address for `name`, allocated on first use (evicting the least
    /// recently used name when the map is full).
    pub fn address_for(&self, name: &Host) -> Option<Ipv4Addr> {
        let mut maps = self.inner.lock().ok()?;
        if let Some(ip) = maps.by_name.get(name) {
            return Some(*ip);
        }
        let ip = maps.next_free()?;
        if let Some((_, evicted)) = maps.by_name.push(name.clone(), ip) {
            maps.by_addr.remove(&evicted);
        }
        maps.by_addr.insert(ip, name.clone());
        Some(ip)
    }

    /// The name behind a synthetic address, if it is still mapped; using it
    /// counts as a use, so a name in active use is not evicted.
    pub fn name_for(&self, ip: IpAddr) -> Option<Host> {
        let IpAddr::V4(v4) = ip else { return None };
        let mut maps = self.inner.lock().ok()?;
        let name = maps.by_addr.get(&v4)?.clone();
        maps.by_name.promote(&name);
        Some(name)
    }

    /// Whether `ip` lies in the synthetic range at all.
    pub fn in_range(ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => u32::from(v4).wrapping_sub(BASE) < SIZE,
            IpAddr::V6(_) => false,
        }
    }

    /// How many names are mapped now (for tests and the fuzz targets).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |m| m.by_name.len())
    }

    #[cfg(feature = "fuzzing")]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Maps {
    /// The next unmapped address after the last one handed out, skipping the
    /// range's first and last address so no answer looks like a network or
    /// broadcast address. The map holds at most half the range, so this
    /// finds one within `capacity + 1` steps.
    fn next_free(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..SIZE {
            self.last = if self.last + 1 >= SIZE - 1 {
                1
            } else {
                self.last + 1
            };
            let ip = Ipv4Addr::from(BASE + self.last);
            // A full map evicts one name on insert, which may free exactly
            // this address; skipping it anyway costs one step.
            if !self.by_addr.contains_key(&ip) {
                return Some(ip);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> Host {
        Host::parse(name).unwrap()
    }

    #[test]
    fn synthetic_addresses_map_both_ways_and_stay_in_range() {
        let map = SyntheticAddresses::default();
        let a = host("a.example");
        let b = host("b.example");
        let ia = map.address_for(&a).unwrap();
        let ib = map.address_for(&b).unwrap();
        assert_ne!(ia, ib);
        assert_eq!(map.address_for(&a), Some(ia));
        assert_eq!(map.name_for(IpAddr::V4(ib)), Some(b));
        assert!(SyntheticAddresses::in_range(IpAddr::V4(ia)));
        assert!(!SyntheticAddresses::in_range("8.8.8.8".parse().unwrap()));
        assert_eq!(map.name_for("198.18.200.1".parse().unwrap()), None);
    }

    #[test]
    fn the_map_is_bounded_and_an_evicted_address_names_nothing() {
        let map = SyntheticAddresses::with_capacity(3);
        let first = map.address_for(&host("n0.example")).unwrap();
        for i in 1..10 {
            map.address_for(&host(&format!("n{i}.example"))).unwrap();
        }
        assert_eq!(map.len(), 3);
        assert_eq!(map.name_for(IpAddr::V4(first)), None);
        // Asked again, the name gets a new address, not its old one.
        assert_ne!(map.address_for(&host("n0.example")), Some(first));
    }

    #[test]
    fn a_name_in_use_is_not_evicted() {
        let map = SyntheticAddresses::with_capacity(2);
        let kept = host("kept.example");
        let ip = map.address_for(&kept).unwrap();
        for i in 0..10 {
            map.address_for(&host(&format!("n{i}.example"))).unwrap();
            // A connection to it counts as a use.
            assert_eq!(map.name_for(IpAddr::V4(ip)), Some(kept.clone()));
        }
    }

    #[test]
    fn addresses_are_not_reused_until_the_range_wraps() {
        let map = SyntheticAddresses::with_capacity(4);
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            let ip = map.address_for(&host(&format!("n{i}.example"))).unwrap();
            assert!(seen.insert(ip), "{ip} handed out twice");
            assert!(SyntheticAddresses::in_range(IpAddr::V4(ip)));
            assert_ne!(ip, Ipv4Addr::new(198, 18, 0, 0));
        }
    }
}
