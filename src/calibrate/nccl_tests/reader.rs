//! Reading nccl-tests output: the header (ranks, nodes, GPUs), the table's rows, each log of a
//! file checked on its own.

use crate::error::{Error, Result};
use crate::files::InputKind;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which time column of the nccl-tests table is the collective's price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Column {
    /// Separate send and receive buffers: what vLLM's NCCL all-reduce does (it writes into a
    /// new output tensor).
    #[default]
    OutOfPlace,
    InPlace,
    /// The faster of the two per size.
    Min,
}

crate::names::enum_names!(Column, "nccl-tests column",
    Column::OutOfPlace => ["out-of-place", "out_of_place", "oop"],
    Column::InPlace => ["in-place", "in_place", "ip"],
    Column::Min => ["min"]);

/// One data row: the message size and both times.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub line: usize,
    pub bytes: u64,
    pub count: u64,
    pub dtype: String,
    pub out_of_place_us: f64,
    pub in_place_us: f64,
}

impl Row {
    pub fn us(&self, c: Column) -> f64 {
        match c {
            Column::OutOfPlace => self.out_of_place_us,
            Column::InPlace => self.in_place_us,
            Column::Min => self.out_of_place_us.min(self.in_place_us),
        }
    }
}

/// One nccl-tests output file.
#[derive(Debug, Clone, PartialEq)]
pub struct NcclTestsFile {
    pub path: PathBuf,
    /// The line its log starts at (a file may hold several logs, one after the other).
    pub line: usize,
    /// The collective, as the AIConfigurator table spells it (`all_reduce`, `all_gather`, ...).
    pub op: String,
    /// Ranks in the job: the `# Rank` lines, else nThread × nGpus.
    pub nranks: u32,
    /// The header's nThread / nGpus line, verbatim.
    pub threads_line: String,
    /// The version lines (`# nccl-tests version ...`, `NCCL version ...`).
    pub versions: Vec<String>,
    /// The GPU names of the `# Rank` lines, distinct.
    pub gpus: Vec<String>,
    /// Nodes the job ran on: the distinct hosts of the `# Rank ... on HOST device` lines (1 when
    /// the lines name none; `from_nccl_tests` then infers it from the system's GPUs per node).
    pub nodes: u32,
    /// The channels NCCL ran the collectives on, with the line that says so, where the log holds
    /// NCCL's own INFO lines (`NCCL_DEBUG=INFO`): `N coll channels`, else the ring lines'
    /// `Channel 00/N`.
    pub channels: Option<(u32, usize)>,
    pub rows: Vec<Row>,
}

/// The collectives the pricer can take from a table (the AIConfigurator spellings).
pub(super) const OPS: [(&str, &str); 4] = [
    ("all_reduce", "all_reduce"),
    ("all_gather", "all_gather"),
    ("reduce_scatter", "reduce_scatter"),
    ("alltoall", "alltoall"),
];

/// nccl-tests type names → the table's dtype and its size in bytes.
pub(super) const TYPES: [(&str, &str, u64); 10] = [
    ("float", "float32", 4),
    ("float32", "float32", 4),
    ("half", "half", 2),
    ("float16", "half", 2),
    ("bfloat16", "bfloat16", 2),
    ("int8", "int8", 1),
    ("uint8", "int8", 1),
    ("f8e4m3", "fp8", 1),
    ("f8e5m2", "fp8", 1),
    ("fp8", "fp8", 1),
];

pub(super) fn re(s: &str) -> regex::Regex {
    regex::Regex::new(s).expect("valid regex")
}

/// Reads one nccl-tests output file holding one log.
pub fn read(path: &Path) -> Result<NcclTestsFile> {
    let text = crate::files::read_text(path, InputKind::MeasurementCsv)?;
    parse(&text, path)
}

/// Reads one nccl-tests output file: each log in it (`all_reduce_perf` then
/// `all_gather_perf`, run one after the other into one file) is its own collective.
pub fn read_sections(path: &Path) -> Result<Vec<NcclTestsFile>> {
    let text = crate::files::read_text(path, InputKind::MeasurementCsv)?;
    parse_sections(&text, path)
}

