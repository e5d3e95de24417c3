//! Secrets out of outgoing prompts: every remote request's text is scanned and
//! each secret replaced by a placeholder that names its kind and is the same
//! wherever the same secret appears (within this process), so a rewrite that
//! keeps the placeholder can have the original put back.
//!
//! The known formats follow gitleaks' rule set (MIT, github.com/gitleaks/gitleaks,
//! `config/gitleaks.toml`): the same rule ids and key shapes, written here as
//! `regex` patterns. The generic rule is gitleaks' "generic-api-key" idea: an
//! assignment to a name that says key, token, secret or password, whose value
//! is random enough (Shannon entropy) to be one.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::{Captures, Match, Regex};
use sha2::{Digest, Sha256};

/// One known secret format.
struct Rule {
    id: &'static str,
    pattern: Regex,
}

fn rule(id: &'static str, pattern: &str) -> Rule {
    Rule {
        id,
        pattern: Regex::new(pattern).expect("secret patterns compile"),
    }
}

/// Known formats, most specific first: a later rule never sees what an
/// earlier one replaced.
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    vec![
        rule(
            "private-key",
            r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----",
        ),
        rule("anthropic-api-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
        rule("openrouter-api-key", r"\bsk-or-v1-[A-Za-z0-9]{32,}"),
        rule(
            "openai-api-key",
            r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
        ),
        rule(
            "aws-access-key-id",
            r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
        ),
        rule("github-pat", r"\bgithub_pat_[A-Za-z0-9_]{60,}"),
        rule("github-token", r"\bgh[pousr]_[A-Za-z0-9]{36,}"),
        rule("gitlab-pat", r"\bglpat-[A-Za-z0-9_-]{20,}"),
        rule("slack-token", r"\bxox[baprse]-[A-Za-z0-9-]{10,}"),
        rule(
            "stripe-key",
            r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{20,}",
        ),
        rule("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}"),
        rule("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}"),
        rule("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
        rule(
            "sendgrid-api-key",
            r"\bSG\.[A-Za-z0-9_-]{20,24}\.[A-Za-z0-9_-]{39,50}",
        ),
        rule(
            "jwt",
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        ),
        rule("azure-storage-key", r"AccountKey=[A-Za-z0-9+/]{80,}={0,2}"),
    ]
});

/// The password of a URL's user info (`scheme://user:password@host`).
static CONNECTION_PASSWORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@]{1,100}:([^\s@/]{3,200})@")
        .expect("connection string pattern compiles")
});

/// `NAME = "value"`, `NAME: 'value'`, `NAME=value` (env and ini files), `"name": "value"`.
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?im)(?P<name>[A-Za-z0-9_.-]*(?:key|token|secret|passw(?:or)?d|pwd|credential|auth)[A-Za-z0-9_.-]*)["']?\s*(?::=|=>|=|:)\s*(?:["'`](?P<quoted>[^"'`\n]{6,300})["'`]|(?P<bare>[^\s"'`;,)(\]\[{}<>]{8,300})\s*$)"#,
    )
    .expect("assignment pattern compiles")
});

/// A bare value that names a variable or constant (`form.password`,
/// `DEFAULT_PASSWORD`, `new_password`) rather than holding a value.
static IDENTIFIER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[A-Z_][A-Z0-9_]*|[a-z_]+)$",
    )
    .expect("identifier pattern compiles")
});

/// The name of a setting or map key: `a.b.c`, `SOME_NAME`, `some_name`.
static KEY_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)$")
        .expect("key name pattern compiles")
});

/// Words, camel-cased or joined (`authentication-code-1`, `retryCount`,
/// `s3-key-prefix`): random tokens break into single letters somewhere.
static WORDS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[A-Za-z][a-z]{2,}|[A-Z]{2,}|[0-9]{1,4})(?:[-_.:/ ]*(?:[A-Za-z][a-z]{2,}|[A-Z]{2,}|[0-9]{1,4}))*$")
        .expect("words pattern compiles")
});

