//! The pool and key commands: create, put, get, delete, scan, info, check.

use std::io::{IsTerminal, Read, Write};
use std::ops::Bound;
use std::path::Path;
use std::time::{Duration, Instant};

use pmindex::bench::report::{fmt_bytes, Align, Table};
use pmindex::engine::{EngineConfig, MAX_VALUE_LEN};
use pmindex::pm::cases;
use pmindex::pm::PersistConfig;
use pmindex::{Db, Options};
use serde_json::{json, Map, Value};

use super::error::CliError;
use super::output::{fmt_unix_ns, print_json, print_text, Output};
use super::parse::{parse_hex, to_hex};

/// How a command makes or opens its pool: the command line's persistence
/// settings and engine settings (`--engine-opt`, resolved for the engine).
pub struct How {
    pub persist: PersistConfig,
    pub config: EngineConfig,
    /// How long to wait for a handle that excludes this command's open
    /// (`--wait`).
    pub wait: Duration,
}

/// Whether a command changes its pool.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// `put`, `delete`: the pool is opened for writing, alone.
    Write,
    /// `get`, `scan`, `info`, `check`: opened read-only
    /// ([`Db::open_read_only`]), so that they never write the file (not
    /// even recovery's repairs of a damaged or crashed pool: they are made
    /// in memory) and run beside each other.
    Read,
}

/// Opens the pool at `path` as `how` says; while another process (or
/// handle) holds it, tries again every [`LOCK_RETRY`] until `how.wait` has
/// passed.
pub(super) fn open(path: &Path, how: &How, access: Access) -> Result<Db, CliError> {
    let opts = Options {
        persist: how.persist,
        engine_config: how.config.clone(),
        ..Options::default()
    };
    let deadline = Instant::now() + how.wait;
    loop {
        let r = match access {
            Access::Write => Db::open(path, &opts),
            Access::Read => Db::open_read_only(path, &opts),
        };
        match r {
            Err(pmindex::Error::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(
                    LOCK_RETRY.min(deadline.saturating_duration_since(Instant::now())),
                );
            }
            Err(e @ pmindex::Error::Locked { .. }) if !how.wait.is_zero() => {
                return Err(CliError::Failed(format!(
                    "{e}; waited {} s (--wait sets how long)",
                    how.wait.as_secs()
                )));
            }
            r => return Ok(r?),
        }
    }
}

/// How often [`open`] tries a pool that is held again.
const LOCK_RETRY: Duration = Duration::from_millis(20);

/// A key or value argument as bytes: UTF-8 as given, or decoded hex.
fn arg_bytes(out: Output, arg: &str, what: &str) -> Result<Vec<u8>, CliError> {
    if out.hex {
        parse_hex(arg).map_err(|m| CliError::Usage(format!("{what}: {m}")))
    } else {
        Ok(arg.as_bytes().to_vec())
    }
}

/// The bytes of `file` (`-`: standard input), for `put --value-file`. A
/// value longer than [`MAX_VALUE_LEN`] is refused after reading one byte
/// more than that, not the whole input.
fn value_from_file(file: &Path) -> Result<Vec<u8>, CliError> {
    let limit = MAX_VALUE_LEN as u64 + 1;
    let mut v = Vec::new();
    let read = if file == Path::new("-") {
        std::io::stdin().lock().take(limit).read_to_end(&mut v)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(limit).read_to_end(&mut v))
    };
    read.map_err(|e| CliError::Usage(format!("--value-file {}: {e}", file.display())))?;
    if v.len() > MAX_VALUE_LEN {
        return Err(CliError::Usage(format!(
            "--value-file {}: the value is longer than the limit of {MAX_VALUE_LEN} bytes",
            file.display()
        )));
    }
    Ok(v)
}

