//! The process's secrets: what `bench` never prints or writes (docs/secrets.md).
//!
//! The libraries scrub what they record and return (`bench_run::secrets`); this is the last
//! boundary, for what the binary itself prints and writes: stdout (`out`), the error
//! line `main` prints, log lines (tracing's writer, [`Stderr`]) and the files a command
//! writes outside a run directory (`bench report -o`, `bench compare --markdown`, `bench
//! journeys --output`). One process runs one command, so one set is built once — when the
//! command has parsed its `--header`s — and kept in a process-wide cell (before that, and for
//! commands without headers: the environment's API keys).

use std::borrow::Cow;
use std::sync::OnceLock;

use bench_run::secrets::Secrets;

static SECRETS: OnceLock<Secrets> = OnceLock::new();

/// Sets the process's secrets: the environment's API keys, the values of the secret ones of
/// `headers` and of those named by `--secret-header` (`names`), the password of a
/// `--base-url`'s `user:password@` (`base_url`), and `extra`. Only the first call counts (each
/// command makes one, before it prints anything).
pub(crate) fn init(
    headers: &[(String, String)],
    names: &[String],
    base_url: Option<&str>,
    extra: &Secrets,
) {
    let mut s = bench_run::secrets::run_secrets(headers, names, extra);
    if let Some(url) = base_url {
        s.add_url_credentials(url);
    }
    let _ = SECRETS.set(s);
}

/// The process's secrets (as the command set them, else the environment's API keys).
pub fn get() -> &'static Secrets {
    SECRETS.get_or_init(Secrets::from_env)
}

/// `text` with every secret of the process replaced by `***`.
pub fn scrub(text: &str) -> Cow<'_, str> {
    get().scrub(text)
}

/// `bytes` scrubbed when they are text (a file about to be written).
pub(crate) fn scrub_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    match std::str::from_utf8(bytes) {
        Ok(text) => match scrub(text) {
            Cow::Borrowed(_) => Cow::Borrowed(bytes),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        },
        Err(_) => Cow::Borrowed(bytes),
    }
}

/// stderr for log lines, each scrubbed (tracing writes one formatted line per call).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl std::io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write_all(&scrub_bytes(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
