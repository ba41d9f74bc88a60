//! Fixture builders and independent oracles (binutils) for the integration tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub mod gofix;

pub fn fixture_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// All fixture binaries, built once per test process.
pub struct Fixtures {
    pub dir: PathBuf,
    pub libfix: PathBuf,
    pub prog_pie: PathBuf,
    pub prog_nopie: PathBuf,
    pub prog_dw4z: PathBuf,
    pub prog_split: PathBuf,
    pub prog_plain: PathBuf,
    pub inc: PathBuf,
    pub prog_stripped: PathBuf,
    pub prog_stripped_alone: PathBuf,
    /// prog.c built with `-rdynamic` (its global functions in `.dynsym`), then stripped;
    /// `prog_exported.full` is the same before stripping.
    pub prog_exported: PathBuf,
    pub prog_mini: PathBuf,
    pub cpp: PathBuf,
    pub rust_legacy: PathBuf,
    pub rust_v0: Option<PathBuf>,
    /// alias_main.c with DWARF, linked with aliases.S without.
    pub aliases: PathBuf,
    /// alias_cxx.cc: C++ functions with local aliases.
    pub aliases_cxx: PathBuf,
}

fn gcc(dir: &Path, args: &[&str]) {
    run(Command::new("gcc").current_dir(dir).args(args));
}

pub fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(build)
}

