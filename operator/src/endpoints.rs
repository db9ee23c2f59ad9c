//! The optional allow-list of endpoints, pure: which Kafka bootstrap hosts and ClickHouse
//! hosts a pipeline may name (`--allowed-endpoints`, the chart's `allowedEndpoints`).
//!
//! Why: whoever may create a `TracePipeline` otherwise makes the operator (metadata, offsets,
//! migrations with the DDL credentials) and the gateway dial any host with their egress. With
//! a list, a pipeline naming a host outside it is refused before anything is dialled or
//! applied: `Ready=False` with reason [`NOT_ALLOWED`], one Warning Event, no gateway (a
//! gateway made before the list changed is left as it is, never pointed at the new host).
//!
//! A pattern is a host name or IP, matched case-insensitively and whole (`kafka.shop.svc`,
//! `10.0.0.7`, `::1`), or `*.` and a suffix, matching every host under it but not the suffix
//! itself (`*.kafka.svc` takes `b0.kafka.svc`, not `kafka.svc`). Ports are not part of it.
//! An empty list allows every host (the default).

/// The condition reason (and Event note's subject) of a refused pipeline.
pub const NOT_ALLOWED: &str = "EndpointNotAllowed";

/// The hosts pipelines may name; empty: any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    patterns: Vec<String>,
}

impl AllowList {
    /// From the flag's entries (surrounding blanks and empty entries dropped, lowercased).
    pub fn new<I, S>(patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let patterns = patterns
            .into_iter()
            .map(|p| p.as_ref().trim().trim_end_matches('.').to_ascii_lowercase())
            .filter(|p| !p.is_empty())
            .collect();
        Self { patterns }
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether `host` (a bare host, no port) matches one pattern.
    pub fn allows(&self, host: &str) -> bool {
        if self.patterns.is_empty() {
            return true;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.patterns.iter().any(|p| match p.strip_prefix("*.") {
            Some(suffix) => host
                .strip_suffix(suffix)
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
            None => *p == host,
        })
    }

    /// The endpoints of a pipeline outside the list, as the pipeline names them: each
    /// bootstrap server of `bootstrap_servers` (`host:port,…`) and the ClickHouse `endpoint`
    /// URL. `None`: everything allowed.
    pub fn refuse(&self, bootstrap_servers: &str, clickhouse_endpoint: &str) -> Option<Refused> {
        if self.patterns.is_empty() {
            return None;
        }
        let kafka: Vec<String> = bootstrap_servers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .filter(|s| !self.allows(&host_of(s)))
            .map(str::to_owned)
            .collect();
        let clickhouse =
            (!self.allows(&host_of(clickhouse_endpoint))).then(|| clickhouse_endpoint.to_owned());
        if kafka.is_empty() && clickhouse.is_none() {
            None
        } else {
            Some(Refused { kafka, clickhouse })
        }
    }
}

/// What a pipeline names outside the allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Bootstrap servers (`host:port`) outside the list.
    pub kafka: Vec<String>,
    /// The ClickHouse endpoint, when outside the list.
    pub clickhouse: Option<String>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut named = Vec::new();
        if !self.kafka.is_empty() {
            named.push(format!(
                "spec.kafka.bootstrapServers {}",
                self.kafka.join(",")
            ));
        }
        if let Some(url) = &self.clickhouse {
            named.push(format!("spec.clickhouse.endpoint {url}"));
        }
        write!(
            f,
            "{} not in the operator's allowed endpoints (--allowed-endpoints, the chart's \
             allowedEndpoints): nothing dialled, no gateway applied",
            named.join(" and ")
        )
    }
}

/// The host of `host:port`, `[v6]:port`, or a URL `scheme://[user@]host[:port][/path]`.
fn host_of(endpoint: &str) -> String {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or_default().to_owned();
    }
    // A bare IPv6 address has more than one colon and no port to strip.
    if authority.matches(':').count() > 1 {
        return authority.to_owned();
    }
    authority.split(':').next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_allows_every_host() {
        let any = AllowList::new(["", "  "]);
        assert!(any.is_empty());
        assert!(any.allows("evil.example"));
        assert_eq!(
            any.refuse("evil.example:9092", "https://evil.example:8443"),
            None
        );
    }

    #[test]
    fn hosts_match_whole_and_wildcards_match_below_the_suffix() {
        let list = AllowList::new(["Kafka.Shop.svc", "*.clickhouse.cloud", "10.0.0.7", "::1"]);
        assert!(list.allows("kafka.shop.svc"));
        assert!(list.allows("KAFKA.shop.svc."));
        assert!(!list.allows("kafka.shop.svc.evil.example"));
        assert!(!list.allows("xkafka.shop.svc"));
        assert!(list.allows("abc.eu-west-1.aws.clickhouse.cloud"));
        assert!(
            !list.allows("clickhouse.cloud"),
            "the suffix itself is not below it"
        );
        assert!(!list.allows("evilclickhouse.cloud"));
        assert!(list.allows("10.0.0.7"));
        assert!(!list.allows("10.0.0.70"));
        assert!(list.allows("::1"));
    }

    #[test]
    fn hosts_are_read_from_bootstrap_servers_and_urls() {
        assert_eq!(host_of("b0.kafka:9092"), "b0.kafka");
        assert_eq!(host_of("[fd00::7]:9092"), "fd00::7");
        assert_eq!(host_of("http://clickhouse.db:8123"), "clickhouse.db");
        assert_eq!(host_of("https://u@ch.example/path?x=1"), "ch.example");
        assert_eq!(host_of("http://[::1]:8123/"), "::1");
        assert_eq!(host_of("https://ch.example"), "ch.example");
    }

    #[test]
    fn a_pipeline_naming_another_host_is_refused_naming_each() {
        let list = AllowList::new(["*.kafka.svc", "clickhouse.db"]);
        assert_eq!(
            list.refuse(
                "b0.kafka.svc:9092,b1.kafka.svc:9092",
                "http://clickhouse.db:8123"
            ),
            None
        );
        let refused = list
            .refuse(
                "b0.kafka.svc:9092,attacker.example:9092",
                "https://exfil.example:8443",
            )
            .expect("refused");
        assert_eq!(refused.kafka, ["attacker.example:9092"]);
        assert_eq!(
            refused.clickhouse.as_deref(),
            Some("https://exfil.example:8443")
        );
        let message = refused.to_string();
        assert!(message.contains("attacker.example:9092"), "{message}");
        assert!(message.contains("exfil.example"), "{message}");
        assert!(!message.contains("b0.kafka.svc"), "{message}");
        let only_clickhouse = list
            .refuse("b0.kafka.svc:9092", "http://other.db:8123")
            .expect("refused");
        assert!(only_clickhouse.kafka.is_empty());
    }
}
