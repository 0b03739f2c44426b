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

pub(crate) mod channels;
mod checks;
mod reader;
mod tables;

use super::aiconfigurator::relative_to;
use super::output::{render_profile, today};
use crate::cost::aic::{comm_price, AicTables};
use crate::cost::profile::AicSection;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::system::LinkKind;
use crate::scenario::CommPath;
pub use channels::MeasuredChannels;
use checks::{check_bus_bandwidth, check_gpus, same_size_conflicts};
use reader::dtype_size;
pub use reader::{parse, parse_sections, read, read_sections, Column, NcclTestsFile, Row};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tables::{write_tables, Stage, WrittenTables};

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
    /// The channels NCCL ran the files' collectives on, as its log said (`--nccl-channels`);
    /// None: read from NCCL's INFO lines in the files, where they hold any.
    pub channels: Option<u32>,
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
    /// The channel count the written profile's `[nccl]` section states, and whose it is.
    pub channels: MeasuredChannels,
}

/// (op, ranks, dtype, bytes) → (µs, elements, file, line): one measurement per size.
type Measured<'a> = BTreeMap<(String, u32, String, u64), (f64, u64, &'a Path, usize)>;

/// Reads the files, writes `tables/` and the profile.
pub fn from_nccl_tests(req: &NcclTestsRequest) -> Result<NcclTestsResult> {
    let files = read_checked(req)?;
    let stated = channels::measured_channels(req.channels, &files)?;
    let table = measured_table(req, &files)?;
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
    let stage = Stage {
        dir: staged.path(),
        final_dir: &tables_dir,
    };
    let date = today();
    let sources: Vec<String> = files.iter().map(describe).collect();
    let written = write_tables(req, &files, &table, &stage, &sources, &date)?;
    let aic = load_staged(req, &stage)?;

    let what = format!(
        "nccl_collectives.csv from nccl-tests ({} column) of {}, written {date}",
        req.column.name(),
        sources.join("; ")
    );
    let mut p = req.base.clone();
    super::from_throughput::relocate(&mut p, &req.base, &req.out);
    let base_section = p.aiconfigurator.take();
    p.aiconfigurator = Some(aic_section(
        base_section,
        req,
        &tables_dir,
        &out_dir,
        &written,
        &what,
    ));
    // Nor do collective factors fitted to the old prices (a burst, throughput points): the
    // measured curve is the price steps use.
    p.factors.collective_latency_scale = 1.0;
    p.factors.collective_bw_scale = 1.0;
    p.aic = Some(std::sync::Arc::new(aic));
    let channels = channels::apply(
        &mut p.nccl,
        stated,
        req.system.interconnect.kind,
        &req.base.profile.name,
    );
    describe_profile(&mut p, req, &out_dir, &sources);
    p.fit.insert(
        "nccl_tests".into(),
        toml::Value::Table(fit_record(&files, req.column.name(), &date)),
    );

    let curves = written_curves(&files, p.aic.as_deref(), req.base.aic.as_deref());
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
        copied: written.copied,
        measured: written.measured.into_iter().collect(),
        kept: written.kept.into_iter().collect(),
        kept_multinode: written.kept_multinode,
        multinode_rows: written.multi_rows,
        channels,
    })
}

/// The staged tables loaded as the profile will read them from their final place.
fn load_staged(req: &NcclTestsRequest, stage: &Stage) -> Result<AicTables> {
    let mut aic = AicTables::read(stage.dir).map_err(|e| {
        // Checked above for what the files could get wrong; anything left is named by the
        // files it was made from, not the folder it was staged in.
        Error::Input {
            path: req.files[0].clone(),
            problem: format!(
                "the collective table made from the given file(s) does not load: {}",
                e.to_string().replace(
                    &stage.dir.display().to_string(),
                    &stage.final_dir.display().to_string()
                )
            ),
        }
    })?;
    aic.dir = stage.final_dir.to_path_buf();
    Ok(aic)
}

/// The profile's `[aiconfigurator]` section pointing at the new tables: `base` (the base
/// profile's), or a new one, with the machine's collective path; `what` says where the collective table came from.
fn aic_section(
    base: Option<AicSection>,
    req: &NcclTestsRequest,
    tables_dir: &Path,
    out_dir: &Path,
    written: &WrittenTables,
    what: &str,
) -> AicSection {
    let nvlink = req.system.interconnect.kind == LinkKind::Nvlink;
    let mut sec = base.unwrap_or(AicSection {
        tables: String::new(),
        system: "nccl-tests".into(),
        source: String::new(),
        nccl_path: CommPath::PcieP2p,
        nvlink,
        mla_dims: None,
        scales: Default::default(),
        only: None,
    });
    sec.tables = relative_to(tables_dir, out_dir);
    // A base restricted to some of its tables: the new collective tables join them.
    if let Some(only) = &mut sec.only {
        let tables = [
            ("nccl_collectives.csv", written.single_rows > 0),
            (
                crate::cost::internode::MULTINODE_CSV,
                written.multi_rows > 0 || written.kept_multinode,
            ),
        ];
        for (name, w) in tables {
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
    sec.source = if sec.source.is_empty() {
        what.to_string()
    } else {
        format!("{what}; other tables: {}", sec.source)
    };
    sec
}

/// The new profile's name (`--name`, else its folder's), description, method and provenance.
fn describe_profile(
    p: &mut CalibrationProfile,
    req: &NcclTestsRequest,
    out_dir: &Path,
    sources: &[String],
) {
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
}

/// Reads every file (each log of a file its own collective), infers the nodes of a file whose
/// rank lines name no host, and checks each against the system.
fn read_checked(req: &NcclTestsRequest) -> Result<Vec<NcclTestsFile>> {
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
    Ok(files)
}

/// The files' rows as one table, refused where two files measure the same size.
fn measured_table<'a>(req: &NcclTestsRequest, files: &'a [NcclTestsFile]) -> Result<Measured<'a>> {
    // (op, nranks, dtype, bytes) → (µs, file, line): one measurement per size.
    let mut table: Measured = BTreeMap::new();
    for f in files {
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
    Ok(table)
}

/// One file as the profile's provenance names it: path, first line, collective, ranks, nodes,
/// GPUs, rows, the header's threads line and versions.
fn describe(f: &NcclTestsFile) -> String {
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
}

/// The profile's `[fit.nccl_tests]` record: the files, their versions, headers, GPUs and
/// nodes, the time column and the date.
fn fit_record(
    files: &[NcclTestsFile],
    column: &str,
    date: &str,
) -> toml::map::Map<String, toml::Value> {
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
    t.insert("written".into(), s(date));
    t
}

/// The single-node curves written, each with its end points and the base table's price there.
fn written_curves(
    files: &[NcclTestsFile],
    aic: Option<&AicTables>,
    base_aic: Option<&AicTables>,
) -> Vec<Curve> {
    let mut curves = Vec::new();
    let mut keys: Vec<(String, u32)> = files
        .iter()
        .filter(|f| f.nodes == 1)
        .map(|f| (f.op.clone(), f.nranks))
        .collect();
    keys.sort();
    keys.dedup();
    for (op, n) in keys {
        let Some(c) = aic.and_then(|a| a.nccl_curve(&op, n)) else {
            continue;
        };
        let (first, last) = (c.pts[0], c.pts[c.pts.len() - 1]);
        let base_us = base_aic.and_then(|b| b.nccl_curve(&op, n)).and_then(|bc| {
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
    curves
}