/// `provider/model`, `dir/file`: lower-case segments joined by slashes.
static PATH_LIKE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9._-]+(?:/[a-z0-9._-]+)+$").expect("path pattern compiles")
});

/// Process-wide salt for placeholders: stable within a process, meaningless
/// outside it (a bare hash of a short password could be looked up).
static SALT: LazyLock<[u8; 16]> = LazyLock::new(|| {
    let mut salt = [0u8; 16];
    let from_os = std::fs::File::open("/dev/urandom")
        .and_then(|mut random| std::io::Read::read_exact(&mut random, &mut salt));
    if from_os.is_err() {
        salt.iter_mut().for_each(|b| *b = fastrand::u8(..));
    }
    salt
});

/// Text with its secrets replaced, and how many there were.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redacted {
    pub text: String,
    pub count: usize,
}

/// Compiles the rules now, on a thread of their own, so the first remote
/// request does not pay for it (~20 ms optimised, ~100 ms in a debug build).
pub fn prepare() {
    std::thread::spawn(|| {
        redact("");
    });
}

/// Replaces every secret in `text` with its placeholder.
pub fn redact(text: &str) -> Redacted {
    let mut count = 0;
    let text = replace_secrets(text, &mut |_, _| count += 1);
    Redacted { text, count }
}

/// Puts back the originals of placeholders that `answer` kept from the
/// redacted form of `sources` (which are scanned only when it kept one).
pub fn restore(answer: &str, sources: &[&str]) -> String {
    if !answer.contains("REDACTED_") {
        return answer.to_owned();
    }
    let mut originals: HashMap<String, String> = HashMap::new();
    for source in sources {
        replace_secrets(source, &mut |placeholder, secret| {
            originals.insert(placeholder.to_owned(), secret.to_owned());
        });
    }
    // A secret found inside another (a key inside a token) leaves its
    // placeholder in the outer one's original: put back until none is left,
    // whatever order the map gives.
    let mut restored = answer.to_owned();
    for _ in 0..=originals.len() {
        let mut changed = false;
        for (placeholder, secret) in &originals {
            if restored.contains(placeholder.as_str()) {
                restored = restored.replace(placeholder.as_str(), secret);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    restored
}

/// Replaces each secret, telling `found` its placeholder and the secret.
fn replace_secrets(text: &str, found: &mut dyn FnMut(&str, &str)) -> String {
    let mut text = text.to_owned();
    for rule in RULES.iter() {
        text = replace_each(&text, &rule.pattern, rule.id, whole_match, found);
    }
    text = replace_each(
        &text,
        &CONNECTION_PASSWORD,
        "connection-password",
        user_info_password,
        found,
    );
    replace_each(&text, &ASSIGNMENT, "generic-secret", assigned_secret, found)
}

/// Where a match of a secret pattern holds the secret (`None`: it holds none).
type SecretIn = for<'t> fn(&Captures<'t>) -> Option<Match<'t>>;

fn whole_match<'t>(captures: &Captures<'t>) -> Option<Match<'t>> {
    captures.get(0).filter(|m| !is_placeholder(m.as_str()))
}

fn user_info_password<'t>(captures: &Captures<'t>) -> Option<Match<'t>> {
    captures.get(1).filter(|m| !is_placeholder(m.as_str()))
}

fn assigned_secret<'t>(captures: &Captures<'t>) -> Option<Match<'t>> {
    let quoted = captures.name("quoted");
    let value = quoted.or_else(|| captures.name("bare"))?;
    looks_secret(&captures["name"], value.as_str(), quoted.is_some()).then_some(value)
}

/// Replaces the secret in every match of `pattern` with its placeholder.
fn replace_each(
    text: &str,
    pattern: &Regex,
    id: &str,
    secret_in: SecretIn,
    found: &mut dyn FnMut(&str, &str),
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for captures in pattern.captures_iter(text) {
        let Some(secret) = secret_in(&captures) else {
            continue;
        };
        let placeholder = placeholder(id, secret.as_str());
        found(&placeholder, secret.as_str());
        out.push_str(&text[last..secret.start()]);
        out.push_str(&placeholder);
        last = secret.end();
    }
    out.push_str(&text[last..]);
    out
}

