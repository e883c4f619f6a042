//! Accepting connections: a cap on how many are open, a deadline for each
//! request head, and a log line whenever a limit turns a client away.
//!
//! Why not `axum::serve`: it accepts every connection and waits forever for
//! a request head, so a client that opens connections and sends half a
//! request (1,100 of them were enough) exhausts the process's file
//! descriptors and `/health` stops answering, with nothing logged. Here:
//!
//! - at most `--max-connections` are open at once; past that the server
//!   stops accepting and new connections wait in the kernel's listen queue
//!   until one closes (as nginx does at `worker_connections`), so a load
//!   test sees the wait as latency rather than errors. The default is
//!   10,000, lowered to fit the process's open-file limit (less 64 for the
//!   server's own files).
//! - a connection that has not sent a whole request head within
//!   `--header-timeout` seconds is closed without an answer (hyper's
//!   header read timeout). The deadline runs whenever the connection waits
//!   for a head, so it also closes idle keep-alive connections; uvicorn,
//!   which vLLM runs on, closes them after 5 s.
//! - a body that has not fully arrived `--body-timeout` seconds after its
//!   head gets HTTP 408 in the JSON envelope and the connection is closed
//!   (`routes::read_body`).
//!
//! Each limit logs to stderr when it is first hit, then at most every ten
//! seconds with the count since the last line, so a flood cannot flood the
//! log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Semaphore, watch};

/// Connections allowed when neither the flag nor the open-file limit says
/// otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Open files kept for the server itself (listener, record files, runtime).
pub const RESERVED_FILES: u64 = 64;

/// The process's soft limit on open files, from /proc/self/limits (Linux);
/// None where it cannot be read.
pub fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The connection cap to use: `requested` (or the default), lowered so that
/// the connections and the server's own files fit in `file_limit`. Returns
/// the cap and, when it was lowered, why.
pub fn connection_cap(requested: Option<usize>, file_limit: Option<u64>) -> (usize, Option<String>) {
    let want = requested.unwrap_or(DEFAULT_MAX_CONNECTIONS).max(1);
    let Some(files) = file_limit else { return (want, None) };
    let fits = usize::try_from(files.saturating_sub(RESERVED_FILES)).unwrap_or(usize::MAX).max(1);
    if want <= fits {
        return (want, None);
    }
    let why = format!(
        "at most {fits} connections at once: the open-file limit is {files} and {RESERVED_FILES} files are kept \
         for the server (raise it with `ulimit -n`)"
    );
    (fits, Some(why))
}

/// What one limit has turned away, for rate-limited log lines.
#[derive(Debug)]
pub struct LimitLog {
    what: String,
    /// Events not yet logged, and when the last line was written.
    state: Mutex<(u64, Option<std::time::Instant>)>,
    total: AtomicU64,
}

/// Seconds between two log lines of one limit.
const LOG_EVERY: Duration = Duration::from_secs(10);

impl LimitLog {
    pub fn new(what: impl Into<String>) -> LimitLog {
        LimitLog { what: what.into(), state: Mutex::new((0, None)), total: AtomicU64::new(0) }
    }

    /// Counts one event; writes a line if none was written in the last ten
    /// seconds.
    pub fn hit(&self) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.0 += 1;
        let now = std::time::Instant::now();
        if s.1.is_none_or(|last| now.duration_since(last) >= LOG_EVERY) {
            let n = std::mem::take(&mut s.0);
            s.1 = Some(now);
            eprintln!("llmsim serve: {} ({n} since the last such line)", self.what);
        }
    }

    /// Events since start.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// The limits every connection shares.
#[derive(Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub at_cap: LimitLog,
    pub header_timeouts: LimitLog,
    pub body_timeouts: LimitLog,
    pub accept_errors: LimitLog,
}

impl Limits {
    pub fn new(max_connections: usize, header_timeout: Duration, body_timeout: Duration) -> Limits {
        Limits {
            max_connections,
            header_timeout,
            body_timeout,
            body_timeouts: LimitLog::new(format!(
                "answered 408: a request body did not arrive within {} s (--body-timeout)",
                body_timeout.as_secs_f64()
            )),
            at_cap: LimitLog::new(format!(
                "{max_connections} connections open (--max-connections): new connections wait until one closes"
            )),
            header_timeouts: LimitLog::new(format!(
                "closed a connection that sent no complete request head within {} s (--header-timeout)",
                header_timeout.as_secs_f64()
            )),
            accept_errors: LimitLog::new("could not accept a connection (out of file descriptors?); retrying"),
        }
    }
}

/// Serves `router` on `listener` under `limits` until `shutdown` completes;
/// then open connections finish their requests for up to a second and the
/// rest are cut.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Arc<Limits>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Dropping the sender tells every connection to finish gracefully; each
    // holds a receiver, so `closed()` on the sender says when all are gone.
    let (stop_tx, stop_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let permit = match Arc::clone(&slots).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                limits.at_cap.hit();
                tokio::select! {
                    p = Arc::clone(&slots).acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                    () = &mut shutdown => break,
                }
            }
        };
        let (tcp, _addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) if is_connection_error(&e) => continue,
                Err(_) => {
                    limits.accept_errors.hit();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Tokens are small writes that must leave at once: no Nagle delay.
        let _ = tcp.set_nodelay(true);
        let conn = Connection { router: router.clone(), limits: Arc::clone(&limits), stop: stop_rx.clone() };
        tokio::spawn(async move {
            conn.run(tcp).await;
            drop(permit);
        });
    }
    // Every connection finishes what it is answering, for up to a second.
    drop(stop_rx);
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(1), stop_tx.closed()).await;
    Ok(())
}

/// Errors of one connection that leave the listener fine (as hyper and
/// axum treat them).
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

struct Connection {
    router: Router,
    limits: Arc<Limits>,
    stop: watch::Receiver<()>,
}

impl Connection {
    async fn run(mut self, tcp: tokio::net::TcpStream) {
        let service = TowerToHyperService::new(self.router.clone());
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(self.limits.header_timeout).keep_alive(true);
        let conn = builder.serve_connection(TokioIo::new(tcp), service);
        tokio::pin!(conn);
        let mut stopping = false;
        let result = loop {
            tokio::select! {
                r = conn.as_mut() => break r,
                changed = self.stop.changed(), if !stopping => {
                    let _ = changed;
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        };
        if let Err(e) = result
            && e.is_timeout()
        {
            self.limits.header_timeouts.hit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_the_open_file_limit() {
        assert_eq!(connection_cap(None, None), (10_000, None));
        assert_eq!(connection_cap(Some(50), Some(1024)), (50, None));
        let (cap, why) = connection_cap(None, Some(1024));
        assert_eq!(cap, 1024 - 64);
        assert!(why.unwrap().contains("open-file limit is 1024"));
        assert_eq!(connection_cap(Some(0), None).0, 1, "at least one connection");
        assert_eq!(connection_cap(None, Some(10)).0, 1);
    }

    #[test]
    fn the_open_file_limit_is_read_on_linux() {
        if std::path::Path::new("/proc/self/limits").exists() {
            assert!(open_file_limit().is_some_and(|n| n > 0));
        }
    }

    #[test]
    fn a_limit_log_counts_every_hit() {
        let log = LimitLog::new("test limit");
        for _ in 0..5 {
            log.hit();
        }
        assert_eq!(log.total(), 5);
    }
}
