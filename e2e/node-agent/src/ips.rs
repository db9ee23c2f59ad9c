//! Pod IPs: one loopback address per pod, so every pod can bind the same ports.
//!
//! Linux routes all of 127.0.0.0/8 to `lo`, so any address in it can be bound without
//! configuration. Addresses are handed out round-robin, so a freed address is not reused
//! right away (a client of the old pod must not reach the new one by accident).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::str::FromStr;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IpError {
    #[error("pod IP range {0:?} is not FIRST-LAST with FIRST <= LAST (IPv4)")]
    BadRange(String),
    #[error("all {0} pod IPs are in use")]
    Exhausted(u32),
}

#[derive(Debug)]
pub struct IpPool {
    first: u32,
    last: u32,
    next: u32,
    by_owner: HashMap<String, Ipv4Addr>,
}

impl FromStr for IpPool {
    type Err = IpError;

    /// `127.0.0.2-127.0.0.254`.
    fn from_str(range: &str) -> Result<Self, IpError> {
        let bad = || IpError::BadRange(range.to_owned());
        let (a, b) = range.split_once('-').ok_or_else(bad)?;
        let first = u32::from(a.trim().parse::<Ipv4Addr>().map_err(|_| bad())?);
        let last = u32::from(b.trim().parse::<Ipv4Addr>().map_err(|_| bad())?);
        if first > last {
            return Err(bad());
        }
        Ok(Self {
            first,
            last,
            next: first,
            by_owner: HashMap::new(),
        })
    }
}

impl IpPool {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (self.first..=self.last).contains(&u32::from(ip))
    }

    /// The address of `owner` (a pod UID): its current one, else `preferred` when free and in
    /// range (a pod keeps its IP across agent restarts), else the next free one.
    pub fn allocate(
        &mut self,
        owner: &str,
        preferred: Option<Ipv4Addr>,
    ) -> Result<Ipv4Addr, IpError> {
        if let Some(ip) = self.by_owner.get(owner) {
            return Ok(*ip);
        }
        let in_use = |pool: &Self, ip: Ipv4Addr| pool.by_owner.values().any(|v| *v == ip);
        let ip = match preferred {
            Some(ip) if self.contains(ip) && !in_use(self, ip) => ip,
            _ => {
                let size = self.last - self.first + 1;
                let mut found = None;
                for _ in 0..size {
                    let candidate = Ipv4Addr::from(self.next);
                    self.next = if self.next == self.last {
                        self.first
                    } else {
                        self.next + 1
                    };
                    if !in_use(self, candidate) {
                        found = Some(candidate);
                        break;
                    }
                }
                found.ok_or(IpError::Exhausted(size))?
            }
        };
        self.by_owner.insert(owner.to_owned(), ip);
        Ok(ip)
    }

    /// The address `owner` holds, if any.
    pub fn address_of(&self, owner: &str) -> Option<Ipv4Addr> {
        self.by_owner.get(owner).copied()
    }

    pub fn release(&mut self, owner: &str) {
        self.by_owner.remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn hands_out_distinct_addresses_round_robin() {
        let mut pool: IpPool = "127.0.0.2-127.0.0.4".parse().unwrap();
        assert_eq!(pool.allocate("a", None).unwrap(), ip("127.0.0.2"));
        assert_eq!(pool.allocate("b", None).unwrap(), ip("127.0.0.3"));
        assert_eq!(
            pool.allocate("a", None).unwrap(),
            ip("127.0.0.2"),
            "same owner, same IP"
        );
        pool.release("a");
        // .2 was just freed: the next one is preferred, so .2 comes back only after .4.
        assert_eq!(pool.allocate("c", None).unwrap(), ip("127.0.0.4"));
        assert_eq!(pool.allocate("d", None).unwrap(), ip("127.0.0.2"));
        assert_eq!(pool.allocate("e", None), Err(IpError::Exhausted(3)));
        assert_eq!(pool.address_of("d"), Some(ip("127.0.0.2")));
        assert_eq!(pool.address_of("a"), None);
    }

    #[test]
    fn keeps_a_preferred_address_when_free_and_in_range() {
        let mut pool: IpPool = "127.0.0.2-127.0.0.9".parse().unwrap();
        assert_eq!(
            pool.allocate("a", Some(ip("127.0.0.7"))).unwrap(),
            ip("127.0.0.7")
        );
        assert_eq!(
            pool.allocate("b", Some(ip("127.0.0.7"))).unwrap(),
            ip("127.0.0.2")
        );
        assert_eq!(
            pool.allocate("c", Some(ip("10.0.0.1"))).unwrap(),
            ip("127.0.0.3")
        );
    }

    #[test]
    fn rejects_bad_ranges() {
        for bad in ["127.0.0.2", "127.0.0.9-127.0.0.2", "x-127.0.0.2", "::1-::2"] {
            assert!(bad.parse::<IpPool>().is_err(), "{bad}");
        }
    }
}
