//! The stand-in OIDC provider (`e2e/oidc/oidc.py`) as a test starts it: a token endpoint on a
//! free loopback port, over HTTPS with the stack's server certificate (so clients trust it
//! through `TRACEHOUSE_CA_FILE`), issuing client-credentials tokens signed with the key whose
//! JWKS the stack's broker validates (`KAFKA_OAUTH_SIGNING_KEY`), or with another key. The
//! client secret goes to the provider through a private file, and the provider is stopped
//! (and the file removed) when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::{stack_var, unique_name};

/// A running stand-in provider.
pub struct OidcProvider {
    child: Child,
    /// The token endpoint, `https://127.0.0.1:<port>/oauth2/token`.
    pub url: String,
    secret_file: PathBuf,
    statuses: Arc<Mutex<Vec<u16>>>,
}

impl OidcProvider {
    /// A provider for `client_id`/`client_secret` whose tokens live `lifetime_s` seconds,
    /// signed with the stack broker's key.
    pub fn start(client_id: &str, client_secret: &str, lifetime_s: u32) -> Self {
        Self::start_with_key(
            Path::new(&stack_var("KAFKA_OAUTH_SIGNING_KEY")),
            client_id,
            client_secret,
            lifetime_s,
        )
    }

    /// As [`Self::start`], signing with `key` (PEM RSA): another key's tokens are refused by
    /// the broker.
    pub fn start_with_key(
        key: &Path,
        client_id: &str,
        client_secret: &str,
        lifetime_s: u32,
    ) -> Self {
        let secret_file = std::env::temp_dir().join(unique_name("oidc-secret"));
        write_private(&secret_file, client_secret);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("oidc/oidc.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg("serve")
            .arg("--key")
            .arg(key)
            .args(["--client-id", client_id])
            .arg("--client-secret-file")
            .arg(&secret_file)
            .args(["--cert", &stack_var("TRACEHOUSE_SERVER_CERT")])
            .args(["--cert-key", &stack_var("TRACEHOUSE_SERVER_KEY")])
            .args(["--lifetime", &lifetime_s.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", script.display()));
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("the provider's first line");
        let Some(url) = first.trim().strip_prefix("listening ").map(str::to_owned) else {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut BufReader::new(e), &mut err);
            }
            panic!("the OIDC stand-in did not start: {first}{err}");
        };
        let statuses: Arc<Mutex<Vec<u16>>> = Arc::default();
        let seen = statuses.clone();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // `oidc: "POST /oauth2/token HTTP/1.1" 200 -`
                if let Some(status) = line
                    .rsplit_once("\" ")
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .and_then(|s| s.parse().ok())
                {
                    seen.lock().unwrap().push(status);
                }
            }
        });
        Self {
            child,
            url,
            secret_file,
            statuses,
        }
    }

    /// Tokens issued so far.
    pub fn issued(&self) -> usize {
        self.count(200)
    }

    /// Requests refused as `invalid_client` so far.
    pub fn refused(&self) -> usize {
        self.count(401)
    }

    fn count(&self, status: u16) -> usize {
        self.statuses
            .lock()
            .unwrap()
            .iter()
            .filter(|s| **s == status)
            .count()
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.secret_file);
    }
}

/// Writes `text` to a new file only its owner reads.
pub fn write_private(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.write_all(text.as_bytes()).unwrap();
}

/// A throw-away RSA key (PEM) the broker does not know, removed when dropped: the stand-in
/// signs with it to show the broker checks signatures.
pub struct ForeignKey {
    pub path: PathBuf,
}

impl ForeignKey {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!("{}.pem", unique_name("oidc-foreign-key")));
        let out = Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
            ])
            .arg(&path)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { path }
    }
}

impl Default for ForeignKey {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ForeignKey {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
