//! Servers as Debian ships them, not written here: nginx (package nginx-light), a master
//! and its worker processes, the binary stripped but exporting its functions. Traced by
//! the master's pid, as a user attaches to a running server: every request counted
//! exactly, against what the server itself logged. Needs root.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use trace_file::Event;
use tracer_tests::*;

const NGINX: &str = "/usr/sbin/nginx";

/// nginx with a configuration of its own: `workers` worker processes, a Unix socket, its
/// logs and temporary files in `dir`; in the foreground, a child of the test.
struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Nginx {
    fn start(dir: &Path, workers: usize) -> Nginx {
        assert!(
            Path::new(NGINX).exists(),
            "{NGINX} is missing (Debian package nginx-light; `cargo xtask setup` installs it)"
        );
        let d = dir.display();
        let conf = format!(
            "worker_processes {workers};\n\
             daemon off;\n\
             master_process on;\n\
             pid {d}/nginx.pid;\n\
             error_log {d}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n\
               access_log {d}/access.log;\n\
               client_body_temp_path {d}/body;\n\
               proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n\
               uwsgi_temp_path {d}/uwsgi;\n\
               scgi_temp_path {d}/scgi;\n\
               server {{\n\
                 listen unix:{d}/nginx.sock;\n\
                 location / {{ return 200 \"ok\\n\"; }}\n\
               }}\n\
             }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = Command::new(NGINX)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("running nginx");
        let n = Nginx {
            child,
            dir: dir.to_path_buf(),
        };
        let up = wait_until(Duration::from_secs(10), || {
            n.workers().len() == workers && UnixStream::connect(n.socket()).is_ok()
        });
        assert!(
            up,
            "nginx did not start: {:?}",
            std::fs::read_to_string(dir.join("error.log"))
        );
        n
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("nginx.sock")
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The worker processes: the master's children.
    fn workers(&self) -> Vec<u32> {
        let path = format!("/proc/{0}/task/{0}/children", self.pid());
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: a graceful stop, the logs written.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        let _ = self.child.wait();
    }
}

/// The requests an access log holds.
fn logged(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter(|l| l.contains("\"GET /")).count()
}

/// `requests` HTTP/1.1 requests on one kept-alive connection; panics on a bad answer.
fn get(socket: &Path, requests: usize) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for _ in 0..requests {
        s.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        let mut len = 0;
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
    }
}

#[test]
fn debians_nginx_is_traced_whole_by_its_masters_pid() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let nginx = Nginx::start(dir.path(), 2);
    let workers = nginx.workers();
    let out = dir.path().join("nginx.trace");
    let rec = start_tracer_on(
        "record",
        &["--pid", &nginx.pid().to_string()],
        &out,
        &["-u", "ngx_http_process_request"],
        || Some(out.clone()),
    );
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let socket = nginx.socket();
            std::thread::spawn(move || get(&socket, 100))
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    stop_tracer(rec);
    // Stopped gracefully first: the log is whole.
    let log = nginx.dir.join("access.log");
    drop(nginx);
    let logged = logged(&log);
    assert_eq!(logged, 400, "requests the access log holds");

    let t = read_trace(&out);
    assert_eq!(t.lost, 0);
    let id = probe_ids(&out)["ngx_http_process_request"];
    let tgid = |tid: u32| t.threads.iter().find(|x| x.tid == tid).map(|x| x.tgid);
    let calls = |pid: u32| {
        count(&t, |r| {
            r.event == Event::FuncEntry { func: id } && tgid(r.tid) == Some(pid)
        })
    };
    let per_worker: Vec<u64> = workers.iter().map(|&w| calls(w)).collect();
    assert_eq!(
        per_worker.iter().sum::<u64>(),
        400,
        "ngx_http_process_request per worker: {per_worker:?}"
    );
    let exits = count(
        &t,
        |r| matches!(r.event, Event::FuncExit { func, .. } if func == id),
    );
    assert_eq!(exits, 400);
    // Each worker in the trace as a process of its own.
    for &w in &workers {
        assert!(t.processes.iter().any(|p| p.tgid == w), "no process {w}");
    }
}
