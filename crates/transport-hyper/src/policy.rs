//! The outbound address check (protocol §6): Phorge's deny list, the operator's
//! allow list that overrides it, and the verdict for one address.
//!
//! Pure and synchronous: it judges addresses, it never resolves or connects.
//! Every address the transport connects to passes through
//! [`OutboundPolicy::check`] first.

use std::net::IpAddr;

use ipnet::IpNet;

/// Phorge's `security.outbound-blacklist` default, in Phorge's order.
pub const PHORGE_DENY_LIST: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "255.255.255.255/32",
    "::/128",
    "::1/128",
    "::ffff:0:0/96",
    "100::/64",
    "64:ff9b::/96",
    "2001::/32",
    "2001:10::/28",
    "2001:20::/28",
    "2001:db8::/32",
    "2002::/16",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// [`PHORGE_DENY_LIST`] as networks.
pub fn phorge_deny_list() -> Vec<IpNet> {
    // The entries are constants covered by a unit test, so nothing is lost
    // by skipping a parse failure instead of panicking in library code.
    PHORGE_DENY_LIST
        .iter()
        .filter_map(|cidr| cidr.parse().ok())
        .collect()
}

/// Which addresses the transport may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundPolicy {
    deny: Vec<IpNet>,
    allow: Vec<IpNet>,
}

impl OutboundPolicy {
    /// A policy denying `deny` except where `allow` matches.
    pub fn new(deny: Vec<IpNet>, allow: Vec<IpNet>) -> Self {
        Self { deny, allow }
    }

    /// Whether the transport may connect to `ip`.
    ///
    /// The allow list wins over the deny list. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) is judged both as itself and as the IPv4 address
    /// it carries, so removing `::ffff:0:0/96` from a custom deny list does
    /// not open a path around the IPv4 entries.
    pub fn permits(&self, ip: IpAddr) -> bool {
        if self.allow.iter().any(|net| net.contains(&ip)) {
            return true;
        }
        if self.deny.iter().any(|net| net.contains(&ip)) {
            return false;
        }
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => self.permits(IpAddr::V4(v4)),
                None => true,
            },
            IpAddr::V4(_) => true,
        }
    }

    /// The first address of `ips` the policy refuses, if any.
    pub fn first_denied(&self, ips: impl IntoIterator<Item = IpAddr>) -> Option<IpAddr> {
        ips.into_iter().find(|ip| !self.permits(*ip))
    }
}

impl Default for OutboundPolicy {
    fn default() -> Self {
        Self::new(phorge_deny_list(), Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().expect("cidr")).collect()
    }

    #[test]
    fn every_phorge_entry_parses() {
        assert_eq!(PHORGE_DENY_LIST.len(), 29);
        assert_eq!(phorge_deny_list().len(), PHORGE_DENY_LIST.len());
    }

    #[test]
    fn default_denies_phorge_ranges_and_permits_public_addresses() {
        let policy = OutboundPolicy::default();
        for denied in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "127.255.255.254",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.255",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:8.8.8.8",
            "100::1",
            "64:ff9b::808:808",
            "2001::1",
            "2001:10::1",
            "2001:20::1",
            "2001:db8::1",
            "2002::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(!policy.permits(ip(denied)), "{denied} must be denied");
        }
        for permitted in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            assert!(
                policy.permits(ip(permitted)),
                "{permitted} must be permitted"
            );
        }
    }

    #[test]
    fn allow_list_overrides_deny_list() {
        let policy = OutboundPolicy::new(phorge_deny_list(), nets(&["127.0.0.1/32"]));
        assert!(policy.permits(ip("127.0.0.1")));
        assert!(!policy.permits(ip("127.0.0.2")));
        // The mapped form is its own entry in Phorge's list; allowing the
        // IPv4 address does not allow it.
        assert!(!policy.permits(ip("::ffff:127.0.0.1")));
    }

    #[test]
    fn mapped_addresses_are_judged_as_ipv4_too() {
        let deny_v4_only = nets(&["10.0.0.0/8"]);
        let policy = OutboundPolicy::new(deny_v4_only, Vec::new());
        assert!(!policy.permits(ip("::ffff:10.0.0.1")));
        assert!(policy.permits(ip("::ffff:8.8.8.8")));
    }

    #[test]
    fn first_denied_names_the_offending_address() {
        let policy = OutboundPolicy::default();
        assert_eq!(
            policy.first_denied([ip("8.8.8.8"), ip("10.0.0.1"), ip("127.0.0.1")]),
            Some(ip("10.0.0.1"))
        );
        assert_eq!(policy.first_denied([ip("8.8.8.8")]), None);
    }
}