/// Whether an assigned value is a secret rather than code, a reference to
/// one, or a stand-in.
fn looks_secret(name: &str, value: &str, quoted: bool) -> bool {
    let name = name.to_ascii_lowercase();
    // Names that mention keys or tokens without holding one.
    let mentions_only = ["keyboard", "keyword", "monkey", "tokeniz", "keylog"]
        .iter()
        .any(|n| name.contains(n))
        || [
            "keys", "tokens", "_type", "_name", "_kind", "_id", "_len", "_count", "_file",
            "filename", "_path", "_url", "_header", "_hdr", "_class", "_mode", "_size", "_index",
            "_prefix", "_suffix", "_format", "_final",
        ]
        .iter()
        .any(|n| name.ends_with(n));
    if mentions_only || is_placeholder(value) || is_reference(value) {
        return false;
    }
    // A bare name is a variable or constant holding the secret elsewhere; a
    // quoted one names a key in a map or a setting.
    if (!quoted && IDENTIFIER.is_match(value)) || KEY_NAME.is_match(value) {
        return false;
    }
    if name.contains("passw") || name.contains("pwd") || name.contains("secret") {
        // A password needs no randomness to be one (a leaked weak password
        // costs more than a placeholder in a test fixture); prose does not count.
        return !value.contains(' ') && value.chars().count() >= 6;
    }
    // Other keys and tokens are random: letters and digits, not words, no
    // escapes or markup, and enough entropy.
    let letters = value.chars().any(|c| c.is_ascii_alphabetic());
    let digits = value.chars().any(|c| c.is_ascii_digit());
    value.chars().count() >= 12
        && letters
        && digits
        && !value.contains([' ', '\\', '&'])
        && (is_hex(value) || !WORDS.is_match(value))
        && shannon_entropy(value) >= 3.3
}

/// `${VAR}`, `<your key>`, `xxxx`, `changeme`-style stand-ins, and our own placeholders.
fn is_placeholder(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    value.starts_with("REDACTED_")
        || value.starts_with('$')
        || value.starts_with('<')
        || value.starts_with('{')
        || value.starts_with('%')
        || lower.contains("example")
        || lower.contains("placeholder")
        || lower.contains("your_")
        || lower.contains("your-")
        || [
            "password", "passwd", "pass", "pwd", "pw", "secret", "token", "changeme",
        ]
        .contains(&lower.as_str())
        || value
            .chars()
            .all(|c| c == value.chars().next().unwrap_or('x') || c == '-')
}

/// A value that names where the secret is rather than holding it.
fn is_reference(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    // A whole word: `env("DB")` and `environ["DB"]` name a place; a random
    // password that happens to begin "env" (`enVwLx4A`) does not.
    let names_environment = ["env", "environ", "getenv"].iter().any(|word| {
        lower
            .strip_prefix(word)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric()))
    });
    names_environment
        || ["process.", "os.", "config.", "settings.", "self.", "this."]
            .iter()
            .any(|p| lower.starts_with(p))
        || value.contains("::")
        || ["/", "./", "../", "~/"]
            .iter()
            .any(|p| value.starts_with(p))
        || PATH_LIKE.is_match(value)
        || [".json", ".pem", ".key", ".txt", ".toml", ".yaml", ".yml"]
            .iter()
            .any(|e| lower.ends_with(e))
}

fn is_hex(value: &str) -> bool {
    value.chars().all(|c| c.is_ascii_hexdigit())
}

fn shannon_entropy(value: &str) -> f64 {
    let mut counts: HashMap<char, usize> = HashMap::new();
    let total = value
        .chars()
        .map(|c| *counts.entry(c).or_default() += 1)
        .count() as f64;
    counts
        .values()
        .map(|&n| {
            let p = n as f64 / total;
            -p * p.log2()
        })
        .sum()
}

