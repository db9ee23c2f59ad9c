//! Identifiers and string literals, the only way user-supplied names reach SQL.
//!
//! Every database, table and cluster name is an [`Ident`]: validated once when it is
//! built, then always rendered back-quoted with ClickHouse's own escaping. Nothing in
//! this crate splices a raw user string into SQL; string values go through
//! [`quote_str`]. Both are pure and unit-tested against hostile input below.

use std::fmt;

use crate::error::Error;

/// Longest identifier we accept, in bytes.
///
/// ClickHouse names metadata files after tables, escaping every non-alphanumeric byte
/// as `%XX` (three bytes). File names stop at 255 bytes, and the lookup objects append
/// up to `_trace_id_ts_mv` (15 bytes) to the table name, so 64 bytes keeps even a name
/// made only of escaped characters under the limit: (64 + 15) × 3 + ".sql" < 255.
pub const MAX_IDENT_LEN: usize = 64;

/// A validated ClickHouse identifier (database, table, column or cluster name).
///
/// Accepted: 1..=[`MAX_IDENT_LEN`] bytes of UTF-8 without control characters and
/// without leading or trailing whitespace. Quotes, backticks, semicolons, dots and
/// spaces inside the name are legal in ClickHouse and are kept: rendering always
/// back-quotes and escapes them, so they can never end the identifier early.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ident(String);

impl Ident {
    /// Validates `name` as the identifier named `what` (used in the error message).
    pub fn new(what: &'static str, name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        let reject = |reason: String| Error::InvalidIdentifier {
            what,
            name: name.escape_debug().to_string(),
            reason,
        };
        if name.is_empty() {
            return Err(reject("it is empty".into()));
        }
        if name.len() > MAX_IDENT_LEN {
            return Err(reject(format!(
                "it is {} bytes long, the limit is {MAX_IDENT_LEN}",
                name.len()
            )));
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(reject(format!(
                "it contains the control character U+{:04X}",
                u32::from(c)
            )));
        }
        if name.trim() != name {
            return Err(reject("it starts or ends with whitespace".into()));
        }
        Ok(Self(name))
    }

    /// The name as given (unquoted). Use only as a value, never as SQL text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This identifier with `suffix` appended, validated again (length may overflow).
    pub fn with_suffix(&self, what: &'static str, suffix: &str) -> Result<Self, Error> {
        Self::new(what, format!("{}{suffix}", self.0))
    }

    /// The back-quoted SQL form, e.g. `` `otel_traces` ``.
    pub fn quoted(&self) -> String {
        quote_ident(&self.0)
    }
}

impl fmt::Debug for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ident({:?})", self.0)
    }
}

/// Renders as the quoted SQL form, so `format!("{db}.{table}")` is always safe.
impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.quoted())
    }
}

/// Back-quotes any name the way ClickHouse's `backQuote` does: backslash escapes the
/// backslash and the backtick, so the quoted form always ends where we end it.
///
/// Used for names that never came from a user too (column names), so all identifiers
/// in rendered SQL look alike.
pub fn quote_ident(name: &str) -> String {
    quote_with(name, '`')
}

/// A single-quoted SQL string literal with every special character escaped.
///
/// Backslash and quote are escaped with a backslash; control characters (which an
/// [`Ident`] can never hold, but free text such as a DDL statement stored in the ledger
/// can) are written as escapes so a literal never spans a raw newline or NUL.
pub fn quote_str(value: &str) -> String {
    quote_with(value, '\'')
}

fn quote_with(value: &str, quote: char) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push(quote);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(name: &str) -> String {
        match Ident::new("table", name) {
            Err(e) => e.to_string(),
            Ok(ok) => panic!("{name:?} was accepted as {ok:?}"),
        }
    }

    #[test]
    fn plain_names_are_accepted_and_back_quoted() {
        let t = Ident::new("table", "otel_traces").unwrap();
        assert_eq!(t.as_str(), "otel_traces");
        assert_eq!(t.to_string(), "`otel_traces`");
    }

    #[test]
    fn empty_too_long_and_control_characters_are_rejected_with_the_reason() {
        assert!(rejected("").contains("empty"));
        let long = "a".repeat(MAX_IDENT_LEN + 1);
        assert!(rejected(&long).contains("limit is 64"));
        assert!(rejected("a\nb").contains("control character"));
        assert!(rejected("a\0b").contains("control character"));
        assert!(rejected("a\u{7f}").contains("control character"));
        assert!(rejected(" traces").contains("whitespace"));
        assert!(rejected("traces ").contains("whitespace"));
        // The message names which option was wrong.
        assert!(rejected("").starts_with("invalid table name"));
    }

    #[test]
    fn max_length_counts_bytes_not_characters() {
        assert!(Ident::new("table", "é".repeat(32)).is_ok()); // 64 bytes
        assert!(rejected(&"é".repeat(33)).contains("66 bytes"));
    }

    #[test]
    fn hostile_names_cannot_close_the_quote() {
        let cases = [
            ("a`b", r"`a\`b`"),
            (
                "x`; DROP DATABASE default; --",
                r"`x\`; DROP DATABASE default; --`",
            ),
            (r"a\`b", r"`a\\\`b`"),
            (r"trailing\", r"`trailing\\`"),
            ("it's \"quoted\"", "`it's \"quoted\"`"),
            ("spaces and.dots", "`spaces and.dots`"),
            ("ünï ☃", "`ünï ☃`"),
        ];
        for (name, want) in cases {
            let ident = Ident::new("table", name).unwrap();
            assert_eq!(ident.quoted(), want, "{name:?}");
            assert_eq!(unquote(&ident.quoted(), '`'), name);
        }
    }

    #[test]
    fn string_literals_escape_quotes_backslashes_and_control_characters() {
        assert_eq!(quote_str("plain"), "'plain'");
        assert_eq!(quote_str("it's"), r"'it\'s'");
        assert_eq!(
            quote_str(r"a\'; DROP TABLE t; --"),
            r"'a\\\'; DROP TABLE t; --'"
        );
        assert_eq!(quote_str("l1\nl2\t\0\r\u{1}"), r"'l1\nl2\t\0\r\x01'");
        assert_eq!(quote_str("`back`"), "'`back`'");
        for s in ["", "'", "\\", "\\'", "'\\", "x\n'y", "ü'"] {
            assert_eq!(unquote(&quote_str(s), '\''), s);
        }
    }

    /// A reader for the quoted form, written independently of the quoting code:
    /// it must find the closing quote exactly at the end and give the input back.
    fn unquote(quoted: &str, quote: char) -> String {
        let mut chars = quoted.chars();
        assert_eq!(chars.next(), Some(quote));
        let mut out = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next().unwrap() {
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    '0' => out.push('\0'),
                    'x' => {
                        let hex: String = chars.by_ref().take(2).collect();
                        out.push(char::from(u8::from_str_radix(&hex, 16).unwrap()));
                    }
                    other => out.push(other),
                },
                c if c == quote => {
                    assert_eq!(chars.next(), None, "quote closed early in {quoted:?}");
                    return out;
                }
                c => out.push(c),
            }
        }
        panic!("unterminated {quoted:?}");
    }
}
