//! A bounded load generator for the fixture server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// What [`load`] did, counted on the client side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Requests whose full response was received.
    pub requests: u64,
    /// Response bytes received for those requests.
    pub bytes: u64,
    /// Connections established.
    pub connections: u64,
    /// Connections that failed (connect, write, read, or timeout).
    pub errors: u64,
    pub elapsed: Duration,
}

/// Runs a bounded load against the fixture server on `127.0.0.1:port`:
/// `connections` connections in total, each sending `requests_per_conn`
/// requests `GET <bytes_per_request>` (keep-alive) and reading the full
/// response, with at most `concurrency` connections open at a time.
///
/// Bounded in count and in time: once `max_duration` has passed no new
/// request starts and blocked reads time out, so this always returns.
pub fn load(
    port: u16,
    connections: usize,
    requests_per_conn: usize,
    bytes_per_request: usize,
    concurrency: usize,
    max_duration: Duration,
) -> LoadReport {
    assert!(
        (1..=16 << 20).contains(&bytes_per_request),
        "the server answers 1..=16 MiB per request"
    );
    let start = Instant::now();
    let deadline = start + max_duration;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let next_conn = AtomicUsize::new(0);
    let (requests, bytes, conns, errors) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    let request = format!("GET {bytes_per_request}\n");

    thread::scope(|s| {
        for _ in 0..concurrency.clamp(1, connections.max(1)) {
            s.spawn(|| {
                let mut buf = vec![0u8; bytes_per_request];
                while next_conn.fetch_add(1, Ordering::Relaxed) < connections {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let stream = match TcpStream::connect_timeout(&addr, left) {
                        Ok(stream) => stream,
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    };
                    conns.fetch_add(1, Ordering::Relaxed);
                    let (done, err) = run_connection(
                        stream,
                        request.as_bytes(),
                        &mut buf,
                        requests_per_conn,
                        deadline,
                    );
                    requests.fetch_add(done, Ordering::Relaxed);
                    bytes.fetch_add(done * bytes_per_request as u64, Ordering::Relaxed);
                    if err.is_some() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });

    LoadReport {
        requests: requests.into_inner(),
        bytes: bytes.into_inner(),
        connections: conns.into_inner(),
        errors: errors.into_inner(),
        elapsed: start.elapsed(),
    }
}

/// Sends up to `count` requests on one connection and reads each full
/// response (`buf` is response-sized). Stops at the first error or at
/// `deadline`. Returns the number of completed requests and the error if any.
fn run_connection(
    mut stream: TcpStream,
    request: &[u8],
    buf: &mut [u8],
    count: usize,
    deadline: Instant,
) -> (u64, Option<std::io::Error>) {
    // Timeouts of "time left now" make every blocking call end by the
    // deadline, so load() always returns.
    let left = deadline.saturating_duration_since(Instant::now());
    let setup = stream
        .set_nodelay(true)
        .and_then(|_| stream.set_read_timeout(Some(left.max(Duration::from_millis(1)))))
        .and_then(|_| stream.set_write_timeout(Some(left.max(Duration::from_millis(1)))));
    if let Err(e) = setup {
        return (0, Some(e));
    }
    let mut done = 0;
    for _ in 0..count {
        if Instant::now() >= deadline {
            break;
        }
        let result = stream
            .write_all(request)
            .and_then(|_| stream.read_exact(buf));
        if let Err(e) = result {
            return (done, Some(e));
        }
        done += 1;
    }
    (done, None)
}
