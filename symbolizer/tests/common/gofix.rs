//! Go fixtures: tests/fixtures/goserver built by each Go toolchain found, and
//! the Go tools (`go tool nm`, `go tool addr2line`) used as oracles.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::run;

/// One toolchain's builds of the fixture server.
#[derive(Debug)]
pub struct GoBuilds {
    /// The `go` command that built them.
    pub go: PathBuf,
    /// `go1.19.8`
    pub version: String,
    /// Default build (cgo: externally linked), symbols and DWARF kept.
    pub full: PathBuf,
    /// The same with `-ldflags=-s -w`: no .symtab, no DWARF.
    pub stripped: PathBuf,
    /// `CGO_ENABLED=0`, internally linked, stripped.
    pub static_stripped: PathBuf,
}

/// Debian's Go (`go` on PATH) first, then any other toolchain named in
/// `SYMBOLIZER_TEST_GO` (colon-separated `go` binaries) or installed as
/// /usr/lib/go-1.N/bin/go.
pub fn go_builds() -> &'static [GoBuilds] {
    static B: OnceLock<Vec<GoBuilds>> = OnceLock::new();
    B.get_or_init(|| {
        let mut gos: Vec<PathBuf> = Vec::new();
        let on_path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join("go"))
            .find(|p| p.is_file());
        assert!(
            on_path.is_some(),
            "`go` is not installed; the Go tests need it (Debian package golang-go)"
        );
        gos.extend(on_path);
        if let Some(extra) = std::env::var_os("SYMBOLIZER_TEST_GO") {
            gos.extend(std::env::split_paths(&extra).filter(|p| p.is_file()));
        }
        if let Ok(rd) = std::fs::read_dir("/usr/lib") {
            let mut more: Vec<PathBuf> = rd
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("go-1."))
                .map(|e| e.path().join("bin/go"))
                .filter(|p| p.is_file())
                .collect();
            more.sort();
            gos.extend(more);
        }
        let mut out: Vec<GoBuilds> = Vec::new();
        for go in gos {
            let version = goenv(&go, "GOVERSION");
            if out.iter().any(|b| b.version == version) {
                continue;
            }
            out.push(build(&go, version));
        }
        out
    })
}

fn goenv(go: &Path, var: &str) -> String {
    run(Command::new(go).args(["env", var])).trim().to_string()
}

fn build(go: &Path, version: String) -> GoBuilds {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join(format!("go-fixtures-{}/{version}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The workspace's fixtures, shared with the tracer's own tests.
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/goserver");
    let go_build = |out: &str, ldflags: &str, cgo: bool| {
        let out = dir.join(out);
        let mut cmd = Command::new(go);
        cmd.arg("build")
            .arg(format!("-ldflags={ldflags}"))
            .arg("-o")
            .arg(&out)
            .arg("main.go")
            .current_dir(&src_dir)
            // A build cache per toolchain that outlives the test run, so a
            // second run does not compile the standard library again.
            .env("GOCACHE", tmp.join(format!("go-cache/{version}")))
            .env("GOPATH", tmp.join("go-path"))
            .env("GOFLAGS", "-buildvcs=false")
            .env("GO111MODULE", "off")
            .env("GOTOOLCHAIN", "local")
            .env("CGO_ENABLED", if cgo { "1" } else { "0" });
        run(&mut cmd);
        out
    };
    GoBuilds {
        full: go_build("goserver", "", true),
        stripped: go_build("goserver_stripped", "-s -w", true),
        static_stripped: go_build("goserver_static_stripped", "-s -w", false),
        go: go.to_path_buf(),
        version,
    }
}

/// `go tool nm -size` text symbols: (address, size, name), sorted by address.
pub fn go_nm(b: &GoBuilds, bin: &Path) -> Vec<(u64, u64, String)> {
    let out = run(Command::new(&b.go)
        .args(["tool", "nm", "-size", "-sort", "address"])
        .arg(bin));
    let mut v: Vec<(u64, u64, String)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let size = f.next()?.parse().ok()?;
            let ty = f.next()?;
            if ty != "T" && ty != "t" {
                return None;
            }
            let name: Vec<&str> = f.collect();
            Some((addr, size, name.join(" ")))
        })
        .collect();
    v.sort();
    v
}

/// `go tool addr2line` answers (function, file, line) for `addrs`.
pub fn go_addr2line(b: &GoBuilds, bin: &Path, addrs: &[u64]) -> Vec<(String, String, u32)> {
    use std::io::Write;
    let mut child = Command::new(&b.go)
        .args(["tool", "addr2line"])
        .arg(bin)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .map(|c| {
            let (file, line) = c[1].rsplit_once(':').unwrap();
            (
                c[0].to_string(),
                file.to_string(),
                line.parse().unwrap_or(0),
            )
        })
        .collect()
}