/// `REDACTED_<KIND>_<8 hex digits>`: an identifier-like token a model keeps
/// as it is when it rewrites the code around it.
fn placeholder(id: &str, secret: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(*SALT);
    hasher.update(secret.as_bytes());
    let digest = hasher.finalize();
    format!(
        "REDACTED_{}_{}",
        id.to_ascii_uppercase().replace('-', "_"),
        hex::encode(&digest[..4])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_formats_are_replaced_and_put_back() {
        let source = "const KEY: &str = \"AKIAIOSFODNN7EXAMPLF\";\nlet url = \"postgres://app:s3cr3t-Pa55@db:5432/app\";\n";
        let redacted = redact(source);
        assert_eq!(redacted.count, 2, "{}", redacted.text);
        assert!(!redacted.text.contains("AKIAIOSFODNN7EXAMPLF"));
        assert!(!redacted.text.contains("s3cr3t-Pa55"));
        assert!(
            redacted
                .text
                .contains("postgres://app:REDACTED_CONNECTION_PASSWORD_")
        );
        assert_eq!(restore(&redacted.text, &[source]), source);
    }

    #[test]
    fn a_secret_inside_another_is_put_back_whole() {
        // A token whose last part holds what reads as an OpenAI key (found
        // by the property test in tests/privacy.rs).
        let token = "eyJBNVUXTwCijcF.eyJb__75tC_--3TK-gd_QpM-5f3w_v_3iUKf0_q-U.a66_o-32R-sk-N_Sua--_-8_aBEd600_-Rm9-0p-mK-";
        let text = format!("headers = {{\"Authorization\": \"Bearer {token}\"}}");
        let redacted = redact(&text);
        assert!(!redacted.text.contains(token), "{}", redacted.text);
        // The originals come out of a map in no fixed order: every order puts them back.
        for _ in 0..20 {
            assert_eq!(restore(&redacted.text, &[&text]), text);
        }
    }

    #[test]
    fn the_same_secret_gets_the_same_placeholder() {
        let twice = redact(
            "a = 'ghp_0123456789abcdefghijABCDEFGHIJ012345'\nb = 'ghp_0123456789abcdefghijABCDEFGHIJ012345'\n",
        );
        let placeholders: Vec<&str> = twice
            .text
            .lines()
            .map(|l| l.split('\'').nth(1).unwrap())
            .collect();
        assert_eq!(placeholders[0], placeholders[1]);
        assert!(placeholders[0].starts_with("REDACTED_GITHUB_TOKEN_"));
    }

    #[test]
    fn generic_assignments_need_a_secret_name_and_a_secret_value() {
        let env = "DATABASE_PASSWORD=hunter2hunter2\nAPI_TOKEN=\"q8Z4mX2pL9vT7wR1\"\n";
        assert_eq!(redact(env).count, 2, "{}", redact(env).text);
        let code = "let token = self.next_token();\nlet key = format!(\"{}\", id);\nmax_tokens = 256\nAPI_KEY = os.environ[\"API_KEY\"]\npassword: \"${DB_PASSWORD}\"\n";
        assert_eq!(redact(code).count, 0, "{}", redact(code).text);
    }

    /// Found by the property test in tests/privacy.rs: a password beginning
    /// "env" was taken for a reference to the environment.
    #[test]
    fn a_password_that_begins_like_a_reference_is_still_one() {
        let leaked = "DB_PASSWORD=\"enVwLx4A\"\n";
        assert_eq!(redact(leaked).count, 1, "{}", redact(leaked).text);
        let references =
            "DB_PASSWORD=env(\"DB\")\nDB_PASSWORD=environ[\"DB\"]\nDB_PASSWORD=getenv(\"DB\")\n";
        assert_eq!(redact(references).count, 0, "{}", redact(references).text);
    }
}