/// `pmindex create`.
pub fn create(
    out: Output,
    how: &How,
    path: &Path,
    engine: &str,
    size: u64,
) -> Result<(), CliError> {
    let db = Db::create(
        path,
        &Options {
            engine: Some(engine.to_string()),
            pool_size: size,
            persist: how.persist,
            engine_config: how.config.clone(),
            ..Options::default()
        },
    )?;
    let info = db.info();
    if out.json {
        return print_json(&info);
    }
    print_text(&format!(
        "created {}: engine {}, {} ({} bytes), uuid {}\n",
        path.display(),
        info.engine,
        fmt_bytes(info.pool_size),
        info.pool_size,
        info.uuid
    ))
}

/// `pmindex put`: the value is `value` (as `arg_bytes` reads it) or the
/// bytes of `value_file` (`-`: standard input).
pub fn put(
    out: Output,
    how: &How,
    path: &Path,
    key: &str,
    value: Option<&str>,
    value_file: Option<&Path>,
) -> Result<(), CliError> {
    let k = arg_bytes(out, key, "KEY")?;
    let v = match (value, value_file) {
        (_, Some(file)) => value_from_file(file)?,
        (Some(v), None) => arg_bytes(out, v, "VALUE")?,
        (None, None) => return Err(CliError::Usage("give a VALUE or --value-file".into())),
    };
    let db = open(path, how, Access::Write)?;
    let replaced = db.put(&k, &v)?;
    if out.json {
        let mut obj = Map::new();
        out.put_json(&mut obj, "key", &k);
        obj.insert("replaced".into(), Value::Bool(replaced));
        return print_json(&obj);
    }
    print_text(if replaced { "replaced\n" } else { "inserted\n" })
}

/// `pmindex get`.
pub fn get(out: Output, how: &How, path: &Path, keys: &[String]) -> Result<(), CliError> {
    let keys = keys
        .iter()
        .map(|k| arg_bytes(out, k, "KEY"))
        .collect::<Result<Vec<_>, _>>()?;
    let db = open(path, how, Access::Read)?;
    // One key prints its bare value; with --json, one key is an array of
    // one object like several (as the help says), below.
    if let ([k], false) = (keys.as_slice(), out.json) {
        let Some(v) = db.get(k)? else {
            return Err(CliError::KeyNotFound(out.text(k)));
        };
        if out.hex {
            return print_text(&format!("{}\n", to_hex(&v)));
        }
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(&v)?;
        if stdout.is_terminal() {
            stdout.write_all(b"\n")?;
        }
        stdout.flush()?;
        return Ok(());
    }
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let values = db.get_many(&refs)?;
    let absent: Vec<String> = keys
        .iter()
        .zip(&values)
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| out.text(k))
        .collect();
    if out.json {
        // An absent key is an object without a "value".
        let pairs: Vec<_> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| out.pair_json(k, v.as_deref()))
            .collect();
        print_json(&pairs)?;
    } else {
        let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
        for (k, v) in keys.iter().zip(&values) {
            if let Some(v) = v {
                writeln!(stdout, "{}\t{}", out.text(k), out.text(v))?;
            }
        }
        stdout.flush()?;
    }
    match <[String; 1]>::try_from(absent) {
        Ok([one]) => Err(CliError::KeyNotFound(one)),
        Err(absent) if absent.is_empty() => Ok(()),
        Err(absent) => Err(CliError::KeysNotFound(absent)),
    }
}

/// `pmindex delete`.
pub fn delete(out: Output, how: &How, path: &Path, key: &str) -> Result<(), CliError> {
    let k = arg_bytes(out, key, "KEY")?;
    let db = open(path, how, Access::Write)?;
    if !db.delete(&k)? {
        return Err(CliError::KeyNotFound(out.text(&k)));
    }
    if out.json {
        let mut obj = Map::new();
        out.put_json(&mut obj, "key", &k);
        obj.insert("deleted".into(), Value::Bool(true));
        return print_json(&obj);
    }
    print_text("deleted\n")
}

/// The range options of `pmindex scan`.
#[derive(Debug)]
pub struct ScanRange<'a> {
    pub from: Option<&'a str>,
    pub from_excluded: bool,
    pub to: Option<&'a str>,
    pub to_included: bool,
    pub limit: Option<usize>,
}