fn build() -> Fixtures {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("symbolizer-fixtures-{}", std::process::id()));
    // Drop fixture trees of earlier test runs that are no longer running.
    if let Ok(rd) = std::fs::read_dir(env!("CARGO_TARGET_TMPDIR")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("symbolizer-fixtures-") {
                if !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = |n: &str| dir.join(n);
    let s = |n: &str| fixture_src(n).to_string_lossy().into_owned();
    let p = |p: &Path| p.to_string_lossy().into_owned();

    gcc(
        &dir,
        &[
            "-g",
            "-O2",
            "-shared",
            "-fPIC",
            "-fcf-protection",
            &s("fixlib.c"),
            "-o",
            &p(&d("libfix.so")),
        ],
    );
    let inc = format!("-I{}", p(&fixture_src("")));
    let rpath = format!("-Wl,-rpath,{}", p(&dir));
    gcc(
        &dir,
        &[
            "-g",
            "-O2",
            "-fPIE",
            "-pie",
            "-fcf-protection",
            "-DWITH_LIB",
            &inc,
            &s("prog.c"),
            "-o",
            &p(&d("prog_pie")),
            "-L",
            &p(&dir),
            "-lfix",
            &rpath,
        ],
    );
    gcc(
        &dir,
        &[
            "-g",
            "-O2",
            "-fno-pie",
            "-no-pie",
            "-fcf-protection=none",
            &s("prog.c"),
            "-o",
            &p(&d("prog_nopie")),
        ],
    );
    gcc(
        &dir,
        &[
            "-g",
            "-gdwarf-4",
            "-gz=zlib",
            "-O2",
            &s("prog.c"),
            "-o",
            &p(&d("prog_dw4z")),
        ],
    );
    gcc(
        &dir,
        &[
            "-g",
            "-gsplit-dwarf",
            "-O2",
            &s("prog.c"),
            "-o",
            &p(&d("prog_split")),
        ],
    );
    gcc(
        &dir,
        &["-g", "-O2", &s("prog.c"), "-o", &p(&d("prog_plain"))],
    );
    gcc(&dir, &["-g", "-O2", &s("inc_main.c"), "-o", &p(&d("inc"))]);

    // Stripped binary with its debug file beside it (found via .gnu_debuglink).
    let sdir = d("stripped");
    std::fs::create_dir_all(&sdir).unwrap();
    let stripped = sdir.join("prog_stripped");
    gcc(
        &dir,
        &[
            "-g",
            "-O2",
            "-fcf-protection",
            &s("prog.c"),
            "-o",
            &p(&stripped),
        ],
    );
    let dbg = sdir.join("prog_stripped.debug");
    run(Command::new("objcopy").args(["--only-keep-debug", &p(&stripped), &p(&dbg)]));
    run(Command::new("strip").args(["--strip-all", &p(&stripped)]));
    run(Command::new("objcopy")
        .current_dir(&sdir)
        .args(["--add-gnu-debuglink=prog_stripped.debug", &p(&stripped)]));
    // The same stripped binary with no debug file anywhere.
    let adir = d("alone");
    std::fs::create_dir_all(&adir).unwrap();
    let alone = adir.join("prog_stripped_alone");
    std::fs::copy(&stripped, &alone).unwrap();

    // Exported functions only, as Debian ships servers that export theirs for modules.
    let edir = d("exported");
    std::fs::create_dir_all(&edir).unwrap();
    let exported = edir.join("prog_exported");
    let exported_full = edir.join("prog_exported.full");
    gcc(
        &dir,
        &[
            "-g",
            "-O2",
            "-rdynamic",
            &s("prog.c"),
            "-o",
            &p(&exported_full),
        ],
    );
    std::fs::copy(&exported_full, &exported).unwrap();
    run(Command::new("strip").args(["--strip-all", &p(&exported)]));

    // MiniDebugInfo, made the way Fedora's find-debuginfo does.
    let mdir = d("mini");
    std::fs::create_dir_all(&mdir).unwrap();
    let mini = mdir.join("prog_mini");
    gcc(&dir, &["-g", "-O2", &s("prog.c"), "-o", &p(&mini)]);
    std::fs::copy(&mini, mdir.join("prog_mini.full")).unwrap();
    let funcs = run(Command::new("nm").args(["--format=posix", "--defined-only", &p(&mini)]));
    let keep: String = funcs
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 2 && (f[1] == "T" || f[1] == "t")).then(|| format!("{}\n", f[0]))
        })
        .collect();
    std::fs::write(mdir.join("keep"), keep).unwrap();
    let mdbg = mdir.join("mini.debug");
    run(Command::new("objcopy").args(["--only-keep-debug", &p(&mini), &p(&mdbg)]));
    let mdi = mdir.join("mini_debuginfo");
    run(Command::new("objcopy").args([
        "-S",
        "--remove-section",
        ".gdb_index",
        "--remove-section",
        ".comment",
        &format!("--keep-symbols={}", p(&mdir.join("keep"))),
        &p(&mdbg),
        &p(&mdi),
    ]));
    run(Command::new("xz").args(["-f", &p(&mdi)]));
    run(Command::new("strip").args(["--strip-all", "-R", ".comment", &p(&mini)]));
    run(Command::new("objcopy").args([
        &format!("--add-section=.gnu_debugdata={}.xz", p(&mdi)),
        &p(&mini),
    ]));
    std::fs::remove_file(&mdbg).unwrap();

    run(Command::new("g++").current_dir(&dir).args([
        "-g",
        "-O2",
        &s("cpp.cc"),
        "-o",
        &p(&d("cpp")),
    ]));
    run(Command::new("rustc").current_dir(&dir).args([
        "-g",
        "-C",
        "opt-level=1",
        "--crate-name",
        "rfix",
        &s("rfix.rs"),
        "-o",
        &p(&d("rust_legacy")),
    ]));
    let v0 = d("rust_v0");
    let rust_v0 = Command::new("rustc")
        .current_dir(&dir)
        .args([
            "-g",
            "-C",
            "opt-level=1",
            "-C",
            "symbol-mangling-version=v0",
            "--crate-name",
            "rfix",
            &s("rfix.rs"),
            "-o",
            &p(&v0),
        ])
        .stderr(Stdio::null())
        .status()
        .ok()
        .filter(|s| s.success())
        .map(|_| v0);

    let aliases_o = d("aliases.o");
    gcc(&dir, &["-c", &s("aliases.S"), "-o", &p(&aliases_o)]);
    gcc(
        &dir,
        &[
            "-g",
            "-O2",
            &s("alias_main.c"),
            &p(&aliases_o),
            "-o",
            &p(&d("aliases")),
        ],
    );
    run(Command::new("g++").current_dir(&dir).args([
        "-g",
        "-O2",
        &s("alias_cxx.cc"),
        "-o",
        &p(&d("aliases_cxx")),
    ]));

    Fixtures {
        libfix: d("libfix.so"),
        prog_pie: d("prog_pie"),
        prog_nopie: d("prog_nopie"),
        prog_dw4z: d("prog_dw4z"),
        prog_split: d("prog_split"),
        prog_plain: d("prog_plain"),
        inc: d("inc"),
        prog_stripped: stripped,
        prog_stripped_alone: alone,
        prog_exported: exported,
        prog_mini: mini,
        cpp: d("cpp"),
        rust_legacy: d("rust_legacy"),
        rust_v0,
        aliases: d("aliases"),
        aliases_cxx: d("aliases_cxx"),
        dir,
    }
}

