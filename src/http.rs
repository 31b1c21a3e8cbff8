//! The HTTP side of `pathprobe serve`, in the manner of Prometheus'
//! exporters:
//!
//! - `/metrics`: the latest results; reading never triggers a probe, so any
//!   number of Prometheus servers may scrape.
//! - `/probe?target=ADDR&module=NAME[&debug=true]`: the multi-target
//!   pattern; runs one probe now and returns only its metrics. A failed probe
//!   is `pathprobe_probe_success 0`, not an HTTP error. A loopback module
//!   takes no target (`/probe?module=NAME`), and one given is a 400.
//! - `/-/healthy`, `/-/ready`, `/-/reload` (POST), and `/`, a landing page.
//!
//! What `--web.config.file` sets ([`WebConfig`]: TLS, client certificates,
//! basic-auth users, headers) applies to every one of them, as
//! exporter-toolkit applies it to a whole exporter: a connection takes the
//! TLS settings in force when it is accepted, a request the users and
//! headers in force when it arrives.

#![warn(missing_docs)]

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::future::BoxFuture;
use crate::metrics;
use crate::metrics::HttpRefusal;
use crate::web_config::{AuthVerdict, BasicAuth, WebConfig};

/// What a `/probe` request produced.
pub struct ProbeResponse {
    /// Exposition-format metrics of this one probe.
    pub metrics: String,
    /// The probe's log and result, for `debug=true`.
    pub debug: String,
}

/// Why a `/probe` request could not run at all (as opposed to a probe that
/// ran and failed, which is a metric value).
#[derive(Debug, thiserror::Error)]
pub enum ProbeRequestError {
    /// The request itself is wrong (unknown module, bad target); 400.
    #[error("{0}")]
    BadRequest(String),
    /// The target is outside what this service may probe; 403.
    #[error("{0}")]
    Forbidden(String),
    /// Too many `/probe` requests are running; 503.
    #[error("{0}")]
    Busy(String),
}

/// What the HTTP layer asks of the service.
pub trait App: Send + Sync + 'static {
    /// The body of `/metrics`.
    fn metrics(&self) -> String;
    /// Runs one probe of `module` against `target` within `timeout`;
    /// `target` is `None` when the request has none (loopback modules).
    fn probe(
        &self,
        target: Option<String>,
        module: String,
        timeout: Option<Duration>,
    ) -> BoxFuture<Result<ProbeResponse, ProbeRequestError>>;
    /// Reloads the configuration; the error says why it was kept.
    fn reload(&self) -> BoxFuture<Result<(), String>>;
    /// Whether `/-/ready` answers 200.
    fn ready(&self) -> bool;
    /// The landing page's HTML.
    fn landing_page(&self) -> String;
    /// The status page and its API (`/`, `/path`, `/kernels`, `/fleet`,
    /// `/api/v1/history`): status, content type and body, or `None` to
    /// fall back to [`App::landing_page`] at `/` and 404 elsewhere.
    fn web(&self, _path: &str, _query: Option<&str>) -> Option<(u16, &'static str, String)> {
        None
    }
    /// HTTP connections served at once; a further one is closed at accept.
    fn max_connections(&self) -> usize {
        256
    }
    /// HTTP connections one client address may hold at once; a further
    /// one from it is closed at accept. One client holding all
    /// [`App::max_connections`] let through 1 scrape in 47.
    fn max_connections_per_client(&self) -> usize {
        (self.max_connections() / 8).max(4)
    }
    /// Connections kept for clients holding none yet (a Prometheus server
    /// coming to scrape): past `max_connections - reserve`, a client that
    /// already has one is refused.
    fn reserved_connections(&self) -> usize {
        self.max_connections() / 8
    }
    /// Called for each connection closed at accept for being over
    /// [`App::max_connections`] or the client's share.
    fn connection_refused(&self) {}
    /// The web configuration in force (`--web.config.file`); plain HTTP,
    /// open to all, without one.
    fn web_config(&self) -> Arc<WebConfig> {
        static PLAIN: std::sync::OnceLock<Arc<WebConfig>> = std::sync::OnceLock::new();
        PLAIN.get_or_init(Default::default).clone()
    }
    /// Called for each request or connection refused by the web
    /// configuration: no or wrong credentials, too many password checks
    /// waiting, a failed TLS handshake.
    fn refused(&self, _reason: HttpRefusal) {}
}

