//! The end of the document: names and order of the tracks, the stacks, what was lost.

use super::json::Str;
use super::*;

impl<W: Write> Writer<W> {
    /// Names and order of processes, threads and CPUs, then what was lost, then the end
    /// of the document.
    pub(super) fn close(&mut self, tl: &Timeline, input: &InputReport) -> std::io::Result<()> {
        let nodes = tl.merger().nodes();
        // On several hosts ids are shifted by the host's number: names give the real ones.
        let several = nodes.len() > 1;
        let at_host = |host: u32| match several {
            false => String::new(),
            true => format!(" on {}", nodes[host as usize].hostname),
        };
        for pm in tl.processes() {
            let host = tl.merger().sources()[pm.source as usize].node;
            let name = match several {
                false => pm.name.clone(),
                true => format!("{} (pid {}){}", pm.name, pm.tgid, at_host(host)),
            };
            self.meta(
                pid(host, pm.tgid),
                None,
                "process_name",
                &Str(&name).to_string(),
            )?;
        }
        for (r, th) in tl.threads().iter().enumerate() {
            let (host, p, t) = Self::ids(tl, r as ThreadRef);
            let st = state_tid(host, th.tid);
            let order = 2 * th.index_in_process as u64;
            let name = match several {
                false => th.name.clone(),
                true => format!("{} (tid {})", th.name, th.tid),
            };
            self.meta(p, Some(t), "thread_name", &Str(&name).to_string())?;
            self.meta(p, Some(t), "thread_sort_index", &order.to_string())?;
            let state_name = format!("{name} state");
            self.meta(p, Some(st), "thread_name", &Str(&state_name).to_string())?;
            self.meta(p, Some(st), "thread_sort_index", &(order + 1).to_string())?;
        }
        let mut goroutines: Vec<_> = self.goroutines.iter().map(|(&k, &n)| (n, k)).collect();
        goroutines.sort_unstable();
        for (n, (host, tgid, g)) in goroutines {
            let name = format!("\"goroutine {g:#x}\"");
            self.meta(
                pid(host, tgid),
                Some(goroutine_tid(host, n)),
                "thread_name",
                &name,
            )?;
        }
        let hosts: BTreeSet<u32> = self.cpus.iter().map(|&(h, _)| h).collect();
        for host in hosts {
            let name = format!("CPUs{}", at_host(host));
            self.meta(
                cpus_pid(host),
                None,
                "process_name",
                &Str(&name).to_string(),
            )?;
        }
        for (host, cpu) in std::mem::take(&mut self.cpus) {
            let (p, t) = (cpus_pid(host), cpu as u64);
            let local = cpu - nodes[host as usize].cpu_base;
            self.meta(p, Some(t), "thread_name", &format!("\"CPU {local}\""))?;
            self.meta(p, Some(t), "thread_sort_index", &t.to_string())?;
        }
        let files: Vec<String> = (tl.merger().sources().iter())
            .map(|s| Str(&s.path.to_string_lossy()).to_string())
            .collect();
        // Regions a salvaging read stepped over: what they held is missing.
        let damaged: Vec<String> = (input.damage.iter())
            .map(|(p, d)| Str(&format!("{}: {d}", p.display())).to_string())
            .collect();
        self.out.buf.extend_from_slice(b"\n]");
        self.samples.write(&mut self.out.buf)?;
        write!(
            self.out.buf,
            ",\n\"otherData\":{{\"producer\":\"tracer {}\",\"inputs\":[{}],\"records\":{},\"lost_by_kernel\":{},\"threads_not_traced\":{},\"out_of_order\":{},\"salvaged\":[{}]}}}}\n",
            env!("CARGO_PKG_VERSION"),
            files.join(","),
            input.records_in,
            input.lost_by_kernel,
            input.threads_not_traced,
            input.out_of_order,
            damaged.join(","),
        )
    }

    /// A metadata event; `value` is JSON.
    fn meta(&mut self, p: u64, t: Option<u64>, what: &str, value: &str) -> std::io::Result<()> {
        let key = if what.ends_with("index") {
            "sort_index"
        } else {
            "name"
        };
        let out = self.out.next()?;
        write!(out, r#"{{"ph":"M","name":"{what}","pid":{p}"#)?;
        if let Some(t) = t {
            write!(out, r#","tid":{t}"#)?;
        }
        write!(out, r#","args":{{"{key}":{value}}}}}"#)
    }
}