/// A function symbol as `readelf -sW` shows it.
#[derive(Clone, Debug)]
pub struct ReadelfSym {
    pub value: u64,
    pub size: u64,
    pub bind: String,
    pub name: String,
}

/// Two builds each of prog.c and cpp.cc (-O2 and -O1) whose separate debug
/// files went through `dwz -m`: all point through `.gnu_debugaltlink` into one
/// supplementary file holding their shared DIEs and strings
/// (DW_FORM_GNU_ref_alt, DW_FORM_GNU_strp_alt); C++ method definitions reach
/// their in-class declarations there. The binaries keep .symtab and a debuglink.
/// With `dwz -5` (`dwz5_fixtures`) the link is DWARF 5's `.debug_sup` and the
/// forms DW_FORM_ref_sup4 and DW_FORM_strp_sup.
pub struct DwzFixtures {
    pub dir: PathBuf,
    /// (dwz'd binary, the same build untouched)
    pub pairs: Vec<(PathBuf, PathBuf)>,
}

/// Built on first use, so that only the dwz tests need the `dwz` tool.
pub fn dwz_fixtures() -> &'static DwzFixtures {
    static F: OnceLock<DwzFixtures> = OnceLock::new();
    F.get_or_init(|| build_dwz("dwz", &[]))
}

pub fn dwz5_fixtures() -> &'static DwzFixtures {
    static F: OnceLock<DwzFixtures> = OnceLock::new();
    F.get_or_init(|| build_dwz("dwz5", &["-5"]))
}

fn build_dwz(subdir: &str, dwz_flags: &[&str]) -> DwzFixtures {
    {
        let found = Command::new("dwz")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        assert!(
            found,
            "`dwz` is not installed; this test needs it (Debian package `dwz`: apt-get install dwz)"
        );
        let dir = fixtures().dir.join(subdir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = |n: &str| fixture_src(n).to_string_lossy().into_owned();
        let mut pairs = Vec::new();
        let builds = [
            ("a", "gcc", "-O2", "prog.c"),
            ("b", "gcc", "-O1", "prog.c"),
            ("c", "g++", "-O2", "cpp.cc"),
            ("d", "g++", "-O1", "cpp.cc"),
        ];
        for (name, cc, opt, file) in builds {
            let orig = format!("{name}_orig");
            run(Command::new(cc)
                .current_dir(&dir)
                .args(["-g", opt, &src(file), "-o", &orig]));
            std::fs::copy(dir.join(&orig), dir.join(name)).unwrap();
            let debug = format!("{name}.debug");
            run(Command::new("objcopy").current_dir(&dir).args([
                "--only-keep-debug",
                name,
                &debug,
            ]));
            pairs.push((dir.join(name), dir.join(orig)));
        }
        // A relative name is stored as is: found next to the debug files.
        let debug_files = builds.map(|b| format!("{}.debug", b.0));
        run(Command::new("dwz")
            .current_dir(&dir)
            .args(dwz_flags)
            .args(["-m", "common.debug"])
            .args(&debug_files));
        // Debuglinks last: their CRC covers the debug file as dwz left it.
        for (name, ..) in builds {
            let link = format!("--add-gnu-debuglink={name}.debug");
            run(Command::new("objcopy")
                .current_dir(&dir)
                .args(["--strip-debug", &link, name]));
        }
        DwzFixtures { dir, pairs }
    }
}

/// FUNC symbols of .symtab (or .dynsym with `dynamic`), from readelf.
pub fn readelf_funcs(bin: &Path, dynamic: bool) -> Vec<ReadelfSym> {
    let out = run(Command::new("readelf").args([
        if dynamic { "--dyn-syms" } else { "--syms" },
        "-W",
        &bin.to_string_lossy(),
    ]));
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8
                || !f[0].ends_with(':')
                || (f[3] != "FUNC" && f[3] != "IFUNC")
                || f[6] == "UND"
            {
                return None;
            }
            let name = f[7].split('@').next().unwrap().to_string();
            Some(ReadelfSym {
                value: u64::from_str_radix(f[1], 16).ok()?,
                size: f[2].parse().ok()?,
                bind: f[4].to_string(),
                name,
            })
        })
        .filter(|s| s.value != 0)
        .collect()
}

