//! `calibrate --from-nccl-tests FILE...`: nccl-tests output (`all_reduce_perf`,
//! `all_gather_perf`, ...; format in docs/sources.md §7.1) becomes the measured
//! collective table of the user's machine.
//!
//! The measured times go, row for row, into an AIConfigurator-format `nccl_collectives.csv`
//! (op, nranks, bytes, µs) in a `tables/` folder beside the written profile, and the profile's
//! `[aiconfigurator]` section points there: collectives are then priced by the same path as
//! AIConfigurator's NCCL rows (`cost::aic::CommCurve` / `comm_price`: log-log interpolation
//! between the measured sizes, linear beyond them, NCCL's own protocol choice per size, the
//! LL→Simple switch found in the curve for a forced protocol). A measured curve prices better
//! than a latency + bytes / bandwidth law fitted to it (the law cannot follow the protocol
//! switch or the channel ramp), and it is the path the tool already has. The base profile's
//! other AIConfigurator tables, if any, are copied along; its NCCL rows of an (op, ranks) the
//! files measure are replaced, the others kept (an all_reduce file alone must not turn the
//! base's measured all_gather into a law's guess); what neither holds is priced by the
//! profile's collective laws. A file may hold several logs run one after the other: each is
//! its own collective, checked against its own header. The tables are built in a staged
//! folder and put in place together with the profile (`files::StagedFolder`).

use super::aiconfigurator::relative_to;
use super::output::{render_profile, today};
use crate::cost::aic::{comm_price, AicTables};
use crate::cost::profile::AicSection;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::files::InputKind;
use crate::scenario::system::LinkKind;
use crate::scenario::CommPath;
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
    pub rows: Vec<Row>,
}

/// The collectives the pricer can take from a table (the AIConfigurator spellings).
const OPS: [(&str, &str); 4] = [
    ("all_reduce", "all_reduce"),
    ("all_gather", "all_gather"),
    ("reduce_scatter", "reduce_scatter"),
    ("alltoall", "alltoall"),
];