/// How long a client has to finish its TLS handshake: a connection that
/// never does would otherwise hold its slot.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a response may make no progress into the socket before the
/// connection is closed: a client that never reads would otherwise hold
/// its response's memory for as long as it likes.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection's socket whose writes fail with `TimedOut` once one has
/// waited [`WRITE_STALL_TIMEOUT`] (or `stall`) without progress.
struct StallLimited<S> {
    inner: S,
    stall: Duration,
    waiting: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallLimited<S> {
    fn new(inner: S, stall: Duration) -> Self {
        StallLimited {
            inner,
            stall,
            waiting: None,
        }
    }

    /// Maps one poll of a write-side operation: progress clears the
    /// clock, a pending one starts it, and one pending past `stall` fails.
    fn watch<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        r: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::task::Poll;
        match r {
            Poll::Ready(r) => {
                self.waiting = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let stall = self.stall;
                let sleep = self
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the client read nothing of the response for too long",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for StallLimited<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for StallLimited<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, r)
    }
}

/// Open connections per client address, and the guard one connection
/// holds on its count.
#[derive(Default)]
struct PerClient(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

struct ClientSlot {
    table: Arc<PerClient>,
    ip: std::net::IpAddr,
}

impl PerClient {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for `ip` if it holds fewer than `share` and, when the
    /// service is within its reserve, none at all.
    fn admit(
        self: &Arc<Self>,
        ip: std::net::IpAddr,
        share: usize,
        in_reserve: bool,
    ) -> Option<ClientSlot> {
        let mut g = self.lock();
        let held = g.get(&ip).copied().unwrap_or(0);
        if held >= share || (in_reserve && held > 0) {
            return None;
        }
        g.insert(ip, held + 1);
        Some(ClientSlot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut g = self.table.lock();
        if let Some(n) = g.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.ip);
            }
        }
    }
}

fn response(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    response(status, "text/plain; charset=utf-8", body)
}

/// Decodes one `application/x-www-form-urlencoded` component.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query parameters of a request, decoded.
pub fn query_params(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// Prometheus sends its scrape timeout; a probe must answer within it.
fn scrape_timeout(req: &Request<Incoming>) -> Option<Duration> {
    let secs: f64 = req
        .headers()
        .get("X-Prometheus-Scrape-Timeout-Seconds")?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    // Leave a little room for the response itself, as blackbox_exporter does.
    Duration::try_from_secs_f64((secs - 0.5).max(secs * 0.5)).ok()
}

/// Checks the request's credentials against the web configuration in
/// force, then answers it; the configuration's headers go on every
/// response, refusals included.
async fn guarded<A: App>(
    app: Arc<A>,
    auth: Arc<BasicAuth>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let web = app.web_config();
    let mut resp = match auth
        .check(&web, req.headers().get(hyper::header::AUTHORIZATION))
        .await
    {
        AuthVerdict::Allowed => handle(app, req).await?,
        AuthVerdict::Unauthorized => {
            app.refused(HttpRefusal::Unauthorized);
            let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic"),
            );
            r
        }
        AuthVerdict::Busy => {
            app.refused(HttpRefusal::AuthBusy);
            let mut r = text(
                StatusCode::TOO_MANY_REQUESTS,
                "too many password checks in progress; try again\n",
            );
            r.headers_mut()
                .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
    };
    for (name, value) in web.headers() {
        resp.headers_mut().insert(name.clone(), value.clone());
    }
    Ok(resp)
}

async fn handle<A: App>(
    app: Arc<A>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    if matches!(req.method(), &Method::GET | &Method::HEAD) {
        if let Some((status, content_type, body)) = app.web(&path, req.uri().query()) {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return Ok(response(status, content_type, body));
        }
    }
    let resp = match (req.method(), path.as_str()) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            response(StatusCode::OK, metrics::CONTENT_TYPE, app.metrics())
        }
        (&Method::GET, "/probe") => {
            let params = query_params(req.uri().query());
            let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let debug = get("debug").is_some_and(|v| v == "true" || v == "1");
            // The target may be left out for a loopback module; whether it
            // must be there is the module's to say.
            let target = get("target").filter(|t| !t.is_empty());
            match (target, get("module")) {
                (target, Some(module)) => {
                    match app.probe(target, module, scrape_timeout(&req)).await {
                        Ok(r) if debug => text(
                            StatusCode::OK,
                            format!(
                                "{}\n\nMetrics that would have been returned:\n{}",
                                r.debug, r.metrics
                            ),
                        ),
                        Ok(r) => response(StatusCode::OK, metrics::CONTENT_TYPE, r.metrics),
                        Err(ProbeRequestError::BadRequest(m)) => {
                            text(StatusCode::BAD_REQUEST, m + "\n")
                        }
                        Err(ProbeRequestError::Forbidden(m)) => {
                            text(StatusCode::FORBIDDEN, m + "\n")
                        }
                        Err(ProbeRequestError::Busy(m)) => {
                            text(StatusCode::SERVICE_UNAVAILABLE, m + "\n")
                        }
                    }
                }
                (_, None) => text(
                    StatusCode::BAD_REQUEST,
                    "expected /probe?target=HOST[:PORT]&module=NAME\n",
                ),
            }
        }
        (&Method::GET | &Method::HEAD, "/-/healthy") => text(StatusCode::OK, "Healthy.\n"),
        (&Method::GET | &Method::HEAD, "/-/ready") => {
            if app.ready() {
                text(StatusCode::OK, "Ready.\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "Not ready.\n")
            }
        }
        (&Method::POST | &Method::PUT, "/-/reload") => match app.reload().await {
            Ok(()) => text(StatusCode::OK, "Reloaded.\n"),
            Err(e) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("failed to reload config: {e}\n"),
            ),
        },
        (_, "/-/reload") => text(StatusCode::METHOD_NOT_ALLOWED, "use POST /-/reload\n"),
        (&Method::GET, "/") => response(
            StatusCode::OK,
            "text/html; charset=utf-8",
            app.landing_page(),
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; see / for the endpoints\n",
        ),
    };
    Ok(resp)
}