/// A file of one log; a file of several is refused here (read it with [`parse_sections`]).
pub fn parse(text: &str, path: &Path) -> Result<NcclTestsFile> {
    let mut s = parse_sections(text, path)?;
    if s.len() > 1 {
        return Err(Error::field(
            path,
            format!("line {}", s[1].line),
            format!("{} logs in one file; expected one", s.len()),
        ));
    }
    Ok(s.remove(0))
}

/// Splits a file into its logs and reads each. A log starts at a header line (`# nccl-tests
/// version`, `# Collective test starting`, `# nThread`) that follows data rows: reading two
/// logs as one would count both logs' `# Rank` lines as one job of twice the ranks and take
/// the second test's rows for the first's collective.
pub fn parse_sections(text: &str, path: &Path) -> Result<Vec<NcclTestsFile>> {
    let mpi = re(r"^\[\d+,\d+\]<std(out|err)>:");
    let starts = re(r"^#\s*(nccl-tests version|Collective test starting|nThread\s)");
    let row = re(r"^\d+\s");
    let mut sections: Vec<Vec<(usize, &str)>> = vec![Vec::new()];
    let mut has_rows = false;
    for (i, raw) in text.lines().enumerate() {
        let l = mpi.find(raw).map_or(raw, |m| &raw[m.end()..]).trim();
        if has_rows && starts.is_match(l) {
            sections.push(Vec::new());
            has_rows = false;
        }
        has_rows |= row.is_match(l);
        sections
            .last_mut()
            .expect("one section at least")
            .push((i + 1, raw));
    }
    sections
        .iter()
        .map(|lines| parse_section(lines, path))
        .collect()
}

/// The patterns of a log's header lines.
struct HeaderPatterns {
    threads: regex::Regex,
    rank: regex::Regex,
    test: regex::Regex,
    host: regex::Regex,
    rank_no: regex::Regex,
    coll_channels: regex::Regex,
    ring_channel: regex::Regex,
}

impl HeaderPatterns {
    fn new() -> Self {
        HeaderPatterns {
            threads: re(r"nThread\s+(\d+)\s+nGpus\s+(\d+)"),
            rank: re(r"^#\s*Rank\s+\d+\b.*\bdevice\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$"),
            test: re(
                r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|gather|scatter|hypercube)_perf\b",
            ),
            host: re(r"^#\s*Rank\s+\d+\b.*\bon\s+(\S+)\s+device\s+\d+"),
            rank_no: re(r"^#\s*Rank\s+(\d+)\b"),
            coll_channels: re(r"\bNCCL INFO\s+(\d+)\s+coll channels\b"),
            // A ring line lists ranks only; a connection line (`Channel 00/0 : 0[0] -> 1[1]`)
            // carries a connection index where the count would be.
            ring_channel: re(r"\bNCCL INFO\s+Channel\s+\d+/(\d+)\s*:(\s+\d+)+\s*$"),
        }
    }
}

/// What a log's header lines say: GPUs per process, ranks, hosts, GPUs, versions, the test.
struct Header {
    /// nThread × nGpus.
    per_process: Option<u32>,
    threads_line: String,
    /// The line of the nThread/nGpus header (the log's first line until it is found).
    threads_at: usize,
    versions: Vec<String>,
    gpus: Vec<String>,
    /// `# Rank` lines that name a device.
    ranks: u32,
    /// The test named by a header line.
    op_named: Option<String>,
    /// Distinct hosts with their rank lines' count.
    hosts: Vec<(String, u32)>,
    /// Rank number → the line listing it.
    rank_lines: BTreeMap<u64, usize>,
    /// The most channels an `N coll channels` line states, and its line.
    coll_channels: Option<(u32, usize)>,
    /// The most channels a ring line (`Channel 00/N : ranks`) states, and its line.
    ring_channels: Option<(u32, usize)>,
}

impl Header {
    fn new(first_line: usize) -> Self {
        Header {
            per_process: None,
            threads_line: String::new(),
            threads_at: first_line,
            versions: Vec::new(),
            gpus: Vec::new(),
            ranks: 0,
            op_named: None,
            hosts: Vec::new(),
            rank_lines: BTreeMap::new(),
            coll_channels: None,
            ring_channels: None,
        }
    }