/// (name, value, section index) of every symbol of .symtab defined in a
/// section, whatever its type (labels and objects included).
pub fn readelf_defined(bin: &Path) -> Vec<(String, u64, String)> {
    let out = run(Command::new("readelf").args(["--syms", "-W", &bin.to_string_lossy()]));
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8 || !f[0].ends_with(':') || f[6].parse::<u32>().is_err() {
                return None;
            }
            let value = u64::from_str_radix(f[1], 16).ok()?;
            Some((f[7].to_string(), value, f[6].to_string()))
        })
        .collect()
}

pub fn readelf_sym(bin: &Path, name: &str) -> ReadelfSym {
    readelf_funcs(bin, false)
        .into_iter()
        .chain(readelf_funcs(bin, true))
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("readelf: no {name} in {}", bin.display()))
}

/// PT_LOAD segments (offset, vaddr, filesz) from `readelf -lW`.
pub fn readelf_loads(bin: &Path) -> Vec<(u64, u64, u64)> {
    let out = run(Command::new("readelf").args(["-lW", &bin.to_string_lossy()]));
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"LOAD")).then(|| (hex(f[1]), hex(f[2]), hex(f[4])))
        })
        .collect()
}

/// File offset of `vaddr`, computed from readelf's program headers.
pub fn file_offset(bin: &Path, vaddr: u64) -> u64 {
    readelf_loads(bin)
        .into_iter()
        .find(|&(_, va, fs)| vaddr >= va && vaddr < va + fs)
        .map(|(off, va, _)| vaddr - va + off)
        .expect("vaddr in a PT_LOAD")
}

/// First instruction mnemonic at `vaddr` (objdump).
/// The first instructions at `vaddr` by objdump: (offset from `vaddr`, text without
/// objdump's `# address <symbol>` comment).
pub fn first_insns(bin: &Path, vaddr: u64) -> Vec<(u64, String)> {
    let out = run(Command::new("objdump").args([
        "-d",
        "--no-show-raw-insn",
        &format!("--start-address={vaddr:#x}"),
        &format!("--stop-address={:#x}", vaddr + 48),
        &bin.to_string_lossy(),
    ]));
    out.lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(":\t")?;
            let addr = u64::from_str_radix(addr.trim(), 16).ok()?;
            let text = rest.split(" # ").next().unwrap_or(rest).trim();
            Some((addr - vaddr, text.to_string()))
        })
        .collect()
}