/// Serves HTTP on `listener` until `shutdown` completes; connections in
/// progress are then given a moment to finish. Connections beyond
/// [`App::max_connections`], beyond the client's
/// [`App::max_connections_per_client`], or into the
/// [`App::reserved_connections`] from a client that has one already, are
/// closed as soon as they are accepted: an idle connection costs a
/// descriptor, and one client must not take them all from the scrapes.
/// A response that makes no progress for [`WRITE_STALL_TIMEOUT`] ends its
/// connection.
pub async fn serve<A: App>(listener: TcpListener, app: Arc<A>, shutdown: impl Future<Output = ()>) {
    let mut conns = tokio::task::JoinSet::new();
    let clients = Arc::new(PerClient::default());
    // One memory of good passwords for the server's life: a reload that
    // keeps a user's hash keeps its checks.
    let auth = Arc::new(BasicAuth::new());
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "HTTP accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Reap finished connections first so that only open ones count.
                while conns.try_join_next().is_some() {}
                let max = app.max_connections();
                if conns.len() >= max {
                    tracing::debug!(%peer, open = conns.len(), "HTTP connection over max_connections closed");
                    app.connection_refused();
                    drop(stream);
                    continue;
                }
                let in_reserve = conns.len() >= max.saturating_sub(app.reserved_connections());
                let share = app.max_connections_per_client().max(1);
                let Some(slot) = clients.admit(peer.ip(), share, in_reserve) else {
                    tracing::debug!(%peer, open = conns.len(), share, in_reserve, "HTTP connection over the client's share closed");
                    app.connection_refused();
                    drop(stream);
                    continue;
                };
                let app = app.clone();
                let auth = auth.clone();
                let tls = app.web_config().tls().cloned();
                conns.spawn(async move {
                    let _slot = slot;
                    match tls {
                        None => serve_connection(stream, app, auth, peer).await,
                        Some(acceptor) => {
                            if let Some(s) = accept_tls(stream, &acceptor, peer, &*app).await {
                                serve_connection(s, app, auth, peer).await;
                            }
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    conns.shutdown().await;
}

/// Serves HTTP/1.1 on one accepted connection, plain or TLS.
async fn serve_connection<A: App, S>(
    stream: S,
    app: Arc<A>,
    auth: Arc<BasicAuth>,
    peer: std::net::SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| guarded(app.clone(), auth.clone(), req));
    let io = StallLimited::new(stream, WRITE_STALL_TIMEOUT);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .serve_connection(TokioIo::new(io), service);
    if let Err(e) = conn.await {
        tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
    }
}

/// The TLS side of an accepted connection, within
/// [`TLS_HANDSHAKE_TIMEOUT`]. A client speaking plain HTTP to the TLS port
/// is told so in plain HTTP (a 400, as Go's servers do) rather than left
/// with a reset it cannot explain; any failure is counted and logged at
/// debug (a port scan must not fill the log).
async fn accept_tls<A: App>(
    stream: tokio::net::TcpStream,
    acceptor: &tokio_rustls::TlsAcceptor,
    peer: std::net::SocketAddr,
    app: &A,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    use tokio::io::AsyncWriteExt;
    let handshake = async {
        let mut first = [0u8; 1];
        // A TLS connection opens with a handshake record (type 22).
        if matches!(stream.peek(&mut first).await, Ok(1) if first[0] != 22) {
            let mut stream = stream;
            let _ = stream
                .write_all(b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
                .await;
            let _ = stream.shutdown().await;
            return Err("plain HTTP to the TLS port".to_string());
        }
        acceptor.accept(stream).await.map_err(|e| e.to_string())
    };
    let result = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, handshake).await {
        Ok(r) => r,
        Err(_) => Err("TLS handshake timed out".to_string()),
    };
    match result {
        Ok(s) => Some(s),
        Err(e) => {
            app.refused(HttpRefusal::TlsHandshake);
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded() {
        let p = query_params(Some("target=10.0.0.1%3A5301&module=tcp+fast&debug"));
        assert_eq!(
            p,
            vec![
                ("target".into(), "10.0.0.1:5301".into()),
                ("module".into(), "tcp fast".into()),
                ("debug".into(), String::new())
            ]
        );
        assert_eq!(
            query_params(Some("a=%zz&b=%4")),
            vec![("a".into(), "%zz".into()), ("b".into(), "%4".into())]
        );
        assert!(query_params(None).is_empty());
    }
}
