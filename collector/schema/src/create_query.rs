//! Reading an existing table's `system.tables.create_table_query`: the text the TTL
//! ([`crate::retention::current_ttl`]) and settings ([`crate::dedup_window::setting_in`])
//! parsers look through, with every `COMMENT '…'` clause taken out first.
//!
//! Why: those parsers find clauses by their keywords (` TTL `, ` SETTINGS `, `name = value`),
//! and a comment is free text in the same string. A column comment such as
//! `COMMENT 'rows expire by TTL after 30 days'` made the TTL read back as
//! `after 30 days'…`, so `apply` ran `MODIFY TTL` on every call and `status` never settled;
//! a table comment, which ClickHouse prints after the `SETTINGS` clause
//! (`… non_replicated_deduplication_window = 2880 COMMENT 'note'`), made the window read as
//! 0, so every `apply` raised it again and the collector warned that deduplication was off.
//! Comments say nothing about a table's shape: adoption ignores them too (it reads
//! `system.columns.type`, which never carries the comment).
//!
//! Pure; the one caller is `migrate::create_queries`, which every reader of a create query
//! goes through.

/// `query` without its `COMMENT '…'` clauses (column and table comments). String literals
/// elsewhere (an `ALIAS` expression's, a codec's) and back-quoted names are left as they are,
/// so a literal or a column that merely contains the word is untouched.
pub fn without_comments(query: &str) -> String {
    let bytes = query.as_bytes();
    let mut out = String::with_capacity(query.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' | b'`' | b'"' => i = skip_quoted(bytes, i),
            _ if starts_comment(bytes, i) => {
                // Drop the keyword, the blanks after it and its literal, and the one blank
                // before it, so `a String COMMENT 'x' CODEC(…)` reads `a String CODEC(…)`.
                let start = if i > 0 && bytes[i - 1] == b' ' {
                    i - 1
                } else {
                    i
                };
                out.push_str(&query[copied..start]);
                let mut j = i + "COMMENT".len();
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                i = skip_quoted(bytes, j);
                copied = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&query[copied..]);
    out
}

/// Whether the keyword `COMMENT`, followed by a string literal, starts at `i` (a whole word).
fn starts_comment(bytes: &[u8], i: usize) -> bool {
    const KW: &[u8] = b"COMMENT";
    let word_start = i == 0 || !is_word(bytes[i - 1]);
    let Some(kw) = bytes.get(i..i + KW.len()) else {
        return false;
    };
    if !word_start || !kw.eq_ignore_ascii_case(KW) {
        return false;
    }
    let rest = &bytes[i + KW.len()..];
    let blanks = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    blanks > 0 && rest.get(blanks) == Some(&b'\'')
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The index just past the quoted text that opens at `open` (its quote character closes it;
/// a backslash escapes the next byte, as ClickHouse writes `\'` inside a literal). An
/// unterminated quote runs to the end.
fn skip_quoted(bytes: &[u8], open: usize) -> usize {
    let Some(&quote) = bytes.get(open) else {
        return bytes.len();
    };
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dedup_window::setting_in;
    use crate::retention::current_ttl;

    /// As `system.tables.create_table_query` shows a commented table (chdb 26.9 through
    /// chserver, checked 2026-11-26), one line.
    const COMMENTED: &str = "CREATE TABLE db.otel_traces (`Timestamp` DateTime64(9) COMMENT 'rows expire by TTL after 30 days, SETTINGS x = 1' CODEC(Delta(8), ZSTD(1)), `TraceId` String COMMENT 'it\\'s hex' CODEC(ZSTD(1)), `SpanAttributeItems` Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(SpanAttributes, 'Array(Tuple(String, String))')), INDEX idx_trace_id TraceId TYPE text(tokenizer = 'array') GRANULARITY 100000000) ENGINE = MergeTree PARTITION BY toDate(Timestamp) ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp) TTL toDateTime(Timestamp) + toIntervalDay(30) SETTINGS index_granularity = 8192, non_replicated_deduplication_window = 2880 COMMENT 'owned by the SRE team; TTL set by tracehouse'";

    #[test]
    fn column_and_table_comments_are_removed_and_nothing_else() {
        let q = without_comments(COMMENTED);
        assert!(!q.contains("COMMENT"), "{q}");
        assert!(!q.contains("after 30 days") && !q.contains("SRE team") && !q.contains("hex"));
        assert!(
            q.contains("`Timestamp` DateTime64(9) CODEC(Delta(8), ZSTD(1)), `TraceId` String CODEC(ZSTD(1))"),
            "{q}"
        );
        // Other literals are kept whole, quotes and escapes included.
        assert!(q.contains("concat(kv.1, '=', kv.2)"), "{q}");
        assert!(q.contains("TYPE text(tokenizer = 'array')"), "{q}");
        assert!(
            q.ends_with("non_replicated_deduplication_window = 2880"),
            "{q}"
        );
    }

    #[test]
    fn the_parsers_read_through_comments() {
        // Without the comments taken out, both readings were wrong.
        assert_ne!(
            current_ttl(COMMENTED).as_deref(),
            Some("toDateTime(Timestamp) + toIntervalDay(30)")
        );
        assert_eq!(
            setting_in(COMMENTED, "non_replicated_deduplication_window"),
            None
        );
        let q = without_comments(COMMENTED);
        assert_eq!(
            current_ttl(&q).as_deref(),
            Some("toDateTime(Timestamp) + toIntervalDay(30)")
        );
        assert_eq!(
            setting_in(&q, "non_replicated_deduplication_window"),
            Some(2880)
        );
    }

    #[test]
    fn words_that_only_contain_comment_and_uncommented_queries_are_untouched() {
        for q in [
            "CREATE TABLE t (`COMMENT` String, `x_COMMENT` String COMMENTS 'x', `y` String DEFAULT 'COMMENT \\'z\\'') ENGINE = MergeTree ORDER BY x",
            "CREATE TABLE t (a String) ENGINE = MergeTree ORDER BY a SETTINGS index_granularity = 8192",
            "",
        ] {
            assert_eq!(without_comments(q), q);
        }
        // An unterminated literal (never printed by the server) does not panic.
        assert_eq!(
            without_comments("CREATE TABLE t (a String COMMENT 'x"),
            "CREATE TABLE t (a String"
        );
    }
}