/// Demangled names from `nm -C`, keyed by address.
pub fn nm_demangled(bin: &Path) -> HashMap<u64, Vec<String>> {
    let out = run(Command::new("nm").args(["-C", "--defined-only", &bin.to_string_lossy()]));
    let mut m: HashMap<u64, Vec<String>> = HashMap::new();
    for l in out.lines() {
        let mut it = l.splitn(3, ' ');
        let (Some(a), Some(_t), Some(n)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if let Ok(a) = u64::from_str_radix(a, 16) {
            m.entry(a).or_default().push(n.to_string());
        }
    }
    m
}

/// One frame as binutils addr2line prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct A2lFrame {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// `addr2line -a -f -i -C -e BIN` over many addresses in one process.
pub fn addr2line(bin: &Path, addrs: &[u64]) -> Vec<Vec<A2lFrame>> {
    let mut child = Command::new("addr2line")
        .args(["-a", "-f", "-i", "-C", "-e", &bin.to_string_lossy()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("addr2line");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
        stdin.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    parse_addr2line(&String::from_utf8_lossy(&out.stdout))
}

pub fn parse_addr2line(out: &str) -> Vec<Vec<A2lFrame>> {
    let mut res: Vec<Vec<A2lFrame>> = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("0x") {
            res.push(Vec::new());
            continue;
        }
        let func = l.to_string();
        let loc = lines.next().unwrap_or("??:0");
        let loc = loc.split(" (discriminator").next().unwrap();
        let (file, line) = loc.rsplit_once(':').unwrap_or((loc, "0"));
        res.last_mut().expect("address line first").push(A2lFrame {
            function: (func != "??").then_some(func),
            file: (file != "??").then(|| file.to_string()),
            line: line.parse().ok().filter(|&l| l != 0),
        });
    }
    res
}

/// A running fixture process, killed on drop.
pub struct Running {
    pub child: std::process::Child,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin sleep` and waits until it printed "ready" (all libraries mapped).
pub fn start_sleeper(bin: &Path) -> Running {
    use std::io::BufRead;
    let mut child = Command::new(bin)
        .arg("sleep")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn fixture");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("ready"), "fixture said {line:?}");
    Running { child }
}

/// DW_AT_decl_line of the subprogram whose DW_AT_low_pc is `addr`, following
/// DW_AT_abstract_origin / DW_AT_specification, from `readelf --debug-dump=info`.
pub fn decl_line(dwarf_file: &Path, addr: u64) -> Option<u64> {
    let out = run(Command::new("readelf").args([
        "--debug-dump=info",
        "-W",
        &dwarf_file.to_string_lossy(),
    ]));
    // DIE offset -> (tag, attributes)
    let mut dies: HashMap<u64, (String, HashMap<String, String>)> = HashMap::new();
    let mut cur: Option<u64> = None;
    for l in out.lines() {
        let t = l.trim_start();
        if t.starts_with('<') && t.contains(">: Abbrev Number") {
            // " <1><4ad>: Abbrev Number: 9 (DW_TAG_subprogram)"
            let off = t.split('>').nth(1).and_then(|x| x.strip_prefix('<'));
            let off = off.and_then(|o| u64::from_str_radix(o, 16).ok());
            let tag = t
                .split('(')
                .nth(1)
                .unwrap_or("")
                .trim_end_matches(')')
                .to_string();
            cur = off;
            if let Some(o) = off {
                dies.insert(o, (tag, HashMap::new()));
            }
        } else if let (Some(o), Some(rest)) = (cur, t.split_once("DW_AT_")) {
            if let Some((name, val)) = rest.1.split_once(':') {
                let name = name.trim().to_string();
                // "(data1) 15", "(addr) 0x1220", "(ref4) <0x62>, int"
                let val = val.trim();
                let val = match val.strip_prefix('(') {
                    Some(v) => v.split_once(')').map_or(v, |x| x.1).trim(),
                    None => val,
                };
                let val = val
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .trim_end_matches(',');
                dies.get_mut(&o).unwrap().1.insert(name, val.to_string());
            }
        }
    }
    let parse_hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
    let (_, attrs) = dies.values().find(|(tag, a)| {
        tag == "DW_TAG_subprogram" && a.get("low_pc").and_then(|v| parse_hex(v)) == Some(addr)
    })?;
    let mut attrs = attrs.clone();
    for _ in 0..4 {
        if let Some(l) = attrs.get("decl_line") {
            return l.parse().ok();
        }
        let next = attrs
            .get("abstract_origin")
            .or_else(|| attrs.get("specification"))?;
        let off = parse_hex(next.trim_start_matches('<').trim_end_matches('>'))?;
        attrs = dies.get(&off)?.1.clone();
    }
    None
}