/// `pmindex scan`. Text is written as the pairs arrive; JSON is one array.
pub fn scan(out: Output, how: &How, path: &Path, range: &ScanRange<'_>) -> Result<(), CliError> {
    let from = range
        .from
        .map(|s| arg_bytes(out, s, "--from"))
        .transpose()?;
    let to = range.to.map(|s| arg_bytes(out, s, "--to")).transpose()?;
    let lo = match &from {
        None => Bound::Unbounded,
        Some(k) if range.from_excluded => Bound::Excluded(k.as_slice()),
        Some(k) => Bound::Included(k.as_slice()),
    };
    let hi = match &to {
        None => Bound::Unbounded,
        Some(k) if range.to_included => Bound::Included(k.as_slice()),
        Some(k) => Bound::Excluded(k.as_slice()),
    };
    let limit = range.limit.unwrap_or(usize::MAX);
    let db = open(path, how, Access::Read)?;
    if limit == 0 {
        return if out.json {
            print_json(&Value::Array(Vec::new()))
        } else {
            Ok(())
        };
    }
    if out.json {
        let mut pairs = Vec::new();
        db.scan_with(lo, hi, |k, v| {
            pairs.push(out.pair_json(k, Some(v)));
            pairs.len() < limit
        })?;
        return print_json(&pairs);
    }
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut count = 0;
    let mut write_err = None;
    db.scan_with(lo, hi, |k, v| {
        if let Err(e) = writeln!(stdout, "{}\t{}", out.text(k), out.text(v)) {
            write_err = Some(e);
            return false;
        }
        count += 1;
        count < limit
    })?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    stdout.flush()?;
    Ok(())
}