    /// Takes in NCCL's own INFO lines that state the channels (`NCCL_DEBUG=INFO`).
    fn channel_line(&mut self, pat: &HeaderPatterns, line: usize, l: &str) {
        let keep = |slot: &mut Option<(u32, usize)>, c: &regex::Captures| {
            if let Ok(n) = c[1].parse::<u32>() {
                if (1..=64).contains(&n) && slot.is_none_or(|(m, _)| n > m) {
                    *slot = Some((n, line));
                }
            }
        };
        if let Some(c) = pat.coll_channels.captures(l) {
            keep(&mut self.coll_channels, &c);
        } else if let Some(c) = pat.ring_channel.captures(l) {
            keep(&mut self.ring_channels, &c);
        }
    }

    /// Takes in a `#` line `l` (trimmed, MPI prefix removed) at `line`.
    fn comment_line(
        &mut self,
        pat: &HeaderPatterns,
        line: usize,
        l: &str,
        path: &Path,
    ) -> Result<()> {
        let bad = |what: String| Error::field(path, format!("line {line}"), what);
        if let Some(c) = pat.threads.captures(l) {
            let (t, g) = (c[1].parse::<u32>(), c[2].parse::<u32>());
            match (t, g) {
                (Ok(t), Ok(g)) if t >= 1 && g >= 1 && (t as u64 * g as u64) <= 4096 => {
                    self.per_process = Some(t * g)
                }
                _ => {
                    return Err(bad(format!(
                        "nThread/nGpus '{}': expected positive whole numbers",
                        crate::units::clip(l, 60)
                    )))
                }
            }
            self.threads_line = l.trim_start_matches('#').trim().to_string();
            self.threads_at = line;
        }
        if let Some(c) = pat.rank_no.captures(l) {
            let k = c[1].parse::<u64>().unwrap_or(u64::MAX);
            if let Some(first) = self.rank_lines.insert(k, line) {
                return Err(bad(format!("rank {k} listed again (first at line {first}): two logs run together without their headers; keep each log's '# nThread' header, or put each log in its own file")));
            }
        }
        if let Some(c) = pat.host.captures(l) {
            match self.hosts.iter_mut().find(|(h, _)| h.as_str() == &c[1]) {
                Some((_, k)) => *k += 1,
                None => self.hosts.push((c[1].to_string(), 1)),
            }
        }
        if let Some(c) = pat.rank.captures(l) {
            self.ranks += 1;
            let g = c[1].to_string();
            if !self.gpus.contains(&g) {
                self.gpus.push(g);
            }
        }
        if self.op_named.is_none() {
            if let Some(c) = pat.test.captures(l) {
                self.op_named = Some(c[1].to_string());
            }
        }
        Ok(())
    }

    /// Keeps a version line (`# nccl-tests version ...`, `NCCL version ...`), at most 8.
    fn version_line(&mut self, l: &str) {
        if l.contains("nccl-tests version") || l.contains("NCCL version") {
            let v = l.trim_start_matches('#').trim().to_string();
            if !self.versions.contains(&v) && self.versions.len() < 8 {
                self.versions.push(crate::units::clip(&v, 120));
            }
        }
    }

    /// The job's ranks: the `# Rank` lines, a whole number of processes numbered from 0, else
    /// the GPUs of one process; at least two.
    fn nranks(&self, per_process: u32, path: &Path) -> Result<u32> {
        let (ranks, nt) = (self.ranks, per_process);
        // Under MPI each process runs nThread x nGpus GPUs, so the ranks listed are a whole
        // number of processes of that size, numbered 0..n-1.
        if ranks > 0
            && (ranks % nt != 0 || self.rank_lines.keys().next_back() != Some(&(ranks as u64 - 1)))
        {
            return Err(Error::field(
                path,
                format!("line {}", self.threads_at),
                format!(
                    "the header '{}' runs {nt} GPU(s) per process, but the log lists {ranks} '# Rank' line(s) numbered {}..{}: expected a whole number of processes of {nt}, numbered from 0",
                    crate::units::clip(&self.threads_line, 60),
                    self.rank_lines.keys().next().copied().unwrap_or(0),
                    self.rank_lines.keys().next_back().copied().unwrap_or(0)
                ),
            ));
        }
        let nranks = if ranks > 0 { ranks } else { nt };
        if nranks < 2 {
            return Err(Error::field(
                path,
                "header",
                format!(
                    "{nranks} GPU: a collective over one GPU moves nothing; run with -g N or under MPI"
                ),
            ));
        }
        Ok(nranks)
    }