/// nccl-tests type names → the table's dtype and its size in bytes.
const TYPES: [(&str, &str, u64); 10] = [
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

fn re(s: &str) -> regex::Regex {
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

/// Reads one log: its lines with their line numbers in the file.
fn parse_section(lines: &[(usize, &str)], path: &Path) -> Result<NcclTestsFile> {
    let mpi = re(r"^\[\d+,\d+\]<std(out|err)>:");
    let threads = re(r"nThread\s+(\d+)\s+nGpus\s+(\d+)");
    let rank = re(r"^#\s*Rank\s+\d+\b.*\bdevice\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$");
    let test = re(
        r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|gather|scatter|hypercube)_perf\b",
    );
    let (mut nt, mut threads_line, mut versions, mut gpus) =
        (None, String::new(), Vec::new(), Vec::new());
    let (mut ranks, mut op_named) = (0u32, None::<String>);
    let host = re(r"^#\s*Rank\s+\d+\b.*\bon\s+(\S+)\s+device\s+\d+");
    let mut hosts: Vec<(String, u32)> = Vec::new();
    let mut rows = Vec::new();
    let bad = |line: usize, what: String| Error::field(path, format!("line {line}"), what);
    let first_line = lines.first().map_or(1, |l| l.0);
    let rank_no = re(r"^#\s*Rank\s+(\d+)\b");
    let mut rank_lines: BTreeMap<u64, usize> = BTreeMap::new();
    let mut threads_at = first_line;
    for &(line, raw) in lines {
        let l = mpi.replace(raw, "");
        let l = l.trim();
        if l.starts_with('#') {
            if let Some(c) = threads.captures(l) {
                let (t, g) = (c[1].parse::<u32>(), c[2].parse::<u32>());
                match (t, g) {
                    (Ok(t), Ok(g)) if t >= 1 && g >= 1 && (t as u64 * g as u64) <= 4096 => {
                        nt = Some(t * g)
                    }
                    _ => {
                        return Err(bad(
                            line,
                            format!(
                                "nThread/nGpus '{}': expected positive whole numbers",
                                crate::units::clip(l, 60)
                            ),
                        ))
                    }
                }
                threads_line = l.trim_start_matches('#').trim().to_string();
                threads_at = line;
            }
            if let Some(c) = rank_no.captures(l) {
                let k = c[1].parse::<u64>().unwrap_or(u64::MAX);
                if let Some(first) = rank_lines.insert(k, line) {
                    return Err(bad(
                        line,
                        format!("rank {k} listed again (first at line {first}): two logs run together without their headers; keep each log's '# nThread' header, or put each log in its own file"),
                    ));
                }
            }
            if let Some(c) = host.captures(l) {
                match hosts.iter_mut().find(|(h, _)| h.as_str() == &c[1]) {
                    Some((_, k)) => *k += 1,
                    None => hosts.push((c[1].to_string(), 1)),
                }
            }
            if let Some(c) = rank.captures(l) {
                ranks += 1;
                let g = c[1].to_string();
                if !gpus.contains(&g) {
                    gpus.push(g);
                }
            }
            if op_named.is_none() {
                if let Some(c) = test.captures(l) {
                    op_named = Some(c[1].to_string());
                }
            }
        }
        if l.contains("nccl-tests version") || l.contains("NCCL version") {
            let v = l.trim_start_matches('#').trim().to_string();
            if !versions.contains(&v) && versions.len() < 8 {
                versions.push(crate::units::clip(&v, 120));
            }
        }
        if l.starts_with('#') || l.is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        // A data row starts with the size in bytes; anything else (NCCL INFO lines, host
        // names) is log text.
        if f[0].parse::<u64>().is_err() {
            continue;
        }
        let root = match f.len() {
            13 => 1,
            12 => 0,
            n => {
                return Err(bad(line, format!(
                    "{n} columns, expected 13 (size count type redop root time algbw busbw #wrong time algbw busbw #wrong) or 12 (the same without root)"
                )))
            }
        };
        let int = |k: usize, name: &str| -> Result<u64> {
            f[k].parse::<u64>().map_err(|_| {
                bad(
                    line,
                    format!(
                        "column {name}: found '{}', expected a whole number",
                        crate::units::clip(f[k], 20)
                    ),
                )
            })
        };
        let time = |k: usize, name: &str| -> Result<f64> {
            f[k].parse::<f64>()
                .ok()
                .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e9)
                .ok_or_else(|| {
                    bad(
                        line,
                        format!(
                            "column {name}: found '{}', expected a positive time in µs",
                            crate::units::clip(f[k], 20)
                        ),
                    )
                })
        };
        let wrong = |k: usize, name: &str| -> Result<()> {
            match f[k] {
                "N/A" => Ok(()),
                w => match w.parse::<u64>() {
                    Ok(0) => Ok(()),
                    Ok(n) => Err(bad(line, format!("column {name}: {n} wrong result(s): the collective produced wrong data, so its time is not a measurement to price from (fix the setup and rerun)"))),
                    Err(_) => Err(bad(line, format!("column {name}: found '{}', expected 0 or N/A", crate::units::clip(w, 20)))),
                },
            }
        };
        let bytes = int(0, "size")?;
        let count = int(1, "count")?;
        let t = 4 + root;
        let oop = time(t, "out-of-place time")?;
        for k in [t + 1, t + 2, t + 5, t + 6] {
            f[k].parse::<f64>().map_err(|_| {
                bad(
                    line,
                    format!(
                        "column {}: found '{}', expected a bandwidth in GB/s",
                        if k < t + 4 {
                            "out-of-place algbw/busbw"
                        } else {
                            "in-place algbw/busbw"
                        },
                        crate::units::clip(f[k], 20)
                    ),
                )
            })?;
        }
        wrong(t + 3, "out-of-place #wrong")?;
        let ip = time(t + 4, "in-place time")?;
        wrong(t + 7, "in-place #wrong")?;
        if bytes == 0 {
            continue; // a size-0 row times nothing
        }
        let Some(&(_, dtype, size)) = TYPES.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(f[2]))
        else {
            return Err(bad(
                line,
                format!(
                    "column type: found '{}', expected one of {}",
                    crate::units::clip(f[2], 20),
                    TYPES.iter().map(|t| t.0).collect::<Vec<_>>().join(", ")
                ),
            ));
        };
        if bytes % size != 0 {
            return Err(bad(
                line,
                format!("size {bytes} B is not a whole number of {} elements", f[2]),
            ));
        }
        rows.push(Row {
            line,
            bytes,
            count,
            dtype: dtype.to_string(),
            out_of_place_us: oop,
            in_place_us: ip,
        });
    }
    // A log after the first is named by the line it starts at.
    let part = |what: &str| {
        if first_line > 1 {
            format!("{what} of the log from line {first_line}")
        } else {
            what.to_string()
        }
    };
    let Some(nt) = nt else {
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
    // Under MPI each process runs nThread x nGpus GPUs, so the ranks listed are a whole number
    // of processes of that size, numbered 0..n-1.
    if ranks > 0 && (ranks % nt != 0 || rank_lines.keys().next_back() != Some(&(ranks as u64 - 1)))
    {
        return Err(bad(
            threads_at,
            format!(
                "the header '{}' runs {nt} GPU(s) per process, but the log lists {ranks} '# Rank' line(s) numbered {}..{}: expected a whole number of processes of {nt}, numbered from 0",
                crate::units::clip(&threads_line, 60),
                rank_lines.keys().next().copied().unwrap_or(0),
                rank_lines.keys().next_back().copied().unwrap_or(0)
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
    // Groups of whole nodes only: the multi-node table is keyed by (nodes, ranks), and a TP
    // group across nodes takes the same number of GPUs on each.
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
    Ok(NcclTestsFile {
        path: path.to_path_buf(),
        line: first_line,
        op: key.to_string(),
        nranks,
        threads_line,
        versions,
        gpus,
        nodes: hosts.len().max(1) as u32,
        rows,
    })
}

/// What to read and where to write.
#[derive(Debug, Clone)]
pub struct NcclTestsRequest {
    pub files: Vec<PathBuf>,
    pub column: Column,
    /// The base profile (its laws price what the files do not hold).
    pub base: CalibrationProfile,
    /// The machine the files were measured on (its GPU link is the table's path).
    pub system: crate::scenario::SystemSpec,
    pub out: PathBuf,
    pub name: Option<String>,
}

/// One (op, ranks) curve written.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub op: String,
    pub nranks: u32,
    pub rows: usize,
    pub bytes: [f64; 2],
    /// Measured µs at the smallest and largest size.
    pub us: [f64; 2],
    /// The base profile's table price at those sizes (None: it had no such curve).
    pub base_us: Option<[f64; 2]>,
    /// Where NCCL switched LL → Simple in this curve (last LL size, first Simple size).
    pub switch_bytes: Option<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct NcclTestsResult {
    pub profile: CalibrationProfile,
    pub tables_dir: PathBuf,
    pub files: Vec<NcclTestsFile>,
    pub curves: Vec<Curve>,
    pub copied: Vec<String>,
    /// Rows written to the multi-node table (`cost::internode::MULTINODE_CSV`).
    pub multinode_rows: usize,
    /// (op, ranks) → rows of the single-node table measured by the files.
    pub measured: Vec<((String, u32), usize)>,
    /// (op, ranks) → rows kept from the base profile's table (what the files do not measure).
    pub kept: Vec<((String, u32), usize)>,
    /// Whether the base's multi-node table was kept (no file here ran over several nodes).
    pub kept_multinode: bool,
}

/// (op, ranks, dtype, bytes) → (µs, elements, file, line): one measurement per size.
type Measured<'a> = BTreeMap<(String, u32, String, u64), (f64, u64, &'a Path, usize)>;

/// Reads the files, writes `tables/` and the profile.
pub fn from_nccl_tests(req: &NcclTestsRequest) -> Result<NcclTestsResult> {
    if req.files.is_empty() {
        return Err(Error::NoInput {
            flag: "--from-nccl-tests",
            what: "file",
        });
    }
    let mut files: Vec<NcclTestsFile> = Vec::new();
    for f in &req.files {
        files.extend(read_sections(f)?);
    }
    // A file whose rank lines name no host but which has more ranks than one node of the
    // system holds ran over several nodes of it.
    let per_node = req.system.gpus_per_node.max(1);
    for f in files
        .iter_mut()
        .filter(|f| f.nodes == 1 && f.nranks > per_node)
    {
        if !f.nranks.is_multiple_of(per_node) {
            return Err(Error::field(
                &f.path,
                "header",
                format!(
                    "{} ranks, more than the {per_node} GPUs of one node of system '{}' and not a whole number of its nodes; keep the '# Rank ... on HOST device ...' lines so the hosts can be counted",
                    f.nranks, req.system.name
                ),
            ));
        }
        f.nodes = f.nranks / per_node;
    }
    for f in &files {
        check_gpus(f, &req.system)?;
        check_bus_bandwidth(f, &req.system)?;
    }
    // (op, nranks, dtype, bytes) → (µs, file, line): one measurement per size.
    let mut table: Measured = BTreeMap::new();
    for f in &files {
        for r in &f.rows {
            let key = (f.op.clone(), f.nranks, r.dtype.clone(), r.bytes);
            if let Some((_, _, p, l)) = table.get(&key) {
                return Err(Error::Conflict { first: format!("{} line {l}", crate::units::path(p)), second: format!("{} line {}", crate::units::path(&f.path), r.line), problem: format!("{} of {} B at {} ranks measured twice; keep one run per test and rank count", f.op, r.bytes, f.nranks) });
            }
            table.insert(
                key,
                (
                    r.us(req.column),
                    r.bytes / dtype_size(&r.dtype),
                    &f.path,
                    r.line,
                ),
            );
        }
    }
    same_size_conflicts(&table, &files)?;
    let out_dir = req
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    // The tables are written into a folder beside the final one and take its place only once
    // the profile that reads them is ready (`files::StagedFolder`): a refused or failed run
    // leaves the profile and tables that were there as they were.
    let tables_dir = out_dir.join("tables");
    let staged = crate::files::StagedFolder::new(&tables_dir)?;
    let stage = staged.path().to_path_buf();
    // Files of several nodes go to the multi-node table (cost::internode::MultiNodeTable),
    // keyed by their node count; the others replace the single-node rows.
    let nodes_of: BTreeMap<(String, u32), u32> = files
        .iter()
        .map(|f| ((f.op.clone(), f.nranks), f.nodes))
        .collect();
    let multi = |op: &String, n: &u32| nodes_of.get(&(op.clone(), *n)).copied().unwrap_or(1) > 1;
    let put = |name: &str, bytes: &[u8]| -> Result<()> {
        let path = stage.join(name);
        std::fs::write(&path, bytes).map_err(|source| Error::Write {
            path: tables_dir.join(name),
            source,
        })
    };
    let mut csv = String::from("op,impl,mode,dtype,nranks,elements,bytes,latency_us\n");
    let mut mn = format!("{}\n", crate::cost::internode::MULTINODE_HEADER);
    let (mut single_rows, mut multi_rows) = (0usize, 0usize);
    let mut measured: BTreeMap<(String, u32), usize> = BTreeMap::new();
    for ((op, n, dtype, bytes), (us, elements, _, _)) in &table {
        if multi(op, n) {
            let nodes = nodes_of[&(op.clone(), *n)];
            mn.push_str(&format!("{op},{nodes},{n},{dtype},{bytes},{us:.3}\n"));
            multi_rows += 1;
        } else {
            csv.push_str(&format!(
                "{op},nccl,unspecified,{dtype},{n},{elements},{bytes},{us:.3}\n"
            ));
            single_rows += 1;
            *measured.entry((op.clone(), *n)).or_default() += 1;
        }
    }
    // The base's tables that its profile prices from (`aiconfigurator.only` may leave some of
    // its folder's files unused: those stay unused).
    let base_uses = |name: &str| req.base.aic.as_ref().is_some_and(|t| t.has(name));
    let base_dir = req.base.aic.as_ref().map(|t| t.dir.clone());
    // The base's measured rows of the collectives and rank counts the files do not measure
    // stay: an all_reduce file alone must not turn a measured all_gather into a law's guess.
    let mut kept: BTreeMap<(String, u32), usize> = BTreeMap::new();
    if let Some(src) = base_dir
        .as_ref()
        .filter(|_| base_uses("nccl_collectives.csv"))
        .map(|d| d.join("nccl_collectives.csv"))
        .filter(|p| p.is_file())
    {
        for r in crate::measurements::read_aic_comm_csv(&src)? {
            let key = (r.op.clone(), r.nranks);
            if r.impl_name != "nccl" || measured.contains_key(&key) {
                continue;
            }
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{}\n",
                r.op, r.impl_name, r.mode, r.dtype, r.nranks, r.elements, r.bytes, r.latency_us
            ));
            single_rows += 1;
            *kept.entry(key).or_default() += 1;
        }
    }
    if single_rows > 0 {
        put("nccl_collectives.csv", csv.as_bytes())?;
    }
    // The base's multi-node table stays when no file here ran over several nodes.
    let mut kept_multinode = false;
    if multi_rows > 0 {
        put(crate::cost::internode::MULTINODE_CSV, mn.as_bytes())?;
    } else if let Some(src) = base_dir
        .as_ref()
        .filter(|_| base_uses(crate::cost::internode::MULTINODE_CSV))
        .map(|d| d.join(crate::cost::internode::MULTINODE_CSV))
        .filter(|p| p.is_file())
    {
        let bytes = std::fs::read(&src).map_err(|e| Error::Read {
            path: src.clone(),
            source: e,
        })?;
        put(crate::cost::internode::MULTINODE_CSV, &bytes)?;
        kept_multinode = true;
    }
    // The base's other tables come along (the section names one folder).
    let mut copied = Vec::new();
    let base_tables = req.base.aic.as_ref().map(|t| t.dir.clone());
    let mut base_manifest = String::new();
    if let Some(dir) = &base_tables {
        for name in [
            "moe.csv",
            "gemm.csv",
            "gemm_shapes.csv",
            "mla_generation.csv",
            "custom_allreduce.csv",
            "LICENSE",
            "NOTICE",
        ] {
            let used = match name {
                "gemm_shapes.csv" => base_uses("gemm.csv"),
                "LICENSE" | "NOTICE" => true,
                table => base_uses(table),
            };
            let src = dir.join(name);
            if used && src.is_file() {
                let bytes = std::fs::read(&src).map_err(|e| Error::Read {
                    path: src.clone(),
                    source: e,
                })?;
                put(name, &bytes)?;
                copied.push(name.to_string());
            }
        }
        base_manifest = std::fs::read_to_string(dir.join("MANIFEST.txt")).unwrap_or_default();
    }
    let curves_text = |m: &BTreeMap<(String, u32), usize>| {
        m.iter()
            .map(|((op, n), rows)| format!("{op} at {n} ranks ({rows} rows)"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let date = today();
    let column = req.column.name();
    let describe = |f: &NcclTestsFile| {
        format!(
            "{}{} ({}_perf, {} ranks{}{}, {} rows, {}{})",
            crate::units::path(&f.path),
            if f.line > 1 {
                format!(" from line {}", f.line)
            } else {
                String::new()
            },
            f.op,
            f.nranks,
            if f.nodes > 1 {
                format!(" on {} nodes", f.nodes)
            } else {
                String::new()
            },
            if f.gpus.is_empty() {
                String::new()
            } else {
                format!(" of {}", f.gpus.join(" / "))
            },
            f.rows.len(),
            f.threads_line,
            if f.versions.is_empty() {
                String::new()
            } else {
                format!("; {}", f.versions.join("; "))
            }
        )
    };
    let sources: Vec<String> = files.iter().map(describe).collect();
    let mut manifest = format!(
        "{}: collective table from nccl-tests, written by decodesim calibrate --from-nccl-tests on {date}\n\nnccl_collectives.csv: the {column} time of every row of\n",
        crate::units::path(&tables_dir)
    );
    for s in &sources {
        manifest.push_str(&format!("  {s}\n"));
    }
    manifest.push_str("  size = the nccl-tests size column (bytes of the whole buffer), elements = size / dtype size; latency_us = the time column (µs per operation)\n");
    if multi_rows > 0 {
        manifest.push_str(&format!(
            "\n{}: the rows of the files run over several nodes ({} rows; nodes = distinct hosts of their '# Rank' lines, or ranks / GPUs per node of system '{}' where they name none); they price collectives whose group spans nodes (cost::internode)\n",
            crate::cost::internode::MULTINODE_CSV,
            multi_rows,
            req.system.name
        ));
    }
    if !kept.is_empty() {
        manifest.push_str(&format!(
            "\nnccl_collectives.csv also keeps the base profile's measured rows of what the files above do not measure: {}\n",
            curves_text(&kept)
        ));
    }
    if kept_multinode {
        manifest.push_str(&format!(
            "\n{}: no file above ran over several nodes; the base profile's multi-node table is kept unchanged\n",
            crate::cost::internode::MULTINODE_CSV
        ));
    }
    if let Some(dir) = &base_tables {
        manifest.push_str(&format!(
            "\nCopied unchanged from {} ({}); its NCCL rows of the collectives measured above are replaced by the measurements. Its manifest follows.\n\n{base_manifest}",
            crate::units::path(dir),
            if copied.is_empty() { "nothing".to_string() } else { copied.join(", ") }
        ));
    }
    put("MANIFEST.txt", manifest.as_bytes())?;

    let mut aic = AicTables::read(&stage).map_err(|e| {
        // Checked above for what the files could get wrong; anything left is named by the
        // files it was made from, not the folder it was staged in.
        Error::Input {
            path: req.files[0].clone(),
            problem: format!(
                "the collective table made from the given file(s) does not load: {}",
                e.to_string().replace(
                    &stage.display().to_string(),
                    &tables_dir.display().to_string()
                )
            ),
        }
    })?;
    aic.dir = tables_dir.clone();
    let nvlink = req.system.interconnect.kind == LinkKind::Nvlink;
    let mut p = req.base.clone();
    super::from_throughput::relocate(&mut p, &req.base, &req.out);
    let mut sec = p.aiconfigurator.clone().unwrap_or(AicSection {
        tables: String::new(),
        system: "nccl-tests".into(),
        source: String::new(),
        nccl_path: CommPath::PcieP2p,
        nvlink,
        mla_dims: None,
        scales: Default::default(),
        only: None,
    });
    sec.tables = relative_to(&tables_dir, &out_dir);
    // A base restricted to some of its tables: the new collective tables join them.
    if let Some(only) = &mut sec.only {
        let written = [
            ("nccl_collectives.csv", single_rows > 0),
            (
                crate::cost::internode::MULTINODE_CSV,
                multi_rows > 0 || kept_multinode,
            ),
        ];
        for (name, w) in written {
            if w && !only.iter().any(|n| n == name) {
                only.push(name.to_string());
            }
        }
    }
    sec.nccl_path = if nvlink {
        CommPath::Nvlink
    } else {
        CommPath::PcieP2p
    };
    // An earlier anchoring scale of the old table does not apply to the new measurements.
    sec.scales.remove("collectives");
    // Nor do collective factors fitted to the old prices (a burst, throughput points): the
    // measured curve is the price steps use.
    p.factors.collective_latency_scale = 1.0;
    p.factors.collective_bw_scale = 1.0;
    let what = format!(
        "nccl_collectives.csv from nccl-tests ({column} column) of {}, written {date}",
        sources.join("; ")
    );
    sec.source = if sec.source.is_empty() {
        what.clone()
    } else {
        format!("{what}; other tables: {}", sec.source)
    };
    p.aiconfigurator = Some(sec);
    let base_aic = req.base.aic.clone();
    p.aic = Some(std::sync::Arc::new(aic));
    p.profile.name = req.name.clone().unwrap_or_else(|| {
        out_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "nccl-tests".into())
    });
    p.profile.description = format!(
        "profile '{}' with collectives priced from nccl-tests measurements of this machine",
        req.base.profile.name
    );
    p.profile.method = format!(
        "NCCL collectives: measured nccl-tests curves, interpolated per size as AIConfigurator's (cost::aic); {}",
        req.base.profile.method
    );
    p.profile.provenance = format!(
        "collectives measured with nccl-tests: {}; {}",
        sources.join("; "),
        req.base.profile.provenance
    );
    let mut t = toml::map::Map::new();
    let s = |x: &str| toml::Value::String(x.to_string());
    t.insert(
        "files".into(),
        toml::Value::Array(
            files
                .iter()
                .map(|f| s(&crate::units::path(&f.path)))
                .collect(),
        ),
    );
    t.insert(
        "versions".into(),
        toml::Value::Array(
            files
                .iter()
                .flat_map(|f| f.versions.iter().map(|v| s(v)))
                .collect(),
        ),
    );
    t.insert(
        "headers".into(),
        toml::Value::Array(files.iter().map(|f| s(&f.threads_line)).collect()),
    );
    t.insert(
        "gpus".into(),
        toml::Value::Array(
            files
                .iter()
                .map(|f| toml::Value::Integer(f.nranks as i64))
                .collect(),
        ),
    );
    t.insert(
        "nodes".into(),
        toml::Value::Array(
            files
                .iter()
                .map(|f| toml::Value::Integer(f.nodes as i64))
                .collect(),
        ),
    );
    t.insert("column".into(), s(column));
    t.insert("written".into(), s(&date));
    p.fit.insert("nccl_tests".into(), toml::Value::Table(t));

    let mut curves = Vec::new();
    let mut keys: Vec<(String, u32)> = files
        .iter()
        .filter(|f| f.nodes == 1)
        .map(|f| (f.op.clone(), f.nranks))
        .collect();
    keys.sort();
    keys.dedup();
    let aic = p.aic.clone();
    for (op, n) in keys {
        let Some(c) = aic.as_ref().and_then(|a| a.nccl_curve(&op, n)) else {
            continue;
        };
        let (first, last) = (c.pts[0], c.pts[c.pts.len() - 1]);
        let base_us = base_aic
            .as_ref()
            .and_then(|b| b.nccl_curve(&op, n))
            .and_then(|bc| {
                Some([
                    comm_price(&bc.pts, first.0)?.us,
                    comm_price(&bc.pts, last.0)?.us,
                ])
            });
        curves.push(Curve {
            op,
            nranks: n,
            rows: c.pts.len(),
            bytes: [first.0, last.0],
            us: [first.1, last.1],
            base_us,
            switch_bytes: c.switch_bytes(),
        });
    }
    let header = format!(
        "# Written by `decodesim calibrate --from-nccl-tests {}` from profile '{}' on {date}.\n# Collectives: {}",
        files.iter().map(|f| crate::units::path(&f.path)).collect::<Vec<_>>().join(" "),
        req.base.profile.name,
        what
    );
    let text = render_profile(&req.out, &header, &p)?;
    staged.commit(|| crate::files::write_atomic_bytes(&req.out, &text))?;
    Ok(NcclTestsResult {
        profile: p,
        tables_dir,
        files,
        curves,
        copied,
        measured: measured.into_iter().collect(),
        kept: kept.into_iter().collect(),
        kept_multinode,
        multinode_rows: multi_rows,
    })
}

/// The table prices a single-node (op, ranks) curve by message size alone, from its 2-byte
/// rows when it has any (`cost::aic`): two files (or logs) of one collective at one rank count
/// in dtypes of one size would give one size two prices. Refused here, by the user's files and
/// lines, rather than by the generated table when it is read back.
fn same_size_conflicts(table: &Measured, files: &[NcclTestsFile]) -> Result<()> {
    let single = |op: &str, n: u32| {
        files
            .iter()
            .any(|f| f.op == op && f.nranks == n && f.nodes == 1)
    };
    let two_byte = |op: &str, n: u32| {
        table
            .keys()
            .any(|(o, m, d, _)| o == op && *m == n && dtype_size(d) == 2)
    };
    // (op, ranks, bytes) → (µs, dtype, file, line) of the first row seen.
    type Seen<'a> = BTreeMap<(&'a str, u32, u64), (f64, &'a str, &'a Path, usize)>;
    let mut seen: Seen = BTreeMap::new();
    for ((op, n, dtype, bytes), (us, _, path, line)) in table {
        if !single(op, *n) || (two_byte(op, *n) && dtype_size(dtype) != 2) {
            continue;
        }
        match seen.get(&(op.as_str(), *n, *bytes)) {
            Some(&(v, d, p, l)) if v != *us => {
                return Err(Error::Conflict {
                    first: format!("{} line {l}", crate::units::path(p)),
                    second: format!("{} line {line}", crate::units::path(path)),
                    problem: format!(
                        "{op} of {bytes} B at {n} ranks measured in {d} and in {dtype} with different times ({v} and {us} µs); the table prices a collective by its size in bytes, so keep one data type per test and rank count"
                    ),
                })
            }
            Some(_) => {}
            None => {
                seen.insert((op, *n, *bytes), (*us, dtype, path, *line));
            }
        }
    }
    Ok(())
}

/// The GPU model of a name, its first word after the vendor (`H200`, `H100`, `RTX`).
fn gpu_model(name: &str) -> String {
    name.split_whitespace()
        .find(|w| !w.eq_ignore_ascii_case("nvidia"))
        .unwrap_or("")
        .to_ascii_uppercase()
}

/// The ranks' GPUs (the `# Rank` lines) are the system's: timings of another GPU would price
/// this machine's collectives.
fn check_gpus(f: &NcclTestsFile, system: &crate::scenario::SystemSpec) -> Result<()> {
    let want = gpu_model(&system.gpu.display_name);
    match f.gpus.iter().find(|g| gpu_model(g) != want) {
        None => Ok(()),
        Some(g) => Err(Error::field(
            &f.path,
            "# Rank lines",
            format!(
                "the ranks ran on '{g}', but system '{}' has {} GPUs ('{}'): these timings would price another GPU's collectives; pass the --system they were measured on",
                system.name, want, system.gpu.display_name
            ),
        )),
    }
}

/// No row moves data faster than the fastest link a rank has (twice it: NVLink SHARP reduces
/// in the switch and can beat the per-GPU rate, no file beats it twice): a faster row is a
/// unit mistake (ms read as µs, a wrong size column).
fn check_bus_bandwidth(f: &NcclTestsFile, system: &crate::scenario::SystemSpec) -> Result<()> {
    let ic = &system.interconnect;
    let link = ic
        .nvlink_gbps
        .max(ic.p2p_gbps_same_socket)
        .max(ic.p2p_gbps_cross_socket)
        .max(system.pcie_gbps());
    let n = f.nranks.max(2) as f64;
    let factor = match f.op.as_str() {
        "all_reduce" => 2.0 * (n - 1.0) / n,
        "all_gather" | "reduce_scatter" | "alltoall" => (n - 1.0) / n,
        _ => 1.0,
    };
    for r in &f.rows {
        let us = r.out_of_place_us.min(r.in_place_us);
        let bus = factor * r.bytes as f64 / (us * 1e3);
        if bus > 2.0 * link {
            return Err(Error::field(
                &f.path,
                format!("line {}", r.line),
                format!(
                    "{} B in {us} µs is {bus:.0} GB/s of bus bandwidth, more than twice the fastest link of system '{}' ({link:.0} GB/s); expected nccl-tests' times in µs of this machine",
                    r.bytes, system.name
                ),
            ));
        }
    }
    Ok(())
}

fn dtype_size(dtype: &str) -> u64 {
    TYPES.iter().find(|t| t.1 == dtype).map_or(1, |t| t.2)
}