/// `pmindex info`.
pub fn info(out: Output, how: &How, path: &Path) -> Result<(), CliError> {
    let db = open(path, how, Access::Read)?;
    let info = db.info();
    let h = *db.pool().header();
    let description = pmindex::engine::find(&info.engine)
        .map(|e| e.paper)
        .unwrap_or("");
    let dram_bytes = db.stats().dram_bytes;
    // The live value (the cached header holds the one read at open).
    let frontier = (h.version >= 2)
        .then(|| db.pool().load_u64(pmindex::pm::header::FRONTIER_OFFSET))
        .transpose()?;
    let magic = String::from_utf8_lossy(&h.magic)
        .trim_end_matches('\0')
        .to_string();
    if out.json {
        let mut v = serde_json::to_value(&info).map_err(std::io::Error::from)?;
        if let Value::Object(obj) = &mut v {
            obj.insert("created".into(), json!(fmt_unix_ns(info.created_unix_ns)));
            obj.insert("engine_description".into(), json!(description));
            obj.insert("dram_bytes".into(), json!(dram_bytes));
            obj.insert(
                "header".into(),
                json!({
                    "magic": magic,
                    "version": h.version,
                    "header_size": h.header_size,
                    "engine": h.engine_id(),
                    "pool_size": h.pool_size,
                    "uuid": h.uuid_string(),
                    "created_unix_ns": h.created_unix_ns,
                    "lanes_offset": h.lanes_offset,
                    "lane_count": h.lane_count,
                    "desc_offset": h.desc_offset,
                    "bitmap_offset": h.bitmap_offset,
                    "heap_offset": h.heap_offset,
                    "chunk_count": h.chunk_count,
                    "chunk_size": h.chunk_size,
                    "checksum": h.checksum,
                    "roots": h.roots,
                    "heap_frontier": frontier,
                }),
            );
        }
        return print_json(&v);
    }

    let u = &info.usage;
    let mut s = String::new();
    let mut line = |name: &str, value: String| {
        s.push_str(&format!("{name:<12}{value}\n"));
    };
    line("pool", info.path.clone().unwrap_or_else(|| "-".into()));
    line(
        "engine",
        if description.is_empty() {
            info.engine.clone()
        } else {
            format!("{} ({description})", info.engine)
        },
    );
    if !info.settings.is_empty() {
        line(
            "settings",
            info.settings
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    line("uuid", info.uuid.clone());
    line(
        "created",
        format!(
            "{} ({} ns since the epoch)",
            fmt_unix_ns(info.created_unix_ns),
            info.created_unix_ns
        ),
    );
    line(
        "size",
        format!("{} ({} bytes)", fmt_bytes(info.pool_size), info.pool_size),
    );
    line("mapping", info.mapping.to_string());
    line("flush", info.flush.to_string());
    line("keys", info.keys.to_string());
    line("index DRAM", fmt_bytes(dram_bytes));
    line(
        "header",
        format!(
            "magic {magic:?}, format version {}, {} bytes, checksum {:#018x}",
            h.version, h.header_size, h.checksum
        ),
    );
    line(
        "layout",
        format!(
            "lanes @{:#x} ({} x 64 B), chunk descriptors @{:#x}, bitmaps @{:#x}, heap @{:#x}",
            h.lanes_offset, h.lane_count, h.desc_offset, h.bitmap_offset, h.heap_offset
        ),
    );
    line(
        "heap",
        format!(
            "{} chunks of {} ({}), {} free, {}",
            h.chunk_count,
            fmt_bytes(h.chunk_size),
            fmt_bytes(u.heap_bytes),
            u.free_chunks,
            match frontier {
                Some(f) => format!("never used from chunk {f} on"),
                None => "no frontier (format version 1)".to_string(),
            }
        ),
    );
    let roots: Vec<String> = h
        .roots
        .iter()
        .enumerate()
        .filter(|(_, &r)| r != 0)
        .map(|(i, r)| format!("{i}={r:#x}"))
        .collect();
    line(
        "roots",
        if roots.is_empty() {
            "none set".into()
        } else {
            roots.join(", ")
        },
    );
    line(
        "allocated",
        format!(
            "{} in blocks ({} of the heap)",
            fmt_bytes(u.bytes_in_use()),
            percent(u.bytes_in_use(), u.heap_bytes)
        ),
    );
    s.push('\n');
    let mut t = Table::new(&[
        ("class", Align::Left),
        ("block size", Align::Right),
        ("blocks", Align::Right),
        ("bytes", Align::Right),
        ("chunks", Align::Right),
    ]);
    for (i, c) in u.classes.iter().enumerate() {
        t.row(vec![
            i.to_string(),
            fmt_bytes(c.block_size),
            c.blocks.to_string(),
            fmt_bytes(c.bytes),
            c.chunks.to_string(),
        ]);
    }
    t.row(vec![
        "large".into(),
        format!("n x {}", fmt_bytes(h.chunk_size)),
        u.large_blocks.to_string(),
        fmt_bytes(u.large_bytes),
        String::new(),
    ]);
    s.push_str(&t.to_string());
    print_text(&s)
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "0%".into();
    }
    format!("{:.2}%", part as f64 * 100.0 / whole as f64)
}

/// `pmindex check`.
pub fn check(out: Output, how: &How, path: &Path) -> Result<(), CliError> {
    // What recovery repairs at this open, from the process-wide counts of
    // recovery cases (this command opens one pool).
    let before = cases::snapshot();
    let db = open(path, how, Access::Read)?;
    let repaired: Vec<_> = cases::since(&before)
        .into_iter()
        .filter(|(c, _)| c.is_repair())
        .collect();
    let report = db.check()?;
    let blocks = report.referenced_blocks.len();
    if out.json {
        let repaired: Map<String, Value> = repaired
            .iter()
            .map(|&(c, n)| (c.name().to_string(), json!(n)))
            .collect();
        return print_json(&json!({
            "ok": true,
            "keys": report.keys,
            "blocks": blocks,
            "repaired_at_open": repaired,
        }));
    }
    let mut text = format!("ok: {} keys and {blocks} blocks checked\n", report.keys);
    if !repaired.is_empty() {
        text.push_str("recovery repaired at open (in memory: the file is unchanged):\n");
        for (c, n) in &repaired {
            text.push_str(&format!("  {}: {n}\n", c.describe()));
        }
        text.push_str(
            "a crash leaves about one repair per write in flight; many more point to damage\n",
        );
    }
    print_text(&text)
}