    /// Refuses ranks spread unevenly over hosts: the multi-node table is keyed by (nodes,
    /// ranks), and a TP group across nodes takes the same number of GPUs on each.
    fn check_hosts(&self, nranks: u32, path: &Path) -> Result<()> {
        let hosts = &self.hosts;
        if hosts.len() > 1 && hosts.iter().any(|h| h.1 != hosts[0].1) {
            return Err(Error::field(
                path,
                "header",
                format!(
                    "{nranks} ranks spread unevenly over {} hosts ({}): decodesim prices groups with the same number of GPUs on every node; rerun with the same count per host",
                    hosts.len(),
                    hosts
                        .iter()
                        .map(|(h, k)| format!("{} on {}", k, crate::units::clip(h, 40)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// Reads one log: its lines with their line numbers in the file.
pub(super) fn parse_section(lines: &[(usize, &str)], path: &Path) -> Result<NcclTestsFile> {
    let mpi = re(r"^\[\d+,\d+\]<std(out|err)>:");
    let pat = HeaderPatterns::new();
    let first_line = lines.first().map_or(1, |l| l.0);
    let mut header = Header::new(first_line);
    let mut rows = Vec::new();
    for &(line, raw) in lines {
        let l = mpi.replace(raw, "");
        let l = l.trim();
        if l.starts_with('#') {
            header.comment_line(&pat, line, l, path)?;
        }
        header.version_line(l);
        header.channel_line(&pat, line, l);
        if l.starts_with('#') || l.is_empty() {
            continue;
        }
        if let Some(row) = data_row(line, l, path)? {
            rows.push(row);
        }
    }
    // A log after the first is named by the line it starts at.
    let part = |what: &str| {
        if first_line > 1 {
            format!("{what} of the log from line {first_line}")
        } else {
            what.to_string()
        }
    };
    let Some(nt) = header.per_process else {
        return Err(Error::field(
            path,
            part("header"),
            "no '# nThread N nGpus G ...' line: cannot tell how many GPUs took part (keep the header nccl-tests prints)",
        ));
    };
    if rows.is_empty() {
        return Err(Error::field(
            path,
            part("table"),
            "no data rows: expected the nccl-tests table (size count type redop root time algbw busbw #wrong time algbw busbw #wrong)",
        ));
    }
    let key = collective(header.op_named.take(), &pat.test, path)?;
    let nranks = header.nranks(nt, path)?;
    header.check_hosts(nranks, path)?;
    Ok(NcclTestsFile {
        path: path.to_path_buf(),
        line: first_line,
        op: key.to_string(),
        nranks,
        threads_line: header.threads_line,
        versions: header.versions,
        gpus: header.gpus,
        nodes: header.hosts.len().max(1) as u32,
        channels: header.coll_channels.or(header.ring_channels),
        rows,
    })
}

/// The collective as the table spells it: the test a header line named, else the file's
/// name; refused where neither tells or the pricer takes no table of it.
fn collective(op_named: Option<String>, test: &regex::Regex, path: &Path) -> Result<&'static str> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let op = op_named
        .or_else(|| test.captures(&name).map(|c| c[1].to_string()))
        .or_else(|| {
            OPS.iter()
                .find(|(o, _)| name.contains(o))
                .map(|(o, _)| o.to_string())
        });
    let Some(op) = op else {
        return Err(Error::field(
            path,
            "collective",
            "cannot tell which test this is: keep the '# Collective test starting: all_reduce_perf' line, or name the file after the test (all_reduce_perf.txt)",
        ));
    };
    let Some(&(_, key)) = OPS.iter().find(|(o, _)| *o == op) else {
        return Err(Error::field(
            path,
            "collective",
            format!("{op}_perf: decodesim prices all_reduce, all_gather, reduce_scatter and alltoall from tables, not {op}"),
        ));
    };
    Ok(key)
}

/// One line of the table, every column checked (None: log text, or a size-0 row that times
/// nothing).
fn data_row(line: usize, l: &str, path: &Path) -> Result<Option<Row>> {
    let f = RowFields {
        f: l.split_whitespace().collect(),
        line,
        path,
    };
    // A data row starts with the size in bytes; anything else (NCCL INFO lines, host
    // names) is log text.
    if f.f[0].parse::<u64>().is_err() {
        return Ok(None);
    }
    let root = match f.f.len() {
        13 => 1,
        12 => 0,
        n => {
            return Err(f.bad(format!(
                "{n} columns, expected 13 (size count type redop root time algbw busbw #wrong time algbw busbw #wrong) or 12 (the same without root)"
            )))
        }
    };
    let bytes = f.int(0, "size")?;
    let count = f.int(1, "count")?;
    let t = 4 + root;
    let oop = f.time(t, "out-of-place time")?;
    f.bandwidths(t)?;
    f.wrong(t + 3, "out-of-place #wrong")?;
    let ip = f.time(t + 4, "in-place time")?;
    f.wrong(t + 7, "in-place #wrong")?;
    if bytes == 0 {
        return Ok(None); // a size-0 row times nothing
    }
    let type_name = f.f[2];
    let Some(&(_, dtype, size)) = TYPES
        .iter()
        .find(|(n, _, _)| n.eq_ignore_ascii_case(type_name))
    else {
        return Err(f.bad(format!(
            "column type: found '{}', expected one of {}",
            crate::units::clip(type_name, 20),
            TYPES.iter().map(|t| t.0).collect::<Vec<_>>().join(", ")
        )));
    };
    if bytes % size != 0 {
        return Err(f.bad(format!(
            "size {bytes} B is not a whole number of {type_name} elements"
        )));
    }
    Ok(Some(Row {
        line,
        bytes,
        count,
        dtype: dtype.to_string(),
        out_of_place_us: oop,
        in_place_us: ip,
    }))
}

/// A data row's columns, each read with the error that names its line and column.
struct RowFields<'a> {
    f: Vec<&'a str>,
    line: usize,
    path: &'a Path,
}

impl RowFields<'_> {
    fn bad(&self, what: String) -> Error {
        Error::field(self.path, format!("line {}", self.line), what)
    }

    fn int(&self, k: usize, name: &str) -> Result<u64> {
        self.f[k].parse::<u64>().map_err(|_| {
            self.bad(format!(
                "column {name}: found '{}', expected a whole number",
                crate::units::clip(self.f[k], 20)
            ))
        })
    }

    fn time(&self, k: usize, name: &str) -> Result<f64> {
        self.f[k]
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e9)
            .ok_or_else(|| {
                self.bad(format!(
                    "column {name}: found '{}', expected a positive time in µs",
                    crate::units::clip(self.f[k], 20)
                ))
            })
    }

    /// The #wrong column: 0 or N/A; wrong results are no measurement to price from.
    fn wrong(&self, k: usize, name: &str) -> Result<()> {
        match self.f[k] {
            "N/A" => Ok(()),
            w => match w.parse::<u64>() {
                Ok(0) => Ok(()),
                Ok(n) => Err(self.bad(format!("column {name}: {n} wrong result(s): the collective produced wrong data, so its time is not a measurement to price from (fix the setup and rerun)"))),
                Err(_) => Err(self.bad(format!("column {name}: found '{}', expected 0 or N/A", crate::units::clip(w, 20)))),
            },
        }
    }

    /// The algbw/busbw columns beside the times at `t` and `t + 4`: numbers, unused.
    fn bandwidths(&self, t: usize) -> Result<()> {
        for k in [t + 1, t + 2, t + 5, t + 6] {
            self.f[k].parse::<f64>().map_err(|_| {
                self.bad(format!(
                    "column {}: found '{}', expected a bandwidth in GB/s",
                    if k < t + 4 {
                        "out-of-place algbw/busbw"
                    } else {
                        "in-place algbw/busbw"
                    },
                    crate::units::clip(self.f[k], 20)
                ))
            })?;
        }
        Ok(())
    }
}

pub(super) fn dtype_size(dtype: &str) -> u64 {
    TYPES.iter().find(|t| t.1 == dtype).map_or(1, |t| t.2)
}
